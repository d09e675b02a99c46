"""Your own checkpoint, end to end in a real browser: train a folder checkpoint on pictures drawn here, serve the
app with WVIZ_DATA naming the folder that holds them, upload the checkpoint on the Uncertainty inspector, and see
the test-set browser on that folder's test split (its class names) and the dataset panel's figures."""
from tests.e2e.harness import running_app, wait_until_idle

PANEL = {"OOD scores": ["OOD score 'max-softmax': test images vs sample-image crops"],   # the panel's views
         "Corruptions": ["Test error under corruption", "Does 'max-softmax' see the corruption?"],
         "Reliability": ["Reliability diagram on the test split"],
         "Confusion": ["Confusion matrix on the test split"]}
TITLES = "() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(gd => gd.layout.title.text)"  # in <b>


def train_folder_checkpoint(tmp_path):
    """A stochastic ViT trained for 3 steps (one epoch of 24 pictures, batches of 8) on shapes/train/<class>/:
    the folder and the checkpoint's bytes."""
    from wviz.vit import shapes, train

    root = shapes.write_folder(tmp_path / "data" / "shapes", train=8, test=4)
    out = tmp_path / "shapes.safetensors"
    train.main(["--data", "folder", "--data-root", str(root), "--epochs", "1", "--batch", "8", "--dim", "16",
                "--depth", "1", "--heads", "2", "--patch", "8", "--eval-samples", "4", "--no-eval", "--no-progress",
                "--out", str(out)])
    return root, out.read_bytes()


def upload_checkpoint(page, url: str, raw: bytes) -> None:
    page.goto(f"{url}/uncertainty_inspector?ckpt=upload")
    wait_until_idle(page)
    box = page.locator('[data-testid="stFileUploader"]').filter(has_text="Checkpoint file")
    box.locator('input[type="file"]').set_input_files(files=[{"name": "shapes.safetensors", "buffer": raw,
                                                              "mimeType": "application/octet-stream"}])
    page.wait_for_timeout(1000)
    wait_until_idle(page)  # through the dataset panel's progress bar


def test_a_folder_checkpoint_shows_its_own_test_split_and_panel(tmp_path, monkeypatch, page):
    from wviz.vit.shapes import CLASSES

    root, raw = train_folder_checkpoint(tmp_path)
    monkeypatch.setenv("WVIZ_DATA", str(root.parent))  # the server inherits it (harness.serving)
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    with running_app() as url:
        upload_checkpoint(page, url, raw)
        # the folder's panel: on a loaded machine its evaluation can start after upload_checkpoint's idle wait
        page.wait_for_function(f"() => ({TITLES})().some(t => t && t.includes('OOD score') && "
                               "t.includes('test images vs'))", timeout=120_000)
        wait_until_idle(page)
        exceptions = page.locator('[data-testid="stException"]')
        assert exceptions.count() == 0, exceptions.first.inner_text()
        assert not errors, errors
        assert page.locator('[data-testid="stAlertContentError"]').count() == 0
        sidebar = page.locator('[data-testid="stSidebar"]')
        # the note quotes a path as text (ui.plain: invisible word joiners keep it from becoming a link)
        assert f"'shapes' found through WVIZ_DATA at {root}" in sidebar.inner_text().replace("\u2060", "")
        # the test-set browser: the folder's 12 test pictures, image 1 a circle, the classes by their names
        assert page.locator(".st-key-index input").get_attribute("max") == "12"   # 12 test images, counted from 1
        assert "True class: circle" in page.locator('[data-testid="stMain"]').inner_text()
        for view, wanted in PANEL.items():
            page.locator(".st-key-panel button").filter(has_text=view).click()
            wait_until_idle(page)
            charts = page.evaluate("() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(gd => "
                                   "[gd.layout.title.text, gd.data.map(t => t.x)])")
            titles = [t for t, _ in charts]
            assert all(any(want in t for t in titles) for want in wanted), (view, titles)
        probs = next(x for t, x in charts if "Class probabilities" in t)
        confusion = next(x for t, x in charts if "Confusion matrix" in t)
        assert probs == [list(CLASSES)] and confusion == [list(CLASSES)]
        # the next test image: its class comes from the same folder
        page.locator(".st-key-index input").fill("11")
        page.locator(".st-key-index input").press("Enter")
        wait_until_idle(page)
        assert "True class: triangle" in page.locator('[data-testid="stMain"]').inner_text()
        assert page.locator('[data-testid="stException"]').count() == 0 and not errors
