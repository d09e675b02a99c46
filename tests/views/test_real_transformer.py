"""The "Real transformer" computations against independent references, on MiniLM and a 5-word sentence: the
sink key and Sinkhorn's column sums by numpy, sparsity counted by numpy, the change table by its formulas; a link
to the old Figure 4 view moved to its own page (tests/views/test_heads_dual.py)."""
import math

import numpy as np
import pytest
import torch

from wviz import export
from wviz.models import minilm
from wviz.views import real_transformer as rv

SENTENCE = "Bees make honey in summer."
CPU = "cpu"
N_LAYERS = 6   # the bundled MiniLM's layers


def run(name, params):
    return rv.forward(SENTENCE, name, params, CPU)


SETTINGS = rv.Settings(("softmax", "sparsemax", "entmax", "sinkhorn"), alpha=1.5, gamma=1.0, n_iter=5)


@pytest.fixture(scope="module")
def comparison():
    return rv.comparison(SETTINGS, 0.5, run)


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


def test_the_maps_tau_moves_and_those_it_leaves(comparison):
    """tau enters softmax, sparsemax and entmax (the main figure, each chosen one, softmax at tau = 1 too), not the
    original or Sinkhorn, whose maps fixed_comparison computes without tau's forwards and the main figure leaves
    out."""
    from wviz.figures import real_transformer as figs

    one = rv.one_head(comparison, 2, 3)
    moved = ["softmax (tau = 0.5)", "sparsemax (tau = 0.5)", "entmax (alpha = 1.5, tau = 0.5)"]
    assert list(one.moved) == moved and list(one.fixed) == ["original: softmax (tau = 1)",
                                                            "sinkhorn (gamma = 1, 5 iterations)"]
    for label in moved:
        torch.testing.assert_close(one.moved[label], comparison.swapped[label].attention[0, 1, 2])
    calls = []
    fixed = rv.fixed_comparison(SETTINGS, lambda name, p: calls.append(name) or run(name, p))
    assert calls == ["softmax", "sinkhorn"]                            # the original and Sinkhorn, no tau forwards
    alone = rv.one_head(fixed, 2, 3)
    assert list(alone.maps) == list(one.fixed) and not alone.moved
    for label, A in one.fixed.items():
        torch.testing.assert_close(alone.maps[label], A)
    assert [t.name for t in figs.main_figure(one).data] == moved
    assert [t.name for t in figs.fixed_maps(alone).data] == list(one.fixed)
    at_one = rv.one_head(rv.comparison(rv.Settings(("softmax",), 1.5, 1.0, 5), 1.0, run), 1, 1)
    assert list(at_one.moved) == ["softmax (tau = 1)"] and list(at_one.fixed) == ["original: softmax (tau = 1)"]
    assert [rv.tau_enters(n) for n in rv.CHOICES] == [True, True, True, False]


def test_a_lone_map_keeps_a_paired_panels_size():
    """One map is drawn in the first of two places, as wide as a panel beside another, the empty place without
    axes; an odd number of maps leaves the last row's second place empty likewise."""
    from wviz.figures import real_transformer as figs

    A = torch.softmax(torch.randn(5, 5, generator=torch.Generator().manual_seed(1)), -1)
    tokens = [f"w{i}" for i in range(5)]
    one, two = figs.attention_maps({"a": A}, tokens, 1, 1), figs.attention_maps({"a": A, "b": A}, tokens, 1, 1)
    assert list(one.layout.xaxis.domain) == list(two.layout.xaxis.domain)
    assert one.layout.xaxis2.visible is False and one.layout.yaxis2.visible is False
    assert two.layout.xaxis2.visible is not False
    three = figs.attention_maps({"a": A, "b": A, "c": A}, tokens, 1, 1)
    assert three.layout.xaxis4.visible is False and three.layout.xaxis3.visible is not False


def test_a_lone_maps_colour_bar_stands_beside_it():
    """With one normaliser chosen the colour bar stood at the figure's right edge, past the empty place (~400 px
    from its heatmap): it now starts just right of the panel; with two panels a row it keeps the right edge."""
    from wviz.figures import real_transformer as figs

    A = torch.softmax(torch.randn(5, 5, generator=torch.Generator().manual_seed(1)), -1)
    tokens = [f"w{i}" for i in range(5)]
    one, two = figs.attention_maps({"a": A}, tokens, 1, 1), figs.attention_maps({"a": A, "b": A}, tokens, 1, 1)
    bar = one.layout.coloraxis.colorbar
    assert bar.xanchor == "left" and 0 < bar.x - one.layout.xaxis.domain[1] <= 0.05
    assert bar.x < one.layout.xaxis2.domain[0]                   # before the empty place, not past it
    assert two.layout.coloraxis.colorbar.x is None               # Plotly's place: right of the second panel


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
    assert k == -(-n * figs.THIN_PX // figs.KEYS_PX) and k > 1 and figs.label_step(n, k * 1e9) == 1
    assert (n // k) * figs.THIN_PX <= figs.KEYS_PX                      # the labels kept fit, at presentation size
    x = fig.layout.xaxis
    assert list(x.tickvals) == [f"{i} w{i}" for i in range(1, n + 1, k)]   # tokens counted from 1
    lines = fig.layout.title.subtitle.text.split("<br>")
    assert f"one key token in {k} labelled" in " ".join(lines)
    assert max(len(line) for line in lines) <= figs.SUBTITLE_CHARS                # wrapped: Plotly does not wrap it
    assert figs.label_step(9) == 1 and figs.label_step(10) == 2         # 9 x 22 px fit in 200 px
    assert 9 * figs.LABEL_PX <= 130                                     # a panel's width at 800 px, at 12 px
    y = fig.layout.yaxis                                                # down a panel of its most height, 560 px
    assert len(y.tickvals) * figs.THIN_PX <= 560 < n * figs.THIN_PX


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
        assert set(p) <= {rv.Keys.LAYER, rv.Keys.HEAD, rv.Keys.NORMALISERS, rv.Keys.TAU, rv.Keys.ALPHA, rv.Keys.GAMMA,
                          rv.Keys.N_ITER, rv.Keys.RHO, rv.Keys.VIEW}
        rho = p.get(rv.Keys.RHO, float("inf"))
        assert rho in rv.RHOS and rv.rho_text(p.get(rv.Keys.RHO, 1.0)) == f"{p.get(rv.Keys.RHO, 1.0):g}"
        assert p.get(rv.Keys.VIEW, rv.Labels.SPARSITY) in (rv.Labels.SPARSITY, rv.Labels.LAYERS.format("sentence"),
                                                           rv.Labels.CLICK, rv.Labels.RHO)
        assert set(p.get(rv.Keys.NORMALISERS, [])) <= set(rv.CHOICES.values())  # as the multiselect writes the URL
        assert p.get(rv.Keys.TAU, 1.0) in grid
        assert p.get(rv.Keys.LAYER, 1) in range(1, 7) and p.get(rv.Keys.HEAD, 1) in range(1, 13)
        assert 1.0 <= p.get(rv.Keys.ALPHA, 1.5) <= 2.0 and round(p.get(rv.Keys.ALPHA, 1.5) / 0.05, 9) % 1 == 0
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
    assert sweep.cosines.shape == (2,) and sweep.distances.shape == (2, N_LAYERS)
    assert float(sweep.cosines[0]) > float(sweep.cosines[1]) > cos_inf - 0.05
    from wviz.figures import real_transformer as figs
    fig = figs.rho_sweep(sweep, math.inf)
    assert list(fig.layout.xaxis2.ticktext)[0] == "0" and list(fig.layout.xaxis2.ticktext)[-1] == "∞"
    assert len(fig.data) == 1 + N_LAYERS


# ---- what each guided experiment says to watch, on the numbers of the state its link opens ------------------------

def link_state(params: dict):
    """What the page computes when a link sets ``params`` (every other widget at its default: DEFAULT_SENTENCE, its
    default normalisers, tau = 1, alpha = 1.5, gamma = 1, 5 iterations, rho = infinity, layer 1, head 1): the
    comparison and the head it shows."""
    key_of = {label: name for name, label in rv.CHOICES.items()}
    chosen = tuple(key_of[v] for v in params.get(rv.Keys.NORMALISERS, [rv.CHOICES[n] for n in rv.DEFAULT_CHOSEN]))
    settings = rv.Settings(chosen, params.get(rv.Keys.ALPHA, 1.5), 1.0, 5, params.get(rv.Keys.RHO, math.inf))
    c = rv.comparison(settings, params.get(rv.Keys.TAU, 1.0),
                      lambda name, p: rv.forward(rv.DEFAULT_SENTENCE, name, p, CPU))
    return c, rv.one_head(c, params.get(rv.Keys.LAYER, 1), params.get(rv.Keys.HEAD, 1))


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
    assert sweep.rhos[0] == params[rv.Keys.RHO] and cosines[0] == pytest.approx(1, abs=1e-6)
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


WATCH = {"Sparsemax at tau = 0.1": watch_sharp_sparsemax,
         "From the model's softmax to Sinkformer": watch_rho_to_sinkformer,
         "An attention sink: layer 5, head 8, under Sinkhorn": watch_attention_sink,
         "entmax between softmax and sparsemax": watch_entmax_between}


@pytest.mark.parametrize("item", rv.TRY_THIS, ids=lambda t: t.label)
def test_each_guided_experiment_shows_what_its_sentence_says(item):
    """Every Try link's sentence, checked on the numbers of the state the link opens; a new link needs its check."""
    assert item.label in WATCH, f"Try {item.label!r} has no check of what its sentence says"
    WATCH[item.label](item.params)


# ---- your model: the catalogue, every family's views on tiny models (wviz.models.tiny), long inputs -----------------

@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    """A WVIZ_MODELS folder of tiny random models, one per family, saved as save_pretrained does: kind -> Lens."""
    from wviz.models import tiny

    root = tmp_path_factory.mktemp("models")
    for kind in ("bert", "gpt2", "vit"):
        tiny.save(kind, root / f"tiny-{kind}")
    (root / "not-a-model").mkdir()
    found = rv.hub.find_models([root])
    lenses = {m.name.removeprefix("tiny-"): rv.hub.load(m, CPU) for m in found.models[1:]}
    return root, found, lenses


ALL = rv.Settings(("softmax", "sparsemax", "entmax", "sinkhorn"), alpha=1.5, gamma=1.0, n_iter=5)


def tiny_comparison(lens, inputs, settings=ALL, tau=0.5):
    return rv.comparison(settings, tau, lambda name, p: rv.forward(inputs, name, p, CPU, lens), lens)


def test_the_selector_lists_the_bundled_model_first_then_the_folders(tiny_models):
    root, found, _ = tiny_models
    cat, bundled = rv.catalogue, rv.hub.BUNDLED_KEY
    options = cat.options(found)
    assert list(options) == [bundled, *(f"folder:{root.resolve() / f'tiny-{k}'}" for k in ("bert", "gpt2", "vit")),
                             cat.UPLOAD]
    assert options[bundled] == "all-MiniLM-L6-v2 (encoder, 22.7M parameters)"
    assert options[f"folder:{root.resolve() / 'tiny-gpt2'}"].startswith("tiny-gpt2 (decoder, ")
    assert len(found.skipped) == 1 and "not-a-model" in found.skipped[0] and "config.json" in found.skipped[0]
    key = f"folder:{root.resolve() / 'tiny-vit'}"
    assert cat.from_url(None, found) == (bundled, None) and cat.from_url(key, found) == (key, None)
    shown, note = cat.from_url("folder:/gone", found)
    assert shown == bundled and "does not have" in note and "WVIZ_MODELS" in note
    assert cat.info(found, key).name == "tiny-vit" and cat.info(found, "folder:/gone").key == bundled


def test_the_masked_top_5_is_the_mlm_head_of_a_direct_forward(tiny_models):
    """The original panel's top 5 for [MASK] against transformers' own eager forward of the same folder; under
    sparsemax, against softmax of the logits of wviz's forward under sparsemax (the library)."""
    from transformers import AutoModelForMaskedLM

    from wviz.models import lens as lenses

    root, _, models = tiny_models
    bert = models["bert"]
    sentence = "the cat [MASK] on the mat"
    c = tiny_comparison(bert, sentence)
    (g,) = rv.guesses(bert, c)
    assert g.title == "The top 5 for [MASK] (token 4)" and list(g.by_normaliser) == list(c.forwards())
    eager = AutoModelForMaskedLM.from_pretrained(root / "tiny-bert", attn_implementation="eager").eval()
    enc = bert.tokenizer(sentence, return_tensors="pt")
    with torch.no_grad():
        p = torch.softmax(eager(**enc).logits[0, 3].double(), -1)
    top = p.topk(5)
    original = g.by_normaliser["original: softmax (tau = 1)"]
    assert original.labels == tuple(bert.tokenizer.convert_ids_to_tokens(top.indices.tolist()))
    np.testing.assert_allclose(original.probabilities, top.values.numpy(), atol=1e-5)
    logits = lenses.forward(bert, sentence, "sparsemax", tau=0.5).logits[0, 3].double()
    want = torch.softmax(logits, -1).topk(5)
    sparse = g.by_normaliser["sparsemax (tau = 0.5)"]
    assert sparse.labels == tuple(bert.tokenizer.convert_ids_to_tokens(want.indices.tolist()))
    assert rv.mask_hint(bert, c) is None and "write [MASK]" in rv.mask_hint(bert, tiny_comparison(bert, "the cat"))
    assert rv.guesses(rv.hub.load(None, CPU), rv.comparison(ALL, 1.0, run)) == ()           # MiniLM has no head


def test_a_decoders_maps_give_no_weight_to_a_future_token(tiny_models):
    """Every normaliser's map is lower-triangular with rows summing to 1; its sparsity counts only the weights a
    query may give (on and below the diagonal); the tokens are labelled as text."""
    gpt2 = tiny_models[2]["gpt2"]
    c = tiny_comparison(gpt2, "the cat sat on the mat")
    assert c.tokens == ("the", "cat", "sat", "on", "the", "mat")
    for layer in (1, 2):
        one = rv.one_head(c, layer, 3)
        assert one.causal and len(one.maps) == 5
        for label, A in one.maps.items():
            assert float(A.triu(1).abs().max()) == 0.0, label
            np.testing.assert_allclose(A.sum(-1).numpy(), 1, atol=1e-5)
    sparse = c.swapped["sparsemax (tau = 0.5)"].attention[0].numpy()
    lower = np.tril(np.ones((6, 6), dtype=bool))
    want = ((sparse == 0) & lower).sum(axis=(-2, -1)) / lower.sum()
    np.testing.assert_allclose(rv.sparsity_maps(c)["sparsemax (tau = 0.5)"].numpy(), want)
    assert float(rv.sparsity_maps(c)["original"].max()) == 0.0                  # the causal zeros are not counted


def test_the_next_token_is_the_lm_head_of_a_direct_forward(tiny_models):
    from transformers import AutoModelForCausalLM

    root, _, models = tiny_models
    gpt2 = models["gpt2"]
    c = tiny_comparison(gpt2, "the cat sat on the")
    (g,) = rv.guesses(gpt2, c)
    assert g.title == "The 10 most likely next tokens after token 5"
    eager = AutoModelForCausalLM.from_pretrained(root / "tiny-gpt2", attn_implementation="eager").eval()
    with torch.no_grad():
        p = torch.softmax(eager(**gpt2.tokenizer("the cat sat on the", return_tensors="pt")).logits[0, -1].double(), -1)
    top = p.topk(10)
    original = g.by_normaliser["original: softmax (tau = 1)"]
    def text(i):   # decoded alone; a piece of a UTF-8 character, or nothing, as the tokenizer writes it
        piece = gpt2.tokenizer.decode([i])
        if piece and "\ufffd" not in piece:
            return piece
        return gpt2.tokenizer.convert_ids_to_tokens(i) or f"<id {i}>"

    assert original.labels == tuple(text(i) for i in top.indices.tolist())
    np.testing.assert_allclose(original.probabilities, top.values.numpy(), atol=1e-5)
    assert all(label for f in g.by_normaliser.values() for label in f.labels)      # no cell reads as nothing
    # the tiny GPT-2's embedding has 400 rows, its tokenizer fewer: an id beyond it is named by its number
    beyond = len(gpt2.tokenizer)
    assert gpt2.model.config.vocab_size > beyond and gpt2.tokenizer.decode([beyond]) == ""
    from wviz.models.tasks import _piece

    assert _piece(gpt2.tokenizer, beyond) == f"<id {beyond}>"


def test_the_perplexity_of_the_paragraph_by_hand(tiny_models, monkeypatch):
    """exp of the mean negative log-likelihood of each token given the ones before it, from transformers' eager
    forward (softmax, tau = 1); every normaliser's curve is wviz.models.tasks.perplexity at each tau, Sinkhorn's
    flat; a paragraph longer than the model reads is cut to its first words."""
    from transformers import AutoModelForCausalLM

    from wviz.models import tasks

    root, _, models = tiny_models
    gpt2 = models["gpt2"]
    text = "the cat sat on the mat and the dog ran in the park"
    settings = rv.Settings(("sparsemax", "sinkhorn"), 1.5, 1.0, 5)
    p = rv.perplexities(gpt2, settings, (0.5, 2.0), text)
    eager = AutoModelForCausalLM.from_pretrained(root / "tiny-gpt2", attn_implementation="eager").eval()
    ids = gpt2.tokenizer(text, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        logp = torch.log_softmax(eager(ids).logits[0, :-1].double(), -1)
    want = float(torch.exp(-logp.gather(1, ids[0, 1:, None]).mean()))
    assert p.original == pytest.approx(want, rel=1e-5) and p.tokens == ids.shape[1] and not p.cut
    assert list(p.curves) == ["sparsemax", "sinkhorn (gamma = 1, 5 iterations)"]
    assert p.curves["sparsemax"] == pytest.approx([tasks.perplexity(gpt2, text, "sparsemax", tau=t) for t in (0.5, 2)])
    (flat,) = set(p.curves["sinkhorn (gamma = 1, 5 iterations)"])
    assert flat == pytest.approx(tasks.perplexity(gpt2, text, "sinkhorn", gamma=1.0, n_iter=5))
    cut = rv.perplexities(gpt2, settings, (1.0,))                        # the bundled paragraph: 64 tokens at most
    assert cut.cut and cut.tokens <= 64 == rv.catalogue.token_limit(gpt2)
    with pytest.raises(ValueError, match="no causal language-model head"):
        rv.perplexities(models["bert"], settings)


def test_the_sink_share_of_one_head_by_hand(tiny_models):
    """The mean over queries 2..n of a head's weight on the first token, and on the special tokens ([CLS], [MASK],
    [SEP]), by numpy from the maps; a model whose only special token is the first has no second figure."""
    bert = tiny_models[2]["bert"]
    c = tiny_comparison(bert, "the cat [MASK] on the mat")
    s = rv.sink_maps(c)
    assert list(s.first) == list(c.forwards()) and s.first_token == "[CLS]" and s.queries == 7
    assert s.special_tokens == ("[CLS]", "[MASK]", "[SEP]")
    A = c.swapped["sinkhorn (gamma = 1, 5 iterations)"].attention[0, 1, 2].double().numpy()   # layer 2, head 3
    assert s.first["sinkhorn (gamma = 1, 5 iterations)"][1, 2] == pytest.approx(A[1:, 0].mean(), abs=1e-6)
    assert s.special["sinkhorn (gamma = 1, 5 iterations)"][1, 2] == pytest.approx(A[1:, [0, 3, 7]].sum(1).mean(),
                                                                                   abs=1e-6)
    assert s.uniform == pytest.approx(1 / 8)
    gpt2 = tiny_models[2]["gpt2"]
    d = rv.sink_maps(tiny_comparison(gpt2, "the cat sat"))
    assert d.special is None                                                        # GPT-2 adds no special token
    causal = np.tril(np.ones((d.queries + 1,) * 2))
    causal /= causal.sum(1, keepdims=True)                                          # uniform over what i may read
    assert d.uniform == pytest.approx(causal[1:, 0].mean())


@pytest.mark.parametrize("n, causal", [(2, False), (13, False), (2, True), (17, True), (512, True)])
def test_the_uniform_sink_share_is_that_of_uniform_rows(n, causal):
    A = np.tril(np.ones((n, n))) if causal else np.ones((n, n))
    A /= A.sum(1, keepdims=True)
    assert rv.uniform_share(n, causal) == pytest.approx(A[1:, 0].mean(), rel=1e-12)


def test_an_image_models_classes_patches_and_rollout(tiny_models):
    """The top 5 classes against transformers' eager forward of the same picture; the class token's weights on the
    patch grid of one head, and rollout, by numpy from the maps (Abnar and Zuidema: A' = (mean_h A + I) / 2)."""
    from transformers import AutoModelForImageClassification

    root, _, models = tiny_models
    vit = models["vit"]
    picture = rv.example_picture("drawn shapes")
    c = tiny_comparison(vit, picture)
    assert c.tokens[:3] == ("[CLS]", "patch 1,1", "patch 1,2") and c.tokens[-1] == "patch 4,4"   # counted from 1
    (g,) = rv.guesses(vit, c)
    eager = AutoModelForImageClassification.from_pretrained(root / "tiny-vit", attn_implementation="eager").eval()
    with torch.no_grad():
        p = torch.softmax(eager(**vit.processor(images=picture, return_tensors="pt")).logits[0].double(), -1)
    top = p.topk(5)
    original = g.by_normaliser["original: softmax (tau = 1)"]
    assert original.labels == tuple(eager.config.id2label[i] for i in top.indices.tolist())
    np.testing.assert_allclose(original.probabilities, top.values.numpy(), atol=1e-5)
    pm = rv.patch_maps(vit, c, 2, 4)
    label = "entmax (alpha = 1.5, tau = 0.5)"
    A = c.swapped[label].attention[0].double().numpy()                           # (L, H, 17, 17)
    np.testing.assert_allclose(pm.heads[label].numpy(), A[1, 3, 0, 1:].reshape(4, 4), atol=1e-6)
    R = np.eye(17)
    for layer in A:
        R = (layer.mean(0) + np.eye(17)) / 2 @ R
    np.testing.assert_allclose(pm.rollout[label].numpy(), R[0, 1:].reshape(4, 4), atol=1e-6)
    assert rv.catalogue.patch_grid(vit) == (4, 4) and rv.input_length(vit, picture) == 17


def test_pictures_bundled_and_uploaded():
    import io

    from PIL import Image

    for name in rv.PICTURES:
        im = rv.example_picture(name)
        assert im.mode == "RGB" and min(im.size) >= 200
    buffer = io.BytesIO()
    Image.new("RGB", (30, 20), (0, 114, 178)).save(buffer, "PNG")
    assert rv.read_picture(buffer.getvalue()).size == (30, 20)
    with pytest.raises(ValueError, match="not a picture"):
        rv.read_picture(b"not a picture")
    with pytest.raises(ValueError, match="unknown picture"):
        rv.example_picture("cat.jpg")


def test_inputs_up_to_the_models_maximum():
    """The 128-token cap is gone: MiniLM reads 512 word pieces ([CLS] and [SEP] included), not 513."""
    minilm_lens = rv.hub.load(None, CPU)
    assert rv.catalogue.token_limit(minilm_lens) == 512 and rv.catalogue.shape(minilm_lens) == (6, 12)
    text = " ".join(["word"] * 510)
    assert rv.input_length(minilm_lens, text) == 512 > rv.SHORT
    f = rv.forward(text, "sparsemax", (("tau", 1.0),), CPU)
    assert tuple(f.attention.shape) == (1, 6, 12, 512, 512) and f.scores is None    # the page keeps the weights only
    with pytest.raises(ValueError, match="513 tokens long .* at most 512"):
        rv.forward(text + " word", *rv.BASE, CPU)


def test_a_long_sparse_map_is_drawn_by_its_nonzero_links():
    """At 512 tokens sparsemax's map (three keys a row) is drawn as one marker per nonzero weight, at its (query,
    key), coloured by its weight on the heatmaps' colour axis; a dense map stays a heatmap of float32 weights; short
    maps are heatmaps whatever their zeros."""
    from wviz.figures import real_transformer as figs

    n = 512
    g = torch.Generator().manual_seed(0)
    sparse = torch.zeros(n, n)
    keys = torch.randint(0, n, (n, 3), generator=g)
    sparse[torch.arange(n)[:, None], keys] = 1 / 3
    dense = torch.softmax(torch.randn(n, n, generator=g), -1)
    tokens = [f"w{i}" for i in range(1, n + 1)]
    fig = figs.attention_maps({"original": dense, "sparsemax": sparse}, tokens, 1, 1)
    heat, links = fig.data
    assert heat.type == "heatmap" and heat.z.dtype == np.float32 and np.array_equal(heat.z, dense.numpy())
    assert links.type == "scattergl" and links.marker.coloraxis == "coloraxis"
    labels = figs.token_labels(tokens)
    i, j = np.nonzero(sparse.numpy())
    assert list(links.y) == list(i) and list(links.x) == list(j)         # where a category axis puts token i, j
    np.testing.assert_array_equal(links.customdata, np.stack([i + 1, j + 1], 1))   # hovered counted from 1
    np.testing.assert_allclose(links.marker.color, sparse.numpy()[i, j])
    x = fig.layout.xaxis2
    step = figs.label_step(n)
    assert list(x.ticktext) == labels[::step] and list(x.tickvals) == list(range(0, n, step))
    assert list(x.range) == [-0.5, n - 0.5] and list(fig.layout.yaxis2.range) == [n - 0.5, -0.5]
    assert "sparsemax: each nonzero weight a square" in fig.layout.title.subtitle.text.replace("<br>", " ")
    assert figs.drawn_as_links(sparse) and not figs.drawn_as_links(dense) and not figs.drawn_as_links(torch.eye(60))
    # the points lie on the scale's 0, in presentation mode Cividis's as their colour axis (it was Viridis's purple)
    (ground,) = fig.layout.shapes
    scale = fig.layout.coloraxis.colorscale
    assert ground.fillcolor == scale[0][1] and ground.xref == "x2 domain"
    shown = export.presentation_style(fig)
    assert shown.layout.coloraxis.colorscale != scale and shown.layout.shapes[0].fillcolor == \
        shown.layout.coloraxis.colorscale[0][1]


def test_the_predictions_table_reads_token_and_probability():
    from wviz.figures import real_transformer as figs
    from wviz.models.tasks import Prediction

    g = rv.Guesses("The 10 most likely next tokens after token 5",
                   {"original: softmax (tau = 1)": Prediction(4, (" cat", "mat"), (0.51234, 0.000012)),
                    "sparsemax (tau = 1)": Prediction(4, ("\n",), (1.0,)),
                    "entmax (alpha = 1.5, tau = 1)": Prediction(4, ("\t", "\x12"), (0.5, 0.25))})
    table = figs.guesses_table(g)
    assert list(table.index) == [1, 2] and table.index.name == "rank"
    assert list(table) == ["original", "sparsemax", "entmax"]
    assert list(table["original"]) == ["␣cat  0.512", "mat  1.2e-5"]
    assert list(table["sparsemax"]) == ["↵  1", ""]
    assert list(table["entmax"]) == ["⇥  0.5", "\\x12  0.25"]        # invisible characters, readable


def test_the_readmes_your_model_snippet_runs_on_tiny_models(tmp_path, monkeypatch):
    """The README's "Your model" notebook example, run as written against tiny models saved in the folders it names
    (and a short paragraph: a tiny GPT-2 reads 64 tokens)."""
    import re
    from pathlib import Path

    from PIL import Image

    from wviz.models import tiny

    root = Path(__file__).resolve().parents[2]
    text = (root / "README.md").read_text()
    section = text[text.index("## Your model"):]
    section = section[:section.index("\n## ", 10)]
    (code,) = [c for c in re.findall(r"```python\n(.*?)```", section, re.S) if "lens.forward" in c]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WVIZ_DEVICE", "cpu")
    monkeypatch.setattr("wviz.models.corpus.PARAGRAPH", "the cat sat on the mat and the dog ran in the park")
    for kind, folder in (("bert", "bert-base-uncased"), ("gpt2", "gpt2"), ("vit", "vit-base-patch16-224")):
        tiny.save(kind, tmp_path / "models" / folder)
    Image.radial_gradient("L").convert("RGB").save(tmp_path / "cat.jpg")
    space = {}
    exec(compile(code, "README.md", "exec"), space)                     # noqa: S102 (the README's own example)
    assert tuple(space["f"].attention.shape) == (1, 2, 4, 17, 17)
    assert space["bert"].family == "encoder" and space["gpt2"].head == "causal-lm"


def test_a_link_to_the_old_figure4_view_opens_the_heads_dual_page_in_its_state():
    """The model, sentence, alpha and presentation mode of an old Figure 4 link travel under the new page's keys;
    the rest of the old link (tau, the normalisers) belongs to this page and is dropped; any other link stays."""
    from wviz.views import heads_dual as hd

    old = {rv.Keys.VIEW: rv.FIGURE4_VIEW, rv.Keys.MODEL: "folder:/srv/models/bert", rv.Keys.SENTENCE: "Bees.",
           "dual_alpha": "0.1", rv.Keys.TAU: "2", "presentation": "true"}
    assert rv.figure4_link(old) == {hd.Keys.MODEL: "folder:/srv/models/bert", hd.Keys.SENTENCE: "Bees.",
                                    hd.Keys.ALPHA: "0.1", "presentation": "true"}
    assert rv.figure4_link({rv.Keys.VIEW: rv.Labels.SINKS, "dual_alpha": "0.1"}) is None
    assert rv.FIGURE4_VIEW not in vars(rv.Labels).values()
