"""The "Real transformer" computations against independent references, on MiniLM and a 5-word sentence: the
sink key and Sinkhorn's column sums by numpy, sparsity counted by numpy, the change table by its formulas, and the
Figure 4 numbers (the relative deviation ||lambda* - alpha z|| / ||lambda*|| by its formula, its means by numpy)."""
import math

import numpy as np
import pytest
import torch

from wviz.models import figure4, minilm
from wviz.views import real_transformer as rv

SENTENCE = "Bees make honey in summer."
CPU = "cpu"


def run(name, params):
    return rv.forward(SENTENCE, name, params, CPU)


@pytest.fixture(scope="module")
def comparison():
    settings = rv.Settings(("softmax", "sparsemax", "entmax", "sinkhorn"), alpha=1.5, gamma=1.0, n_iter=5)
    return rv.comparison(settings, 0.5, run)


def test_params_per_normaliser():
    s = rv.Settings(("entmax",), alpha=1.25, gamma=2.0, n_iter=7)
    assert rv.params(s, "softmax", 0.5) == (("tau", 0.5),)
    assert rv.params(s, "sparsemax", 0.5) == (("tau", 0.5),)
    assert rv.params(s, "entmax", 0.5) == (("alpha", 1.25), ("tau", 0.5))
    assert rv.params(s, "sinkhorn", 0.5) == (("gamma", 2.0), ("n_iter", 7))
    with pytest.raises(ValueError, match="unknown normaliser"):
        rv.params(s, "hardmax", 1.0)
    with pytest.raises(ValueError, match="at least one normaliser"):
        rv.comparison(rv.Settings((), 1.5, 1.0, 5), 1.0, run)


def test_comparison_runs_every_normaliser_against_the_original(comparison):
    assert list(comparison.swapped) == ["softmax (tau = 0.5)", "sparsemax (tau = 0.5)",
                                        "entmax (alpha = 1.5, tau = 0.5)", "sinkhorn (gamma = 1, 5 iterations)"]
    assert comparison.tokens == ("[CLS]", "bees", "make", "honey", "in", "summer", ".", "[SEP]")
    own = minilm.forward(SENTENCE, device=CPU)
    torch.testing.assert_close(comparison.base.attention, own.attention)
    sharp = comparison.swapped["softmax (tau = 0.5)"].attention[0, 0].double().numpy()
    S = own.scores[0, 0].double().numpy() / 0.5                     # layer 0 sees the same embeddings
    want = np.exp(S - S.max(-1, keepdims=True))
    np.testing.assert_allclose(sharp, want / want.sum(-1, keepdims=True), atol=2e-6)


def test_one_head_sink_and_sinkhorn_columns(comparison):
    one = rv.one_head(comparison, 3, 6)                              # layer 3, head 6 counted from 1: [2, 5]
    assert list(one.maps) == ["original: softmax (tau = 1)", *comparison.swapped]
    assert (one.layer, one.head) == (3, 6)
    A = comparison.base.attention[0, 2, 5].double().numpy()
    received = A.sum(axis=0)
    assert one.sink == int(np.argmax(received)) and abs(one.sink_mass - received.max()) < 1e-5
    (col,) = one.sinkhorn.values()
    K = comparison.swapped["sinkhorn (gamma = 1, 5 iterations)"].attention[0, 2, 5].double().numpy()
    np.testing.assert_allclose(K.sum(axis=1), 1, atol=1e-5)         # rows exactly
    assert col.n_iter == 5 and abs(col.error - np.abs(K.sum(axis=0) - 1).max()) < 1e-6
    with pytest.raises(ValueError, match="layer must be"):
        rv.one_head(comparison, 7, 1)
    with pytest.raises(ValueError, match="head 1 to 12"):
        rv.one_head(comparison, 1, 0)


def test_the_original_softmax_is_not_drawn_twice():
    c = rv.comparison(rv.Settings(("softmax", "sparsemax"), 1.5, 1.0, 5), 1.0, run)
    assert list(rv.one_head(c, 1, 1).maps) == ["original: softmax (tau = 1)", "sparsemax (tau = 1)"]


def test_sparsity_counted_by_numpy(comparison):
    maps = rv.sparsity_maps(comparison)
    assert list(maps) == ["original", *comparison.swapped]
    for label, fwd in comparison.swapped.items():
        A = fwd.attention[0].numpy()
        np.testing.assert_allclose(maps[label].numpy(), (A == 0).mean(axis=(-2, -1)))
    assert float(maps["original"].max()) == 0.0
    pruned = {p.label: p for p in rv.pruning(comparison)}
    assert set(pruned) == {"sparsemax (tau = 0.5)", "entmax (alpha = 1.5, tau = 0.5)"}
    zeros = (comparison.swapped["sparsemax (tau = 0.5)"].attention[0].numpy() == 0).mean(axis=(-2, -1))
    p = pruned["sparsemax (tau = 0.5)"]
    assert abs(p.mean - zeros.mean()) < 1e-12 and abs(p.layer0 - zeros[0].mean()) < 1e-12


def test_change_table_and_layer_distances(comparison):
    table = rv.change_table(comparison)
    assert list(table["normaliser"]) == list(comparison.swapped)
    assert list(table.columns[3:]) == [f"distance, layer {l}" for l in range(1, 7)]   # layers counted from 1
    e0 = comparison.base.embedding[0].double().numpy()
    h0 = comparison.base.hidden[0, 1:].double().numpy()
    for i, fwd in enumerate(comparison.swapped.values()):
        e1 = fwd.embedding[0].double().numpy()
        assert abs(table["cosine to the original embedding"][i] - e0 @ e1 / np.linalg.norm(e0) / np.linalg.norm(e1)) \
            < 1e-6
        h1 = fwd.hidden[0, 1:].double().numpy()
        want = np.linalg.norm((h1 - h0).reshape(6, -1), axis=1) / np.linalg.norm(h0.reshape(6, -1), axis=1)
        np.testing.assert_allclose(table.iloc[i, 3:].to_numpy(dtype=float), want, rtol=1e-4)
        label = table["normaliser"][i]
        np.testing.assert_allclose(rv.layer_distances(comparison)[label].numpy(), want, rtol=1e-4)
        assert abs(table["mean sparsity"][i] - (fwd.attention[0].numpy() == 0).mean()) < 1e-12


def test_figure4_deviation_by_its_formula_and_summary(monkeypatch):
    """On a one-sentence corpus at alpha = 0.5: the deviation of every head and token equals
    ||lambda* - alpha z|| / ||lambda*|| computed by numpy from the dual's solution; the summary's means by numpy."""
    monkeypatch.setattr("wviz.models.corpus.CORPUS", (SENTENCE,))
    seen = []
    dev = rv.deviation(0.5, CPU, progress=lambda done, total: seen.append((done, total)))
    assert seen == [(1, 1)] and dev.alpha == 0.5
    fwd = minilm.forward(SENTENCE, device=CPU)
    for layer in (0, 4):
        d = figure4.fenchel_duals(fwd, layer, alpha=0.5)
        lam, z = d.lam[0].numpy(), d.z[0].numpy()                    # (H, T, d)
        want = np.linalg.norm(lam - 0.5 * z, axis=-1) / np.linalg.norm(lam, axis=-1)
        np.testing.assert_allclose(dev.per_head[layer].numpy(), want, rtol=1e-9)
    s = rv.figure4_summary(dev)
    per_layer = dev.per_head.numpy().mean(axis=1)                    # (L, N): the heads averaged
    assert s.n_tokens == 8 and s.n_problems == 6 * 12 * 8
    assert abs(s.mean - per_layer.mean()) < 1e-12 and abs(s.largest - dev.per_head.numpy().max()) < 1e-12
    assert abs(s.cls_mean - per_layer[:, 0].mean()) < 1e-12
    assert abs(s.others_mean - per_layer[:, 1:].mean()) < 1e-12
    assert s.max_grad_norm < 1e-8 and s.close == (s.mean < 0.1)


# ---- the figures: every token labelled, colour bars, headroom, the linked Altair view ----------------------------

def heatmap_colour_bars(fig) -> list[str]:
    """The colour bar title of every heatmap trace (its own, or its shared colour axis's); fails on a heatmap
    without one."""
    titles = []
    for t in fig.data:
        if t.type != "heatmap":
            continue
        bar = fig.layout[t.coloraxis].colorbar if t.coloraxis else (t.colorbar if t.showscale is not False else None)
        assert bar is not None and bar.title.text, t.name
        titles.append(bar.title.text)
    return titles


def test_attention_maps_label_every_token_with_colour_bars(comparison):
    from wviz.figures import real_transformer as figs

    one = rv.one_head(comparison, 3, 6)
    fig = figs.attention_maps(one.maps, comparison.tokens, one.layer, one.head)
    labels = [f"{i} {t}" for i, t in enumerate(comparison.tokens, 1)]   # positions counted from 1: "1 [CLS]"
    heat = [t for t in fig.data if t.type == "heatmap"]
    assert len(heat) == len(one.maps) and heatmap_colour_bars(fig) == ["weight"] * len(one.maps)
    assert fig.layout.coloraxis.cmin == 0 and fig.layout.coloraxis.cmax == 1
    for t in heat:
        x, y = fig.layout[t.xaxis.replace("x", "xaxis")], fig.layout[t.yaxis.replace("y", "yaxis")]
        assert x.tickmode == y.tickmode == "array"
        assert list(x.tickvals) == list(x.ticktext) == labels == list(y.tickvals)   # every token, in order
        assert x.title.text == "key token" and x.tickangle == -90 and y.tickangle == 0
    assert {fig.layout[t.yaxis.replace("y", "yaxis")].title.text for t in heat} == {"query token", None}
    assert fig.layout.title.text.startswith("Layer 3, head 6") and not fig.layout.title.subtitle.text


def test_attention_maps_thin_long_sentences_and_say_so():
    from wviz.figures import real_transformer as figs

    n = 60
    tokens = [f"w{i}" for i in range(1, n + 1)]
    maps = {"a": torch.full((n, n), 1 / n), "b": torch.eye(n)}
    fig = figs.attention_maps(maps, tokens, 1, 1)
    k = figs.label_step(n)
    assert k == -(-n * figs.LABEL_PX // figs.PANEL_PX) and k > 1 and figs.label_step(n, k * 1e9) == 1
    assert (n // k) * figs.LABEL_PX <= figs.PANEL_PX                    # the labels kept fit the panel
    x = fig.layout.xaxis
    assert list(x.tickvals) == [f"{i} w{i}" for i in range(1, n + 1, k)]   # tokens counted from 1
    assert f"one key token in {k} labelled" in fig.layout.title.subtitle.text
    assert figs.label_step(23) == 1                                     # 23 x 14 px fit in 330 px


def test_figure4_is_computed_once_for_every_server_process(monkeypatch, tmp_path):
    """The second call (another replica of make serve) loads the first one's result from the disk cache: the
    same numbers, no progress reported, the computation not run; another alpha or corpus is computed."""
    monkeypatch.setenv("WVIZ_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr("wviz.models.corpus.CORPUS", (SENTENCE,))
    first = rv.deviation(0.5, CPU)

    def not_again(*args, **kwargs):
        raise AssertionError("Figure 4 computed again")

    monkeypatch.setattr(figure4, "fenchel_deviation", not_again)
    seen = []
    second = rv.deviation(0.5, CPU, progress=lambda done, total: seen.append(done))
    assert type(second) is figure4.FenchelDeviation and second.alpha == first.alpha == 0.5 and seen == []
    for name in ("per_layer", "per_head", "sentence", "position", "grad_norm"):
        a, b = getattr(first, name), getattr(second, name)
        assert a.dtype == b.dtype and torch.equal(a, b), name
    with pytest.raises(AssertionError, match="computed again"):
        rv.deviation(0.25, CPU)
    monkeypatch.setattr("wviz.models.corpus.CORPUS", ("Two words.",))
    with pytest.raises(AssertionError, match="computed again"):
        rv.deviation(0.5, CPU)


def test_figure4_histograms_leave_headroom():
    from wviz.figures import real_transformer as figs

    dev = torch.rand(6, 500, generator=torch.Generator().manual_seed(0)) ** 4 * 0.2
    fig = figs.deviation_histograms(dev, 1.0)
    bars = [t for t in fig.data if t.type == "bar"]
    assert len(bars) == 6
    for i, b in enumerate(bars):
        assert int(np.sum(b.y)) == 500
        top = fig.layout[b.yaxis.replace("y", "yaxis")].range[1]
        assert top >= 1.1 * max(b.y)                                    # the tallest bar is not cut


def test_linked_altair_view_selects_a_query_and_filters_the_bars(comparison):
    """The Vega-Lite spec: a point selection on the query field, made on the heatmap (clicks) and filtering the
    bars; a drop-down parameter choosing the heatmap's normaliser; every (normaliser, query, key) weight in the
    data; every token on the axes."""
    import altair as alt

    from wviz.figures import real_transformer as figs

    one = rv.one_head(comparison, 1, 4)
    chart = figs.linked_attention(one.maps, comparison.tokens, one.layer, one.head)
    with alt.data_transformers.disable_max_rows():
        spec = chart.to_dict()
    pick, shown = spec["params"]
    assert pick["name"] == "query_row" and pick["select"] == {"type": "point", "fields": ["query"], "on": "click",
                                                              "toggle": False, "clear": False}
    assert pick["value"] == [{"query": "1 [CLS]"}]
    assert shown["name"] == "heatmap_of" and shown["bind"]["options"] == list(one.maps)
    heat, bars = spec["vconcat"]
    assert pick["views"] == [heat["name"]] and heat["mark"]["type"] == "rect"
    assert heat["transform"] == [{"filter": "(datum.normaliser === heatmap_of)"}]
    assert heat["encoding"]["stroke"]["condition"]["param"] == "query_row"
    assert bars["mark"]["type"] == "bar" and [t["filter"]["param"] for t in bars["transform"]] == ["query_row"]
    assert bars["encoding"]["x"]["field"] == "key" and bars["encoding"]["xOffset"]["field"] == "normaliser"
    labels = [f"{i} {t}" for i, t in enumerate(comparison.tokens, 1)]
    assert heat["encoding"]["y"]["sort"] == labels == bars["encoding"]["x"]["sort"] == heat["encoding"]["x"]["sort"]
    assert heat["encoding"]["x"]["axis"]["labelOverlap"] is False                # every token labelled
    rows = spec["datasets"][spec["data"]["name"]]
    got = {(r["normaliser"], r["query"], r["key"]): r["weight"] for r in rows}
    assert len(got) == len(rows) == len(one.maps) * len(labels) ** 2     # every query's row of every map
    for name, A in one.maps.items():
        for i, q in enumerate(labels):
            np.testing.assert_allclose([got[name, q, k] for k in labels], A[i].double().numpy(), atol=1e-7)


def test_try_this_items_are_valid_settings():
    from wviz.guide import Try

    assert 3 <= len(rv.TRY_THIS) <= 5 and all(isinstance(t, Try) for t in rv.TRY_THIS)
    grid = {float(f"{v:.3g}") for v in np.logspace(-1, 1, 25)}          # ui.log_slider(0.1, 10), 12 per decade
    for t in rv.TRY_THIS:
        p = t.params
        assert set(p) <= {"layer", "head", "normalisers", "tau", "alpha", "gamma", "n_iter", "dual_alpha", "rho",
                          "view"}
        assert p.get("rho", float("inf")) in rv.RHOS and rv.rho_text(p.get("rho", 1.0)) == f"{p.get('rho', 1.0):g}"
        assert p.get("view", "Sparsity per head") in ("Sparsity per head", "The layers and the sentence embedding",
                                                      "Click a query", "Sinkhorn's rho: softmax to Sinkformer")
        assert set(p.get("normalisers", [])) <= set(rv.CHOICES.values())  # as the multiselect writes the URL
        assert p.get("tau", 1.0) in grid and p.get("layer", 1) in range(1, 7) and p.get("head", 1) in range(1, 13)
        assert 1.0 <= p.get("alpha", 1.5) <= 2.0 and round(p.get("alpha", 1.5) / 0.05, 9) % 1 == 0
        assert p.get("dual_alpha", 1.0) in {float(f"{v:.3g}") for v in np.logspace(-2, 1, 37)}
        assert t.watch.endswith(".") and t.label


# ---- Sinkhorn's rho: from the model's softmax to Sinkformer --------------------------------------------------------

def test_rho_is_a_sinkhorn_keyword_only_when_finite():
    """rho = inf (the default) keeps Sinkhorn's keywords and label, so its forward is the cached one as before."""
    s = rv.Settings(("sinkhorn",), alpha=1.5, gamma=2.0, n_iter=7)
    assert s.rho == math.inf and rv.params(s, "sinkhorn", 0.5) == (("gamma", 2.0), ("n_iter", 7))
    semi = rv.Settings(("sinkhorn",), 1.5, 2.0, 7, 0.1)
    assert rv.params(semi, "sinkhorn", 0.5) == (("gamma", 2.0), ("n_iter", 7), ("rho", 0.1))
    c = rv.comparison(rv.Settings(("sinkhorn",), 1.5, 1.0, 5, 0.1), 1.0, run)
    (label,) = c.swapped
    assert label == "sinkhorn (gamma = 1, rho = 0.1, 5 iterations)"
    one = rv.one_head(c, 3, 6)
    A = c.swapped[label].attention[0, 2, 5].double().numpy()
    np.testing.assert_allclose(A.sum(axis=1), 1, atol=1e-5)       # each query still spreads one unit
    (col,) = one.sinkhorn.values()
    assert col.rho == 0.1 and abs(col.error - np.abs(A.sum(axis=0) - 1).max()) < 1e-6


def test_the_rho_sweep_runs_from_the_models_softmax_to_sinkformer():
    """At rho = 0 and gamma = 1 Sinkhorn is the model's own softmax: cosine 1, no layer moved; at rho = inf it is
    the doubly-stochastic normaliser of the comparison (the same change); in between the grid's values."""
    sweep = rv.rho_sweep(SENTENCE, 1.0, 5, CPU, rhos=(0.01, 100.0))
    (cos0, d0), (cos_inf, d_inf) = sweep.ends
    assert cos0 == pytest.approx(1.0, abs=1e-6) and float(d0.max()) < 1e-5
    c = rv.comparison(rv.Settings(("sinkhorn",), 1.5, 1.0, 5), 1.0, run)
    change = next(iter(c.changes.values()))
    assert cos_inf == pytest.approx(change.cosine, abs=1e-6)
    torch.testing.assert_close(d_inf, change.layer_distance)
    assert sweep.cosines.shape == (2,) and sweep.distances.shape == (2, rv.N_LAYERS)
    assert float(sweep.cosines[0]) > float(sweep.cosines[1]) > cos_inf - 0.05
    from wviz.figures import real_transformer as figs
    fig = figs.rho_sweep(sweep, math.inf)
    assert list(fig.layout.xaxis2.ticktext)[0] == "0" and list(fig.layout.xaxis2.ticktext)[-1] == "∞"
    assert len(fig.data) == 1 + rv.N_LAYERS


# ---- what each guided experiment says to watch, on the numbers of the state its link opens ------------------------

def link_state(params: dict):
    """What the page computes when a link sets ``params`` (every other widget at its default: DEFAULT_SENTENCE, its
    default normalisers, tau = 1, alpha = 1.5, gamma = 1, 5 iterations, rho = infinity, layer 1, head 1): the
    comparison and the head it shows."""
    key_of = {label: name for name, label in rv.CHOICES.items()}
    chosen = tuple(key_of[v] for v in params.get("normalisers", [rv.CHOICES[n] for n in rv.DEFAULT_CHOSEN]))
    settings = rv.Settings(chosen, params.get("alpha", 1.5), 1.0, 5, params.get("rho", math.inf))
    c = rv.comparison(settings, params.get("tau", 1.0),
                      lambda name, p: rv.forward(rv.DEFAULT_SENTENCE, name, p, CPU))
    return c, rv.one_head(c, params.get("layer", 1), params.get("head", 1))


def watch_sharp_sparsemax(params):
    _, one = link_state(params)
    support = (one.maps["sparsemax (tau = 0.1)"] > 0).sum(dim=1).tolist()
    assert (one.layer, one.head) == (1, 1) and len(support) == 13
    assert support.count(1) == 11 and support.count(2) == 2


def watch_rho_to_sinkformer(params):
    _, one = link_state(params)
    original, sinkhorn = one.maps.values()
    assert float((sinkhorn - original).abs().max()) < 2e-3                     # the original head
    sweep = rv.rho_sweep(rv.DEFAULT_SENTENCE, 1.0, 5, CPU)
    cosines = sweep.cosines.numpy()
    assert sweep.rhos[0] == params["rho"] and cosines[0] == pytest.approx(1, abs=1e-6)
    assert (np.diff(cosines) < 1e-6).all() and cosines[-1] == pytest.approx(sweep.ends[1][0], abs=1e-3)
    assert round(sweep.ends[1][0], 2) == 0.42                                 # Sinkformer attention at rho = inf


def watch_attention_sink(params):
    _, one = link_state(params)
    assert (one.layer, one.head) == (5, 8) and one.tokens[one.sink] == "[CLS]" and len(one.tokens) == 13
    assert round(one.sink_mass, 1) == 10.7                                     # 10.7 of its 13 units
    (col,) = one.sinkhorn.values()
    assert col.rho == math.inf and col.error < 0.02                             # one unit each, within 0.02


def watch_entmax_between(params):
    c, one = link_state(params)
    zeros = {name: int((m == 0).sum()) for name, m in one.maps.items()}
    assert 0 < zeros["entmax (alpha = 1.25, tau = 1)"] < zeros["sparsemax (tau = 1)"]
    mean = {label: float(m.mean()) for label, m in rv.sparsity_maps(c).items()}
    assert round(mean["entmax (alpha = 1.25, tau = 1)"], 2) == 0.36 and round(mean["sparsemax (tau = 1)"], 2) == 0.87


def watch_figure4_small_alpha(params):
    """On the whole bundled corpus, as the page shows it (rv.deviation: on disk once computed, else about 20 s)."""
    small = rv.deviation(params["dual_alpha"], CPU).per_layer.mean(dim=1).numpy()
    paper = rv.deviation(1.0, CPU).per_layer.mean(dim=1).numpy()
    assert (0.045 < paper).all() and (paper < 0.085).all()                    # 0.05 to 0.08 at alpha = 1
    assert (small < 0.012).all() and (small < paper / 5).all()                  # about 0.01, every layer


WATCH = {"Sparsemax at tau = 0.1": watch_sharp_sparsemax,
         "From the model's softmax to Sinkformer": watch_rho_to_sinkformer,
         "An attention sink: layer 5, head 8, under Sinkhorn": watch_attention_sink,
         "entmax between softmax and sparsemax": watch_entmax_between,
         "Figure 4 at alpha = 0.1": watch_figure4_small_alpha}


@pytest.mark.parametrize("item", rv.TRY_THIS, ids=lambda t: t.label)
def test_each_guided_experiment_shows_what_its_sentence_says(item):
    """Every Try link's sentence, checked on the numbers of the state the link opens; a new link needs its check."""
    assert item.label in WATCH, f"Try {item.label!r} has no check of what its sentence says"
    WATCH[item.label](item.params)
