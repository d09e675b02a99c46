"""The "Real transformer" page through AppTest: its heatmaps against transformers' own eager attention of an
independently loaded MiniLM, sparsemax against numpy, Sinkhorn's marginals, bad input, the models on offer."""
import json
import math
import re

import numpy as np
import pytest
import torch
from scipy.special import softmax

from tests.app.conftest import (bundle_figures, check_views, figure_titled, figures, no_exception, open_link,
                                shown_table, shown_text)
from wviz.figures.common import number_text
from wviz.models import minilm
from wviz.views import real_transformer as rv

PAGE = "real_transformer.py"
SENTENCE = "The cat sat on the mat and watched the rain."


@pytest.fixture(scope="module")
def reference():
    from transformers import AutoModel, AutoTokenizer

    path = minilm.model_dir()
    model = AutoModel.from_pretrained(path, local_files_only=True, attn_implementation="eager").eval()
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)

    def run(sentence):
        enc = tok([sentence], return_tensors="pt")
        with torch.no_grad():
            out = model(**enc, output_attentions=True, output_hidden_states=True)
        x = out.hidden_states[0][0].double()
        sa = model.encoder.layer[0].attention.self

        def heads(lin):
            return (x @ lin.weight.detach().double().T + lin.bias.detach().double()).reshape(-1, 12, 32).transpose(0, 1)

        scores0 = (heads(sa.query) @ heads(sa.key).mT / math.sqrt(32)).numpy()   # layer 0, (H, n, n)
        return torch.stack(out.attentions)[:, 0].numpy(), scores0               # (L, H, n, n)

    return run, tok


def panels(at):
    """The heatmaps of the per-head figures, as the page draws them: the maps tau does not change (the original,
    Sinkhorn), then the main figure's (softmax / tau, sparsemax, entmax), subplot title -> matrix; and the first
    of the two figures."""
    figs = [f for f in figures(at) if f["layout"]["title"]["text"].startswith("Layer ")]
    assert len(figs) <= 2 and ": original" in figs[0]["layout"]["title"]["text"]
    return {t["name"]: np.asarray(t["z"], dtype=float) for f in figs for t in f["data"] if t["type"] == "heatmap"}, \
        figs[0]


def sparsemax_np(s):
    z = np.sort(s, axis=-1)[..., ::-1]
    k = np.arange(1, s.shape[-1] + 1)
    cs = np.cumsum(z, axis=-1)
    kstar = ((1 + k * z) > cs).sum(axis=-1, keepdims=True)
    return np.maximum(s - (np.take_along_axis(cs, kstar - 1, axis=-1) - 1) / kstar, 0)


def test_default_page_matches_the_reference_model(open_page, reference):
    run, _ = reference
    at = open_page(PAGE, timeout=300)
    attn, S0 = run(SENTENCE)
    maps, fig = panels(at)
    # first the maps a tau move leaves standing, then the main figure's, which it redraws
    assert list(maps) == ["original: softmax (tau = 1)", "sinkhorn (gamma = 1, 5 iterations)", "sparsemax (tau = 1)",
                          "entmax (alpha = 1.5, tau = 1)"]
    assert fig["layout"]["title"]["text"].startswith("Layer 1, head 1")
    assert [t["name"] for t in figure_titled(at, "Layer 1, head 1: normalisers of S / tau")["data"]] == [
        "sparsemax (tau = 1)", "entmax (alpha = 1.5, tau = 1)"]
    np.testing.assert_allclose(maps["original: softmax (tau = 1)"], attn[0, 0], atol=2e-6)
    np.testing.assert_allclose(maps["sparsemax (tau = 1)"], sparsemax_np(S0[0]), atol=2e-5)
    sk = maps["sinkhorn (gamma = 1, 5 iterations)"]
    np.testing.assert_allclose(sk.sum(axis=1), 1, atol=1e-5)          # rows exactly
    assert np.abs(sk.sum(axis=0) - 1).max() < 0.05                      # columns nearly, after 5 iterations
    # sparsity figure (the first view): the original panel has no zeros, sparsemax's layer 0 equals numpy's count
    sp = figure_titled(at, "Sparsity per head")
    z = {t["name"]: np.asarray(t["z"], dtype=float) for t in sp["data"]}
    assert z["original"].max() == 0
    np.testing.assert_allclose(z["sparsemax (tau = 1)"][0], (sparsemax_np(S0) == 0).mean(axis=(-2, -1)), atol=1e-3)
    # the table (the second view): one row per normaliser, softmax-free normalisers change the embedding
    at.segmented_control(key=rv.Keys.VIEW).set_value(rv.Labels.LAYERS.format("sentence")).run()
    table = at.dataframe[0].value
    assert list(table["normaliser"]) == ["sparsemax (tau = 1)", "entmax (alpha = 1.5, tau = 1)",
                                         "sinkhorn (gamma = 1, 5 iterations)"]          # the sidebar's order
    emb = minilm.sentence_embedding(SENTENCE, "sparsemax", device="cpu").double().numpy()
    ref = minilm.sentence_embedding(SENTENCE, device="cpu").double().numpy()
    assert abs(table["cosine to the original embedding"][0] - emb @ ref) < 1e-6


def test_layer_head_and_tau(open_page, reference):
    run, _ = reference
    at = open_page(PAGE, timeout=300)
    at.sidebar.selectbox(key=rv.Keys.LAYER).set_value(5)               # layers and heads counted from 1
    at.sidebar.selectbox(key=rv.Keys.HEAD).set_value(8)
    at.sidebar.multiselect(key=rv.Keys.NORMALISERS).set_value(["softmax"])
    at.sidebar.select_slider(key=rv.Keys.TAU).set_value(0.464).run()   # an option of the log grid
    no_exception(at)
    attn, S0 = run(SENTENCE)
    maps, fig = panels(at)
    assert fig["layout"]["title"]["text"].startswith("Layer 5, head 8")
    np.testing.assert_allclose(maps["original: softmax (tau = 1)"], attn[4, 7], atol=2e-6)
    assert list(maps)[1] == "softmax (tau = 0.464)"
    at.sidebar.selectbox(key=rv.Keys.LAYER).set_value(1).run()
    maps, _ = panels(at)
    np.testing.assert_allclose(maps["softmax (tau = 0.464)"], softmax(S0[7] / 0.464, axis=-1), atol=2e-5)


@pytest.mark.parametrize("text, match", [("", "empty"), ("word " * 600, "at most 512")])
def test_bad_sentence_keeps_the_last_good_state(open_page, text, match):
    at = open_page(PAGE, timeout=300)
    before, _ = panels(at)
    at.text_input(key=rv.Keys.SENTENCE).set_value(text).run()
    no_exception(at)
    assert any(match in shown_text(e) for e in at.error)
    after, _ = panels(at)
    for k in before:
        np.testing.assert_array_equal(after[k], before[k])


def test_no_normaliser_chosen(open_page):
    at = open_page(PAGE, timeout=300)
    at.sidebar.multiselect(key=rv.Keys.NORMALISERS).set_value([]).run()
    no_exception(at)
    assert any("at least one normaliser" in shown_text(e) for e in at.error)


def test_sinkhorn_alone_has_no_main_figure(open_page):
    """Sinkhorn has no tau: its map and the original's are drawn, and no figure of the normalisers of S / tau,
    with a sentence saying why tau changes nothing."""
    at = open_page(PAGE, timeout=300, normalisers=rv.shown("sinkhorn"))
    maps, _ = panels(at)
    assert list(maps) == ["original: softmax (tau = 1)", "sinkhorn (gamma = 1, 5 iterations)"]
    titles = [f["layout"]["title"]["text"] for f in figures(at)]
    assert not [t for t in titles if "normalisers of S / tau" in t], titles
    assert any(shown_text(c).startswith("tau enters none of the chosen normalisers") for c in at.caption)


def test_views_one_at_a_time_from_the_url_and_all_in_the_bundle(open_page):
    at = open_page(PAGE, timeout=300, view=rv.Labels.LAYERS.format("sentence"))
    titles = [f["layout"].get("title", {}).get("text", "") for f in figures(at)]
    assert not [t for t in titles if t.startswith("Sparsity per head")], titles
    maps = ["maps_fixed", "maps"]
    check_views(at, rv.Keys.VIEW, {rv.Labels.SPARSITY: [*maps, "sparsity"],
                                   rv.Labels.LAYERS.format("sentence"): [*maps, "distances"],
                                   rv.Labels.CLICK: maps, rv.Labels.RHO: [*maps, "rho_sweep"],
                                   rv.Labels.SINKS: [*maps, "sinks"]})


def test_the_linked_view_draws_the_altair_chart_of_the_head(open_page, reference):
    """The "Click a query" view: a Vega-Lite chart with the point selection on the query field and its bars filtered
    by it; its data (sent to the browser as Arrow) holds every (normaliser, query, key) weight of the head, the
    original's equal to transformers' own attention."""
    import pyarrow as pa

    run, _ = reference
    at = open_page(PAGE, timeout=300, view=rv.Labels.CLICK)
    (chart,) = at.get("vega_lite_chart")
    spec = json.loads(chart.proto.spec)
    assert [q["name"] for q in spec["params"]] == ["query_row", "heatmap_of"]
    assert spec["params"][0]["select"]["fields"] == ["query"]
    assert spec["vconcat"][1]["transform"][0]["filter"]["param"] == "query_row"
    (data,) = [d.data.data for d in chart.proto.datasets] or [chart.proto.data.data]   # the chart's one table
    rows = pa.ipc.open_stream(data).read_all().to_pandas()
    maps, _ = panels(at)
    labels = spec["vconcat"][1]["encoding"]["x"]["sort"]
    assert len(rows) == len(maps) * len(labels) ** 2 and set(rows["normaliser"]) == set(maps)
    for name, A in maps.items():
        got = rows[rows["normaliser"] == name].pivot(index="query", columns="key", values="weight")
        np.testing.assert_allclose(got.loc[labels, labels].to_numpy(), A, atol=1e-7)
    attn, _ = run(SENTENCE)
    np.testing.assert_allclose(maps["original: softmax (tau = 1)"], attn[0, 0], atol=2e-6)
    assert not [f for f in figures(at) if f["layout"]["title"]["text"].startswith("Sparsity per head")]


@pytest.mark.parametrize("item", rv.TRY_THIS, ids=lambda t: t.label)
def test_try_this_links_open_the_page_in_their_state(item, monkeypatch):
    """Each guided link, opened as the browser would (its query string), sets its widgets (the normalisers by
    their labels, as the multiselect writes the URL), and what its sentence asks to watch is in the heatmaps."""
    at = open_link(PAGE, item, monkeypatch)
    key_of = {label: name for name, label in rv.CHOICES.items()}
    for key, value in item.params.items():
        want = [key_of[v] for v in value] if key == rv.Keys.NORMALISERS else value
        assert at.session_state[key] == want, key
    maps, _ = panels(at)
    original = maps["original: softmax (tau = 1)"]
    if item.params.get(rv.Keys.TAU) == 0.1:        # sparsemax's support: one key for nearly every query
        support = (maps["sparsemax (tau = 0.1)"] > 0).sum(axis=1)
        assert support.min() == 1 and np.median(support) == 1
    if item.params.get(rv.Keys.TAU) == 10:         # softmax nearly uniform, sparsemax keeps most keys
        n = len(original)
        assert np.abs(maps["softmax (tau = 10)"] - 1 / n).max() < 0.1
        assert (maps["sparsemax (tau = 10)"] > 0).sum(axis=1).mean() > n / 2
    if item.params.get(rv.Keys.LAYER) == 5:        # the sink: [CLS] receives most of the 13 units; not under Sinkhorn
        assert original.sum(axis=0)[0] > 0.7 * len(original)
        sk = maps["sinkhorn (gamma = 1, 5 iterations)"]
        assert np.abs(sk.sum(axis=0) - 1).max() < 0.05
    if item.params.get(rv.Keys.RHO) == 0.001:      # Sinkhorn at rho -> 0, gamma = 1: the model's own softmax
        np.testing.assert_allclose(maps["sinkhorn (gamma = 1, rho = 0.001, 5 iterations)"], original, atol=2e-3)
    if rv.Keys.ALPHA in item.params:               # entmax 1.25: fewer zeros than sparsemax, but some
        zeros = {name: (m == 0).sum() for name, m in maps.items()}
        assert 0 < zeros["entmax (alpha = 1.25, tau = 1)"] < zeros["sparsemax (tau = 1)"]
    captions = " ".join(shown_text(c) for c in at.caption)
    for pattern, quote in QUOTED.get(item.label, ()):
        found = re.search(pattern, captions)
        assert found and quote.format(*found.groups()) in item.watch, (pattern, found, item.watch)


# The numbers a link's sentence quotes from the captions: (a pattern in the captions, how the sentence quotes it)
QUOTED = {"Sparsemax at tau = 0.1": [(r"sparsemax \(tau = 0.1\): (\d+)% zeros on average", "reads {}% zeros")],
          "An attention sink: layer 5, head 8, under Sinkhorn": [
              (r"receives ([\d.]+) of the (\d+) units", "gives {} of its {} units"),
              (r"every column to 1 within (\S+) after", "every column sums to 1 within {} (the caption)")],
          "entmax between softmax and sparsemax": [
              (r"entmax \(alpha = 1.25, tau = 1\): (\d+)% zeros on average", "({}% zeros on average"),
              (r"sparsemax \(tau = 1\): (\d+)% zeros", "sparsemax's {}%)")]}


def test_the_linked_chart_follows_presentation_mode(open_page):
    """In presentation mode the Altair chart's text is at least the lecture hall's size and its colours are the
    mode's (Okabe-Ito categories, Cividis for the weights), as the Plotly figures'; the same chart, clicks
    included."""
    from wviz.export import TEXT_PX
    from wviz.figures.common import PALETTE

    def config(**query):
        (chart,) = open_page(PAGE, timeout=300, view=rv.Labels.CLICK, **query).get("vega_lite_chart")
        return json.loads(chart.proto.spec)

    plain, hall = config(), config(presentation="true")
    assert plain.get("config", {}).get("axis", {}).get("labelFontSize", 10) < TEXT_PX   # Vega-Lite's default: 10
    sizes = [hall["config"][part][size] for part in ("axis", "legend") for size in ("labelFontSize", "titleFontSize")]
    assert min(sizes + [hall["config"]["title"]["fontSize"]]) >= TEXT_PX
    assert hall["config"]["range"]["category"] == PALETTE
    assert "viridis" in json.dumps(plain) and "viridis" not in json.dumps(hall) and "cividis" in json.dumps(hall)
    assert hall["params"] == plain["params"]


def test_the_change_table_reads_in_significant_digits(open_page):
    """The cosines and distances in at most 4 significant digits, tiny ones with a power of ten; the table keeps
    its numbers."""
    at = open_page(PAGE, timeout=300, view=rv.Labels.LAYERS.format("sentence"))
    cells, values = shown_table(at), at.dataframe[0].value
    assert list(cells.columns) == list(values.columns) and "distance, layer 6" in cells
    for column in values.columns[1:]:
        for text, value in zip(cells[column], values[column]):
            assert text == number_text(value) and len(text.replace("-", "").replace(".", "")) <= 8, (column, text)


def test_rho_walks_sinkhorn_from_the_models_softmax_to_sinkformer(open_page, reference):
    """Sinkhorn's rho: at its smallest value (gamma = 1) the Sinkhorn panel is the model's own attention; at rho = 10
    its rows still sum to 1 and its columns are nearer 1 than softmax's; the rho view draws the sweep, the cosine
    to the model's embedding 1 at rho = 0."""
    run, _ = reference
    at = open_page(PAGE, timeout=300, normalisers=[rv.CHOICES["sinkhorn"]], rho="0.001", view=rv.Labels.RHO)
    no_exception(at)
    maps, _ = panels(at)
    attn, _ = run(SENTENCE)
    np.testing.assert_allclose(maps["sinkhorn (gamma = 1, rho = 0.001, 5 iterations)"], attn[0, 0], atol=2e-3)
    sweep = figure_titled(at, "From softmax to Sinkformer")
    cosine = np.asarray(sweep["data"][0]["y"], dtype=float)
    assert cosine[0] == pytest.approx(1.0, abs=1e-6) and cosine[-1] < cosine[0]
    at.sidebar.select_slider(key=rv.Keys.RHO).set_value(10.0).run()
    no_exception(at)
    maps, _ = panels(at)
    A = maps["sinkhorn (gamma = 1, rho = 10, 5 iterations)"]
    np.testing.assert_allclose(A.sum(axis=1), 1, atol=1e-5)
    assert np.abs(A.sum(axis=0) - 1).max() < np.abs(attn[0, 0].sum(axis=0) - 1).max()
    assert any("keys are held towards one unit" in shown_text(c) for c in at.caption)


# ---- your model: WVIZ_MODELS at tiny models of each family, uploads, pictures ----------------------------------------

TINY = ("bert", "gpt2", "llama", "roberta", "vit")   # wviz.models.tiny kinds, in the selector's order (folder names)
DECODERS = ("gpt2", "llama")


@pytest.fixture(scope="module")
def tiny_root(tmp_path_factory):
    """A WVIZ_MODELS folder of tiny random models (wviz.models.tiny: BERT, RoBERTa, GPT-2, Llama, ViT), each built
    once per module, as save_pretrained writes them."""
    from wviz.models import tiny

    root = tmp_path_factory.mktemp("models")
    for kind in TINY:
        tiny.save(kind, root / f"tiny-{kind}")
    (root / "notes").mkdir()                          # not a model folder: listed among the skipped, with why
    (root / "notes" / "README.txt").write_text("my models")
    return root


@pytest.fixture
def models_page(open_page, tiny_root, monkeypatch):
    monkeypatch.setenv("WVIZ_MODELS", str(tiny_root))

    def _open(**query):
        return open_page(PAGE, timeout=300, **query)

    return _open


def key_of(root, kind: str) -> str:
    return f"folder:{root.resolve() / f'tiny-{kind}'}"


def upper_weight(maps) -> float:
    return max(float(np.abs(np.triu(A, 1)).max()) for A in maps.values())


def test_each_family_chosen_in_the_selector_draws_its_views(models_page, tiny_root):
    """The selector lists the bundled MiniLM (the default) and each tiny model; choosing each draws its maps on its
    own layers and heads, what its family looks at, and a tau move redraws the maps; the model's key is in the URL."""
    at = models_page()
    options = at.sidebar.selectbox(key=rv.Keys.MODEL).options
    assert options[0] == "all-MiniLM-L6-v2 (encoder, 22.7M parameters)" and options[-1] == "Upload a model (.zip)"
    assert [o.split(" (")[0] for o in options[1:-1]] == [f"tiny-{kind}" for kind in TINY]
    assert [o.split(" (")[1].split(",")[0] for o in options[1:-1]] == ["encoder", "decoder", "decoder", "encoder",
                                                                       "image"]
    (skipped,) = [e for e in at.sidebar.expander if e.label.startswith("Folders skipped")]
    assert skipped.label == "Folders skipped (1)"
    assert [shown_text(c) for c in skipped.caption] == [line for line in rv.hub.find_models([tiny_root]).skipped]
    assert "notes" in shown_text(skipped.caption[0]) and "config.json" in shown_text(skipped.caption[0])
    for kind in TINY:
        at.sidebar.selectbox(key=rv.Keys.MODEL).set_value(key_of(tiny_root, kind)).run()
        no_exception(at)
        assert not at.error, [shown_text(e) for e in at.error]
        assert at.query_params[rv.Keys.MODEL] == key_of(tiny_root, kind)   # the model's key travels in the link
        assert at.sidebar.selectbox(key=rv.Keys.LAYER).options == ["1", "2"]
        assert at.sidebar.selectbox(key=rv.Keys.HEAD).options == ["1", "2", "3", "4"]
        before, fig = panels(at)
        assert list(before) == ["original: softmax (tau = 1)", "sinkhorn (gamma = 1, 5 iterations)",
                                "sparsemax (tau = 1)", "entmax (alpha = 1.5, tau = 1)"]
        at.sidebar.select_slider(key=rv.Keys.TAU).set_value(0.464).run()
        no_exception(at)
        after, _ = panels(at)
        assert "sparsemax (tau = 0.464)" in after
        np.testing.assert_array_equal(after["original: softmax (tau = 1)"], before["original: softmax (tau = 1)"])
        if kind in DECODERS:
            assert upper_weight(after) == 0.0                             # the causal mask, under every normaliser
            assert any("No weight lies above the diagonal" in shown_text(c) for c in at.caption)
            assert list(at.dataframe[0].value.index) == list(range(1, 11))   # the next token's top 10
        if kind == "vit":
            assert figure_titled(at, "The class token over the patches")
            assert list(at.dataframe[0].value.index) == [1, 2, 3, 4, 5]        # the top 5 classes
            assert fig["layout"]["title"]["text"].startswith("Layer 1, head 1")
        if kind in ("bert", "roberta"):
            assert any("write [MASK] in the sentence" in shown_text(c) for c in at.caption)
            assert upper_weight(after) > 0                                     # no causal mask
        at.sidebar.select_slider(key=rv.Keys.TAU).set_value(1.0).run()
    at.sidebar.selectbox(key=rv.Keys.MODEL).set_value(rv.hub.BUNDLED_KEY).run()
    assert "model" not in at.query_params                                  # the default: not in the link


def test_a_mask_in_the_sentence_gives_the_top_5_of_the_mlm_head(models_page, tiny_root):
    """The tiny BERT's top 5 for [MASK] on the page: the original column against transformers' own eager forward."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    sentence = "the cat [MASK] on the mat"
    at = models_page(model=key_of(tiny_root, "bert"), sentence=sentence)
    assert any(s.value == "The top 5 for [MASK] (token 4)" for s in at.subheader)
    table = at.dataframe[0].value
    folder = tiny_root / "tiny-bert"
    model = AutoModelForMaskedLM.from_pretrained(folder, attn_implementation="eager").eval()
    tok = AutoTokenizer.from_pretrained(folder)
    with torch.no_grad():
        p = torch.softmax(model(**tok(sentence, return_tensors="pt")).logits[0, 3].double(), -1)
    top = p.topk(5)
    assert list(table.columns) == ["original", "sparsemax", "entmax", "sinkhorn"]
    cells = [c.split("  ") for c in table["original"]]
    assert [w for w, _ in cells] == tok.convert_ids_to_tokens(top.indices.tolist())
    np.testing.assert_allclose([float(x) for _, x in cells], top.values.numpy(), rtol=2e-3)


def test_a_model_switch_never_draws_the_last_models_results(models_page, tiny_root):
    """Maps drawn for one model, then another chosen with a sentence it cannot read: its message, and no map, no
    'last valid result' of the model before (issue 49: BERT's maps were drawn under Llama's name)."""
    at = models_page(**{rv.Keys.MODEL: key_of(tiny_root, "bert")})
    assert panels(at)[0] and not at.error
    at.text_input(key=rv.Keys.SENTENCE).set_value("word " * 600).run()
    at.sidebar.selectbox(key=rv.Keys.MODEL).set_value(key_of(tiny_root, "llama")).run()
    no_exception(at)
    assert any("at most" in shown_text(e) for e in at.error)
    assert not any("last valid result" in shown_text(c) for c in at.caption)
    assert not at.get("plotly_chart")


def test_layer_and_head_follow_a_switch_to_a_smaller_model(models_page, tiny_root):
    """Layer 5, head 8 of MiniLM, then a model of 2 layers and 4 heads: the boxes and the URL hold its own."""
    at = models_page(**{rv.Keys.LAYER: "5", rv.Keys.HEAD: "8"})
    at.sidebar.selectbox(key=rv.Keys.MODEL).set_value(key_of(tiny_root, "bert")).run()
    no_exception(at)
    layer, head = at.sidebar.selectbox(key=rv.Keys.LAYER), at.sidebar.selectbox(key=rv.Keys.HEAD)
    assert layer.value in (1, 2) and head.value in (1, 2, 3, 4)
    assert at.query_params.get(rv.Keys.LAYER, "1") in ("1", "2") and at.query_params.get(rv.Keys.HEAD, "1") in "1234"
    at = models_page(**{rv.Keys.MODEL: key_of(tiny_root, "bert"), rv.Keys.LAYER: "5"})   # a link's own
    assert at.sidebar.selectbox(key=rv.Keys.LAYER).value == 1 and at.query_params.get(rv.Keys.LAYER, "1") == "1"


def test_a_link_opens_its_model_and_an_unknown_one_the_bundled(models_page, tiny_root):
    at = models_page(model=key_of(tiny_root, "gpt2"))
    assert at.sidebar.selectbox(key=rv.Keys.MODEL).value == key_of(tiny_root, "gpt2")
    assert any("tiny-gpt2" in shown_text(c) for c in at.caption)
    at = models_page(model="folder:/nowhere/gpt2")
    assert at.sidebar.selectbox(key=rv.Keys.MODEL).value == rv.hub.BUNDLED_KEY
    assert any("does not have" in shown_text(w) for w in at.warning)


def zipped(files: dict) -> bytes:
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    return buffer.getvalue()


def folder_files(folder) -> dict:
    return {f"my-model/{p.name}": p.read_bytes() for p in folder.iterdir()}


def test_hostile_uploads_are_refused_in_words_and_the_last_model_stays(models_page, tiny_root):
    """A zip with ../, a pickle .bin, a config with auto_map: each a plain message on the page, no exception, and
    the maps of the model shown before (tiny GPT-2) stay; then a good upload (a tiny BERT) is shown."""
    at = models_page(model=key_of(tiny_root, "gpt2"))
    shown, _ = panels(at)
    at.sidebar.selectbox(key=rv.Keys.MODEL).set_value(rv.catalogue.UPLOAD).run()
    no_exception(at)
    assert any("meanwhile the page shows tiny-gpt2" in shown_text(i) for i in at.info)
    bert = folder_files(tiny_root / "tiny-bert")
    config = json.loads(bert["my-model/config.json"])
    hostile = {
        "escape.zip": (zipped({**bert, "../escape.json": b"{}"}), "leads outside the zip"),
        "pickle.zip": (zipped({**bert, "my-model/pytorch_model.bin": b"\x80\x04not read"}), "pickle file"),
        "code.zip": (zipped({**bert, "my-model/config.json": json.dumps({**config, "auto_map": {
            "AutoModel": "modeling_evil.EvilModel"}})}), "auto_map"),
    }
    for name, (raw, words) in hostile.items():
        at.sidebar.file_uploader(key=rv.Keys.MODEL_ZIP).upload(name, raw, "application/zip").run()
        no_exception(at)
        assert any(words in shown_text(e) for e in at.error), (name, [shown_text(e) for e in at.error])
        maps, _ = panels(at)
        for label in shown:
            np.testing.assert_array_equal(maps[label], shown[label])        # tiny GPT-2's maps, kept
    at.sidebar.file_uploader(key=rv.Keys.MODEL_ZIP).upload("my-bert.zip", zipped(bert), "application/zip").run()
    no_exception(at)
    assert not at.error and any("my-bert (encoder" in shown_text(c) for c in at.caption)
    assert "model" not in at.query_params                                  # an upload is not part of a link
    maps, _ = panels(at)
    assert upper_weight(maps) > 0                                          # an encoder's maps, no causal mask


def test_an_image_model_reads_a_bundled_or_uploaded_picture(models_page, tiny_root):
    import io

    from PIL import Image

    at = models_page(model=key_of(tiny_root, "vit"), picture="flower.jpg (scikit-learn)")
    assert at.selectbox(key=rv.Keys.PICTURE).value == "flower.jpg (scikit-learn)"
    flower, _ = panels(at)
    at.selectbox(key=rv.Keys.PICTURE).set_value("upload").run()
    at.file_uploader(key=rv.Keys.PICTURE_FILE).upload("x.png", b"not a picture", "image/png").run()
    no_exception(at)
    assert any("your picture was not used" in shown_text(e) for e in at.error)
    buffer = io.BytesIO()
    Image.new("RGB", (64, 48), (0, 114, 178)).save(buffer, "PNG")
    at.file_uploader(key=rv.Keys.PICTURE_FILE).upload("blue.png", buffer.getvalue(), "image/png").run()
    no_exception(at)
    assert not at.error
    blue, _ = panels(at)
    assert not np.array_equal(blue["original: softmax (tau = 1)"], flower["original: softmax (tau = 1)"])


def test_a_decoders_views_perplexity_and_sinks(models_page, tiny_root):
    """The perplexity view of a decoder: the model's own perplexity (the dashed line) is wviz.models.tasks'; the
    sinks view draws the first token's share per normaliser."""
    from wviz.models import hub, tasks

    at = models_page(model=key_of(tiny_root, "gpt2"), view=rv.Labels.PERPLEXITY)
    fig = figure_titled(at, "Perplexity of the bundled paragraph")
    (line,) = [t for t in fig["data"] if t.get("line", {}).get("dash") == "dash"]
    gpt2 = hub.load(tiny_root / "tiny-gpt2", device="cpu")
    p = rv.perplexities(gpt2, rv.Settings(rv.DEFAULT_CHOSEN, 1.5, 1.0, 5), (1.0,))
    assert line["y"] == [pytest.approx(p.original)] * 2 and p.cut
    assert line["name"].startswith("the model's own (softmax, tau = 1)")          # named in the legend
    assert p.original == pytest.approx(tasks.perplexity(gpt2, tasks.fitted(gpt2, rv.corpus.PARAGRAPH)[0]))
    at.segmented_control(key=rv.Keys.VIEW).set_value(rv.Labels.SINKS).run()
    no_exception(at)
    sinks = figure_titled(at, "Attention sinks")
    assert len([t for t in sinks["data"] if t["type"] == "heatmap"]) == 4
    assert any(rv.SINKS + " In a decoder" in shown_text(c) for c in at.caption)
    uniform = rv.uniform_share(len(gpt2.tokenizer(rv.DEFAULT_SENTENCE)["input_ids"]), True)   # the causal baseline
    assert any(f"rows spread evenly over the tokens each query may read would give {uniform:.0%}" in c.value
               for c in at.caption)


ALL_CHOSEN = ["original: softmax (tau = 1)", "softmax (tau = 0.464)", "sparsemax (tau = 0.464)",
              "entmax (alpha = 1.5, tau = 0.464)", "sinkhorn (gamma = 1, 5 iterations)"]
VIEWS = {rv.Labels.SPARSITY: ["sparsity"], rv.Labels.LAYERS.format("sentence"): ["distances"],
         rv.Labels.CLICK: [], rv.Labels.RHO: ["rho_sweep"], rv.Labels.SINKS: ["sinks"]}


@pytest.mark.parametrize("kind", ["roberta", "llama", "vit"])
def test_every_view_of_a_family_under_every_normaliser(models_page, tiny_root, kind):
    """An encoder, a decoder and an image model, every normaliser chosen (at tau = 0.464, so that softmax is a
    panel of its own): each view the page offers that family draws its figures and no error; softmax at tau is
    the original's weights to the power 1/tau, renormalised; every map's rows sum to 1 (a decoder's with nothing
    above the diagonal); the sparsity and sink panels of layer 1, head 1 are those of the drawn maps; at rho -> 0
    the model's own embedding, and a decoder's softmax curve at tau = 1 its own perplexity."""
    tau = 0.464
    at = models_page(model=key_of(tiny_root, kind), normalisers=rv.shown(*rv.CHOICES), tau=str(tau))
    assert not at.error, [shown_text(e) for e in at.error]
    maps, _ = panels(at)
    assert list(maps) == [ALL_CHOSEN[0], ALL_CHOSEN[-1], *ALL_CHOSEN[1:-1]]   # tau's maps apart, in the main figure
    original = maps["original: softmax (tau = 1)"]
    sharp = original ** (1 / tau)
    np.testing.assert_allclose(maps["softmax (tau = 0.464)"], sharp / sharp.sum(axis=1, keepdims=True), atol=1e-5)
    for label, A in maps.items():
        np.testing.assert_allclose(A.sum(axis=1), 1, atol=1e-5, err_msg=label)
    if kind in DECODERS:
        assert upper_weight(maps) == 0.0
    views = dict(VIEWS, **({rv.Labels.PERPLEXITY: ["perplexity"]} if kind in DECODERS else {}))
    if kind == "vit":                                   # an image model's embedding pools its picture's patches
        views = {k.replace("sentence", "image"): v for k, v in views.items()}
    always = ["maps_fixed", "maps"] + (["patches"] if kind == "vit" else [])
    check_views(at, rv.Keys.VIEW, {view: always + keys for view, keys in views.items()})
    for view in views:                                  # each view drawn once more: no error message either
        at.segmented_control(key=rv.Keys.VIEW).set_value(view).run()
        assert not at.error and not at.exception, (view, [shown_text(e) for e in at.error])
        if view == rv.Labels.CLICK:
            assert len(at.get("vega_lite_chart")) == 1
    bundle = bundle_figures(at)
    assert [t["name"] for t in bundle["maps_fixed"]["data"] + bundle["maps"]["data"]] == list(maps)   # every panel
    n = len(original)
    allowed = np.tril(np.ones((n, n))) > 0 if kind in DECODERS else np.ones((n, n)) > 0
    sparsity = {t["name"]: np.asarray(t["z"], dtype=float) for t in bundle["sparsity"]["data"]}
    sinks = {t["name"]: np.asarray(t["z"], dtype=float) for t in bundle["sinks"]["data"]}
    for label, A in maps.items():
        short = "original" if label.startswith("original") else label
        assert sparsity[short][0, 0] == pytest.approx(((A == 0) & allowed).sum() / allowed.sum(), abs=1e-9)
        assert sinks[label][0, 0] == pytest.approx(A[1:, 0].mean(), abs=1e-6)   # the share of the sinks view
    assert sparsity["original"].max() == 0 and sparsity["sparsemax (tau = 0.464)"].max() > 0
    distances = {t["name"]: np.asarray(t["y"], dtype=float) for t in bundle["distances"]["data"]}
    assert list(distances) == ALL_CHOSEN[1:] and all(np.isfinite(d).all() and d.min() > 0 for d in distances.values())
    cosine = np.asarray(bundle["rho_sweep"]["data"][0]["y"], dtype=float)
    assert cosine[0] == pytest.approx(1.0, abs=1e-4) and np.isfinite(cosine).all()   # rho -> 0: the model's softmax
    if kind in DECODERS:
        curves = {t["name"]: t["y"] for t in bundle["perplexity"]["data"] if t.get("mode") == "lines"}
        own = [v for name, v in curves.items() if name.startswith("the model's own")][0][0]
        assert curves["softmax"][rv.PERPLEXITY_TAUS.index(1.0)] == pytest.approx(own, rel=1e-5)
