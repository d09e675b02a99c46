"""The "Real transformer" page through AppTest: its heatmaps against transformers' own eager attention of an
independently loaded MiniLM, sparsemax against numpy, Sinkhorn's marginals, the Figure-4 histograms against the
tokenizer's counts, bad input."""
import json
import math

import numpy as np
import pytest
import torch
from scipy.special import softmax
from streamlit.testing.v1 import AppTest

from tests.app.conftest import (ROOT, check_views, figure_titled, figures, link_params, no_exception, settle,
                                shown_table)
from wviz.figures.common import number_text
from wviz.models import minilm
from wviz.models.corpus import CORPUS
from wviz.views import real_transformer as rv

PAGE = "real_transformer.py"
SENTENCE = "The cat sat on the mat and watched the rain."
RHO_VIEW = "Sinkhorn's rho: softmax to Sinkformer"


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
    """The heatmaps of the per-head figure: subplot title -> matrix."""
    fig = [f for f in figures(at) if f["layout"]["title"]["text"].startswith("Layer ")][0]
    return {t["name"]: np.asarray(t["z"], dtype=float) for t in fig["data"] if t["type"] == "heatmap"}, fig


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
    assert list(maps) == ["original: softmax (tau = 1)", "sparsemax (tau = 1)", "entmax (alpha = 1.5, tau = 1)",
                          "sinkhorn (gamma = 1, 5 iterations)"]
    assert fig["layout"]["title"]["text"].startswith("Layer 1, head 1")
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
    at.segmented_control(key="view").set_value("The layers and the sentence embedding").run()
    table = at.dataframe[0].value
    assert list(table["normaliser"]) == list(maps)[1:]
    emb = minilm.sentence_embedding(SENTENCE, "sparsemax", device="cpu").double().numpy()
    ref = minilm.sentence_embedding(SENTENCE, device="cpu").double().numpy()
    assert abs(table["cosine to the original embedding"][0] - emb @ ref) < 1e-6


def test_layer_head_and_tau(open_page, reference):
    run, _ = reference
    at = open_page(PAGE, timeout=300)
    at.sidebar.selectbox(key="layer").set_value(5)                  # layers and heads counted from 1
    at.sidebar.selectbox(key="head").set_value(8)
    at.sidebar.multiselect(key="normalisers").set_value(["softmax"])
    at.sidebar.select_slider(key="tau").set_value(0.464).run()      # an option of the log grid
    no_exception(at)
    attn, S0 = run(SENTENCE)
    maps, fig = panels(at)
    assert fig["layout"]["title"]["text"].startswith("Layer 5, head 8")
    np.testing.assert_allclose(maps["original: softmax (tau = 1)"], attn[4, 7], atol=2e-6)
    assert list(maps)[1] == "softmax (tau = 0.464)"
    at.sidebar.selectbox(key="layer").set_value(1).run()
    maps, _ = panels(at)
    np.testing.assert_allclose(maps["softmax (tau = 0.464)"], softmax(S0[7] / 0.464, axis=-1), atol=2e-5)


def test_figure4_histograms_count_every_token(open_page, reference):
    _, tok = reference
    at = open_page(PAGE, timeout=300)
    fig = figure_titled(at, "Figure 4 of 002")
    n_tokens = sum(len(tok(s)["input_ids"]) for s in CORPUS)
    bars = [t for t in fig["data"] if t["type"] == "bar"]
    assert len(bars) == 6
    for b in bars:
        assert int(np.asarray(b["y"]).sum()) == n_tokens
    # red lines at the layer means; the per-head heatmap averages to the same means
    lines = [s for s in fig["layout"]["shapes"] if s["line"]["color"] == "red"]
    means = np.array([ln["x0"] for ln in lines])
    titles = [a["text"] for a in fig["layout"]["annotations"]]
    np.testing.assert_allclose(means, [float(t.split("mean ")[1]) for t in titles], atol=6e-4)
    per_head = np.asarray(figure_titled(at, "Mean relative deviation per head")["data"][0]["z"], dtype=float)
    np.testing.assert_allclose(per_head.mean(axis=1), means, rtol=1e-9)
    assert 0 < means.max() < 0.2                                       # lambda* close to alpha z at alpha = 1
    # a smaller alpha of problem (4) brings lambda* closer to alpha z (Theorem 2)
    at.select_slider(key="dual_alpha").set_value(0.1).run()
    no_exception(at)
    assert at.get("progress"), "a new alpha is solved in the background"
    settle(at)
    small = [ln["x0"] for ln in figure_titled(at, "Figure 4 of 002")["layout"]["shapes"]]
    assert max(small) < means.min()


@pytest.mark.parametrize("text, match", [("", "empty"), ("word " * 200, "at most 128")])
def test_bad_sentence_keeps_the_last_good_state(open_page, text, match):
    at = open_page(PAGE, timeout=300)
    before, _ = panels(at)
    at.text_input(key="sentence").set_value(text).run()
    no_exception(at)
    assert any(match in e.value for e in at.error)
    after, _ = panels(at)
    for k in before:
        np.testing.assert_array_equal(after[k], before[k])


def test_no_normaliser_chosen(open_page):
    at = open_page(PAGE, timeout=300)
    at.sidebar.multiselect(key="normalisers").set_value([]).run()
    no_exception(at)
    assert any("at least one normaliser" in e.value for e in at.error)


def test_views_one_at_a_time_from_the_url_and_all_in_the_bundle(open_page):
    at = open_page(PAGE, timeout=300, view="The layers and the sentence embedding")
    titles = [f["layout"].get("title", {}).get("text", "") for f in figures(at)]
    assert not [t for t in titles if t.startswith("Sparsity per head")], titles
    fig4 = ["figure4", "per_head"]
    check_views(at, "view", {"Sparsity per head": ["maps", "sparsity", *fig4],
                             "The layers and the sentence embedding": ["maps", "distances", *fig4],
                             "Click a query": ["maps", *fig4], RHO_VIEW: ["maps", "rho_sweep", *fig4]})


def test_the_linked_view_draws_the_altair_chart_of_the_head(open_page, reference):
    """The "Click a query" view: a Vega-Lite chart with the point selection on the query field and its bars filtered
    by it; its data (sent to the browser as Arrow) holds every (normaliser, query, key) weight of the head, the
    original's equal to transformers' own attention."""
    import pyarrow as pa

    run, _ = reference
    at = open_page(PAGE, timeout=300, view="Click a query")
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
    monkeypatch.setenv("WVIZ_DEVICE", "cpu")
    at = AppTest.from_file(str(ROOT / "pages" / PAGE), default_timeout=300)
    for k, v in link_params(item).items():
        at.query_params[k] = v
    at.run()   # not settled: Figure 4 at a new alpha goes on in the background; the links set the widgets above it
    no_exception(at)
    assert not at.error, [e.value for e in at.error]
    key_of = {label: name for name, label in rv.CHOICES.items()}
    for key, value in item.params.items():
        want = [key_of[v] for v in value] if key == "normalisers" else value
        assert at.session_state[key] == want, key
    maps, _ = panels(at)
    original = maps["original: softmax (tau = 1)"]
    if item.params.get("tau") == 0.1:               # sparsemax's support: one key for nearly every query
        support = (maps["sparsemax (tau = 0.1)"] > 0).sum(axis=1)
        assert support.min() == 1 and np.median(support) == 1
    if item.params.get("tau") == 10:                # softmax nearly uniform, sparsemax keeps most keys
        n = len(original)
        assert np.abs(maps["softmax (tau = 10)"] - 1 / n).max() < 0.1
        assert (maps["sparsemax (tau = 10)"] > 0).sum(axis=1).mean() > n / 2
    if item.params.get("layer") == 5:               # the sink: [CLS] receives most of the 13 units; not under Sinkhorn
        assert original.sum(axis=0)[0] > 0.7 * len(original)
        sk = maps["sinkhorn (gamma = 1, 5 iterations)"]
        assert np.abs(sk.sum(axis=0) - 1).max() < 0.05
    if item.params.get("rho") == 0.001:             # Sinkhorn at rho -> 0, gamma = 1: the model's own softmax
        np.testing.assert_allclose(maps["sinkhorn (gamma = 1, rho = 0.001, 5 iterations)"], original, atol=2e-3)
    if "alpha" in item.params:                      # entmax 1.25: fewer zeros than sparsemax, but some
        zeros = {name: (m == 0).sum() for name, m in maps.items()}
        assert 0 < zeros["entmax (alpha = 1.25, tau = 1)"] < zeros["sparsemax (tau = 1)"]


def test_the_linked_chart_follows_presentation_mode(open_page):
    """In presentation mode the Altair chart's text is at least the lecture hall's size and its colours are the
    mode's (Okabe-Ito categories, Cividis for the weights), as the Plotly figures'; the same chart, clicks
    included."""
    from wviz.export import TEXT_PX
    from wviz.figures.common import PALETTE

    def config(**query):
        (chart,) = open_page(PAGE, timeout=300, view="Click a query", **query).get("vega_lite_chart")
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
    at = open_page(PAGE, timeout=300, view="The layers and the sentence embedding")
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
    at = open_page(PAGE, timeout=300, normalisers=[rv.CHOICES["sinkhorn"]], rho="0.001", view=RHO_VIEW)
    no_exception(at)
    maps, _ = panels(at)
    attn, _ = run(SENTENCE)
    np.testing.assert_allclose(maps["sinkhorn (gamma = 1, rho = 0.001, 5 iterations)"], attn[0, 0], atol=2e-3)
    sweep = figure_titled(at, "From softmax to Sinkformer")
    cosine = np.asarray(sweep["data"][0]["y"], dtype=float)
    assert cosine[0] == pytest.approx(1.0, abs=1e-6) and cosine[-1] < cosine[0]
    at.sidebar.select_slider(key="rho").set_value(10.0).run()
    no_exception(at)
    maps, _ = panels(at)
    A = maps["sinkhorn (gamma = 1, rho = 10, 5 iterations)"]
    np.testing.assert_allclose(A.sum(axis=1), 1, atol=1e-5)
    assert np.abs(A.sum(axis=0) - 1).max() < np.abs(attn[0, 0].sum(axis=0) - 1).max()
    assert any("keys are held towards one unit" in c.value for c in at.caption)
