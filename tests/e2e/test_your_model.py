"""Your model, end to end in a real browser: the server's WVIZ_MODELS points at tiny random models of each family
(wviz.models.tiny: an encoder, a decoder, an image classifier), each is chosen in the Real transformer page's model
selector, tau moves, and the page draws the model's maps (on its 2 layers and 4 heads) with no exception."""
import pytest

from tests.e2e.harness import running_app, wait_until_idle

KINDS = ("bert", "gpt2", "vit")
# The page's first two charts: the maps a tau move leaves standing, then the main figure's, which it redraws
NORMALISERS = ["original: softmax (tau = 1)", "sinkhorn (gamma = 1, 5 iterations)", "sparsemax (tau = 1)",
               "entmax (alpha = 1.5, tau = 1)"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from wviz.models import tiny

    root = tmp_path_factory.mktemp("models")
    for kind in KINDS:
        tiny.save(kind, root / f"tiny-{kind}")
    return root


def choose_model(page, name: str) -> None:
    """Open the sidebar's Model selector and click the option whose label starts with ``name``."""
    page.locator(".st-key-model").get_by_role("combobox").click()
    page.get_by_role("option").filter(has_text=f"{name} (").first.click()
    wait_until_idle(page)


def move_tau(page) -> None:
    """One step of the tau slider to the right, by keyboard, as a user would."""
    thumb = page.locator(".st-key-tau").get_by_role("slider")
    thumb.focus()
    thumb.press("ArrowRight")
    wait_until_idle(page)


# The first two charts' traces (one head under every normaliser) as Plotly drew them: name and weights (rows of z)
MAPS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).slice(0, 2).flatMap(gd => gd._fullData.map(
    t => ({name: t.name, z: Array.from(t.z || [], row => Array.from(row))})))"""


def maps(page) -> list:
    page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length >= 2 && "
                           "Array.from(document.querySelectorAll('.js-plotly-plot')).every(gd => gd._fullData)")
    return page.evaluate(MAPS)


def no_exception(page, errors) -> None:
    exceptions = page.locator('[data-testid="stException"]')
    assert exceptions.count() == 0, exceptions.first.inner_text()
    assert not errors, errors


def test_each_family_from_the_selector_tau_moves_the_maps(models, monkeypatch, page):
    monkeypatch.setenv("WVIZ_MODELS", str(models))   # the server inherits it (harness.serving)
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    with running_app() as url:
        page.goto(f"{url}/real_transformer")
        wait_until_idle(page)
        assert [t["name"] for t in maps(page)] == NORMALISERS                    # the bundled MiniLM first
        for kind in KINDS:
            choose_model(page, f"tiny-{kind}")
            no_exception(page, errors)
            assert f"tiny-{kind} (" in page.locator('[data-testid="stMain"]').inner_text()
            assert "model=folder" in page.url and f"tiny-{kind}" in page.url    # the link names the model
            before = maps(page)
            names = [t["name"] for t in before]
            assert names[0] == NORMALISERS[0] and [x.split(" (")[0] for x in names[1:]] == ["sinkhorn", "sparsemax",
                                                                                          "entmax"], names
            n = len(before[0]["z"])
            assert n == len(before[0]["z"][0]) == (17 if kind == "vit" else n) and n > 3
            move_tau(page)                                                         # one step of tau's grid
            after = maps(page)
            assert after[:2] == before[:2]                                         # the original, sinkhorn: no tau
            assert after[2]["z"] != before[2]["z"] and after[2]["name"] != names[2]
            if kind == "gpt2":                                                     # the causal mask
                assert all(w == 0 for t in after for i, row in enumerate(t["z"]) for w in row[i + 1:])
            no_exception(page, errors)


def test_a_link_s_model_name_is_shown_as_text(server, page):
    """A ?model= value is quoted in the page's warning as the characters it is (ui.plain): no bold, no working link,
    no image, no colour directive, no LaTeX (issue 49: a link once drew a 'sign in again' link inside the warning)."""
    from urllib.parse import quote

    injected = ("x). **Your session expired: [sign in again](https://evil.example/login)** :red[alarm] "
                "![](https://evil.example/t.png) $x^2$ (")
    page.goto(f"{server}/real_transformer?model={quote(injected)}")
    wait_until_idle(page)
    warning = page.locator('[data-testid="stAlert"]').filter(has_text="The link names a model")
    assert injected in warning.inner_text().replace("\u2060", "")   # ui.plain's word joiners break autolinks
    assert warning.locator("strong, a, img, .katex, span[style]").count() == 0
    assert page.locator('a[href*="evil.example"], img[src*="evil.example"]').count() == 0


def model_zip(folder, config=None, processor=None) -> bytes:
    """A .zip of the model ``folder`` (under its own name) with keys of config.json and preprocessor_config.json
    changed."""
    import json

    from tests.zips import zipped

    files = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    for name, change in (("config.json", config), ("preprocessor_config.json", processor)):
        if change:
            files[name] = json.dumps(json.loads(files[name]) | change).encode()
    return zipped({f"{folder.name}/{name}": raw for name, raw in files.items()})


def upload(page, name: str, raw: bytes) -> None:
    box = page.locator('[data-testid="stFileUploader"]').filter(has_text="Model folder as a .zip")
    box.locator('input[type="file"]').set_input_files(files=[{"name": name, "mimeType": "application/zip",
                                                               "buffer": raw}])
    wait_until_idle(page)


def kib(pid: int, field: str) -> int:
    """A field of /proc/<pid>/status in KiB: VmRSS now, VmHWM the peak since the start or since it was reset."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def test_two_hostile_uploads_then_a_good_model_draws_and_the_server_stays_small(models, page):
    """Issue 49 in a real browser: an image model whose preprocessor_config.json asks for 30000 x 30000 pictures (it
    once took the server to 22 GB) and a BERT with num_hidden_layers -1 (it once broke every later model of the
    session) are refused with their sentence, the server's peak memory while it reads them stays within 100 MB of
    what it held before, and a good model uploaded next draws its maps."""
    from tests.e2e.harness import serving

    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    hostile = [("huge-pictures.zip", model_zip(models / "tiny-vit", processor={"size": 30000}),
                "preprocessor_config.json's size must give picture sides of 1 to 518 pixels"),
               ("minus-one-layer.zip", model_zip(models / "tiny-bert", config={"num_hidden_layers": -1}),
                "num_hidden_layers must be a whole number from 1 to 256, not -1")]
    with serving() as (url, proc):
        page.goto(f"{url}/real_transformer")
        wait_until_idle(page)
        maps(page)                                                        # MiniLM drawn: its memory is held
        choose_model(page, "Upload a model")
        before = kib(proc.pid, "VmRSS")
        with open(f"/proc/{proc.pid}/clear_refs", "w") as f:
            f.write("5")                                                  # VmHWM from here on (proc(5))
        for name, raw, sentence in hostile:
            upload(page, name, raw)
            alert = page.locator('[data-testid="stAlert"]').filter(has_text="The model folder has a problem")
            assert sentence in alert.inner_text().replace("\u2060", ""), alert.all_inner_texts()
            no_exception(page, errors)
        peak = kib(proc.pid, "VmHWM")
        assert peak - before < 100 * 1024, f"the server grew from {before // 1024} to {peak // 1024} MB"
        upload(page, "tiny-gpt2.zip", model_zip(models / "tiny-gpt2"))
        assert "tiny-gpt2 (" in page.locator('[data-testid="stMain"]').inner_text()
        names = [t["name"] for t in maps(page)]
        assert names[0] == NORMALISERS[0] and len(names) == 4
        no_exception(page, errors)
