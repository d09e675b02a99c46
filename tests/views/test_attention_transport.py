"""The page-level computations: grid, landscape and tau sweep agree with the maps they are built on."""
import itertools
import json
import math

import numpy as np
import pandas as pd
import pytest
import torch

from wviz.figures import attention_transport as figs
from wviz.views import attention_transport as av


def test_simplex_raster_covers_the_triangle():
    """Cell centres map back to their barycentric coordinates (x = p_1 / 2 + p_3, y = sqrt(3) / 2 p_1), the
    cells inside fill half the raster (the triangle's share of its bounding box), and every point of a lattice on
    the simplex lies within a few cells of a cell inside (the corners are 60 degree wedges: no centre near the
    tip)."""
    x, y, p = av.simplex_raster(40)
    assert p.shape == (len(y), 40, 3) and len(y) == 35
    torch.testing.assert_close(p.sum(-1), torch.ones(len(y), 40, dtype=torch.float64))
    torch.testing.assert_close(p[..., 0] / 2 + p[..., 2], x.expand(len(y), 40))
    torch.testing.assert_close(np.sqrt(3) / 2 * p[..., 0], y.unsqueeze(1).expand(len(y), 40))
    inside = (p >= 0).all(-1)
    assert abs(int(inside.sum()) / inside.numel() - 0.5) < 0.03
    lattice = torch.tensor([(i, j, 10 - i - j) for i in range(11) for j in range(11 - i)], dtype=torch.float64) / 10
    gaps = torch.cdist(lattice, p[inside]).min(-1).values   # distances in barycentric coordinates
    assert float(gaps.max()) < 3 / 40


@pytest.mark.parametrize("mechanism", list(av.MECHANISMS))
def test_tau_sweep_equals_one_call_per_tau(mechanism):
    s = torch.tensor([1.3, -0.2, 0.4, 0.9], dtype=torch.float64)
    prior = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    taus = torch.logspace(-2, 2, 9, dtype=torch.float64)
    sweep = av.tau_sweep(mechanism, s, taus, alpha=1.3, prior=prior)
    for t, row in zip(taus.tolist(), sweep):
        torch.testing.assert_close(row, av.attend(mechanism, s, t, alpha=1.3, prior=prior), atol=1e-10, rtol=0)


@pytest.mark.parametrize("mechanism", list(av.MECHANISMS))
def test_landscape_minimum_is_the_closed_form(mechanism):
    s = torch.tensor([0.7, 0.1, -0.5], dtype=torch.float64)
    land = av.landscape(mechanism, s, 0.5, alpha=1.5, prior=torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64))
    drawn = land.values[land.values.isfinite()]
    assert drawn.numel() > 2000 and land.closed_value <= float(drawn.min()) + 1e-12  # no cell beats the closed form
    assert abs(land.closed_value - land.numerical_value) < 1e-9
    torch.testing.assert_close(land.closed_form, land.numerical, atol=1e-5, rtol=0)


def test_landscape_needs_three_keys_and_prior_softmax_a_prior():
    with pytest.raises(ValueError, match="exactly 3 keys"):
        av.landscape("softmax", torch.zeros(4, dtype=torch.float64), 1.0)
    with pytest.raises(ValueError, match="needs a prior"):
        av.attend("prior-softmax", torch.zeros(3), 1.0)
    with pytest.raises(ValueError, match="unknown mechanism"):
        av.attend("hardmax", torch.zeros(3), 1.0)


def test_dot_scores_single_and_many_queries():
    q, k = av.random_queries_keys(5, 7, 3, seed=1, dtype=torch.float64)
    torch.testing.assert_close(av.dot_scores(q, k), q @ k.T)
    torch.testing.assert_close(av.dot_scores(q[2], k).squeeze(-1), k @ q[2])


def test_scores_from_the_page_inputs_are_dot_products():
    keys = pd.DataFrame({"x": [1.0, 0.2, -0.8], "y": [0.2, 1.0, -0.4]})
    s = av.scores_from_points((1.0, 0.3), keys)
    np.testing.assert_allclose(s.numpy(), keys.to_numpy() @ np.array([1.0, 0.3]), atol=1e-15)
    with pytest.raises(ValueError, match="row 2, column y"):
        av.scores_from_points((1.0, 0.3), keys.assign(y=[0.2, None, 1.0]))
    with pytest.raises(ValueError, match="at least one key"):
        av.scores_from_points((1.0, 0.3), keys.iloc[:0])
    q, k = av.random_queries_keys(1, 6, 4, seed=3, dtype=torch.float64)
    torch.testing.assert_close(av.scores_random(6, 4, 3), k @ q[0])
    assert av.scores_typed("2, -inf 0.5").tolist() == [2.0, float("-inf"), 0.5]


def numpy_sparsemax(z):
    """Euclidean projection onto the simplex by sorting (Martins & Astudillo 2016, Algorithm 1)."""
    zs = np.sort(z)[::-1]
    k = np.arange(1, len(z) + 1)
    support = 1 + k * zs > np.cumsum(zs)
    theta = (np.cumsum(zs)[support][-1] - 1) / k[support][-1]
    return np.maximum(z - theta, 0)


@pytest.mark.parametrize("tau", [0.5, 1.0, 3.0])
def test_weights_and_summary_against_numpy(tau):
    s = torch.tensor([1.06, 0.5, -0.92], dtype=torch.float64)
    w = av.weights(av.Inputs(s, None, ("softmax", "sparsemax"), 1.5), tau)
    e = np.exp((s.numpy() - s.numpy().max()) / tau)
    p = e / e.sum()
    np.testing.assert_allclose(w.p["softmax"].numpy(), p, atol=1e-15)
    np.testing.assert_allclose(w.p["sparsemax"].numpy(), numpy_sparsemax(s.numpy() / tau), atol=1e-12)
    table = av.summary(w)
    assert table["support size"].tolist() == [3, int((numpy_sparsemax(s.numpy() / tau) > 0).sum())]
    assert table["entropy (nats)"][0] == pytest.approx(-(p * np.log(p)).sum(), abs=1e-12)
    assert table["objective"][0] == pytest.approx(-(s.numpy() @ p) + tau * (p * np.log(p)).sum(), abs=1e-12)
    with pytest.raises(ValueError, match="at least one mechanism"):
        av.Inputs(s, None, (), 1.5)


def test_a_uniform_prior_table_gives_softmax_and_many_queries_rows_sum_to_one():
    s = torch.tensor([0.3, -0.2, 1.0], dtype=torch.float64)
    prior = av.prior_from_table(av.prior_table(3))
    w = av.weights(av.Inputs(s, prior, ("softmax", "prior-softmax"), 1.5), 1.0)
    torch.testing.assert_close(w.p["prior-softmax"], w.p["softmax"])
    res = av.many_queries("sparsemax", 64, 1024, 8, 0, 1.0, 1.5)
    assert res.block == (1, 2) and tuple(res.pooled.shape) == (64, 512)
    # block means of rows that sum to 1 over 1024 keys: each pooled row sums to 1 / 2
    np.testing.assert_allclose(res.pooled.sum(-1).numpy(), 0.5, atol=1e-5)
    assert 1 <= res.mean_support <= 1024


def test_the_tau_sweep_animation_has_25_distinct_frames_titled_with_their_tau():
    s = torch.tensor([1.06, 0.5, -0.92], dtype=torch.float64)
    inputs = av.Inputs(s, None, ("softmax", "sparsemax"), 1.5)
    frames = av.sweep_frames(inputs)
    taus = [w.tau for w in frames]
    assert len(frames) == 25 and taus[0] == pytest.approx(1e-3) and taus[-1] == pytest.approx(1e3)   # the sweep's
    np.testing.assert_allclose(np.diff(np.log10(taus)), 0.25, atol=1e-12)          # a log grid
    for w in frames:                                                                # each frame: its own tau
        e = np.exp((s.numpy() - s.numpy().max()) / w.tau)
        np.testing.assert_allclose(w.p["softmax"].numpy(), e / e.sum(), atol=1e-12)
        np.testing.assert_allclose(w.p["sparsemax"].numpy(), numpy_sparsemax(s.numpy() / w.tau), atol=1e-12)
    figures = figs.weights_frames(frames, inputs.labels)
    assert [f.layout.title.text for f in figures][:2] == ["Weights at tau = 0.001", "Weights at tau = 0.001778"]
    assert figures[-1].layout.title.text == "Weights at tau = 1000"
    ys = [np.concatenate([np.asarray(tr.y) for tr in f.data]) for f in figures]
    assert all(not np.array_equal(a, b) for a, b in itertools.pairwise(ys))       # consecutive frames differ
    assert all(tuple(f.layout.yaxis.range) == (0, 1.05) for f in figures)           # fixed axes: no jumping


def test_prior_table_errors_name_every_problem_in_the_users_terms():
    table = av.prior_table(4).assign(prior=[0.5, None, -0.25, "abc"])
    with pytest.raises(ValueError) as err:
        av.prior_from_table(table)
    message = str(err.value)
    for part in ("k2 is empty or not a number", "k4 is empty or not a number", "k3 has a negative weight (-0.25)",
                 "uniform: k1 = 0.25, k2 = 0.25, k3 = 0.25, ..."):
        assert part in message, message
    with pytest.raises(ValueError, match="the weights sum to 0.9, not 1"):
        av.prior_from_table(av.prior_table(3).assign(prior=[0.5, 0.3, 0.1]))
    np.testing.assert_array_equal(av.prior_from_table(av.prior_table(2).assign(prior=[1.0, 0.0])).numpy(), [1, 0])


def test_vector_tex_shortens_long_vectors():
    from wviz.figures.common import vector_tex

    assert vector_tex(torch.tensor([1.06, 0.5, -0.92])) == "(1.06, 0.5, -0.92)"
    tiny = torch.tensor([1.0, 6.2386e-244, 0.0], dtype=torch.float64)
    assert vector_tex(tiny) == r"(1, 6.24 \times 10^{-244}, 0)"   # not 6.24e-244
    long = vector_tex(torch.arange(40.0))
    assert long == r"(0, 1, 2, \ldots, 39) \in \mathbb{R}^{40}"


def test_figures_label_every_key_and_read_on_a_projector():
    labels = [f"k{j + 1}" for j in range(20)]
    bars = figs.weights_bars({"softmax": torch.full((20,), 1 / 20)}, labels)
    assert list(bars.layout.xaxis.ticktext) == labels and bars.layout.xaxis.tickangle == -90
    assert list(bars.data[0].x) == labels
    # 64 keys do not fit as labels: every 3rd is labelled, and the title says so; every bar is still drawn
    labels = [f"k{j + 1}" for j in range(64)]
    bars = figs.weights_bars({"softmax": torch.full((64,), 1 / 64)}, labels, "Weights at tau = 1")
    assert list(bars.layout.xaxis.ticktext) == labels[::3] and len(bars.data[0].x) == 64
    assert bars.layout.title.text == "Weights at tau = 1 (every 3rd key labelled)"
    sweep = figs.tau_sweep_lines(av.TAUS, torch.ones(len(av.TAUS), 2) / 2, ["k1", "k2"], 1.0, "t")
    assert list(sweep.layout.xaxis.ticktext) == ["0.001", "0.01", "0.1", "1", "10", "100", "1000"]
    heat = figs.attention_heatmap(torch.rand(5, 7), "t")
    assert heat.data[0].showscale and heat.data[0].colorbar.title.text == "weight"
    assert (heat.layout.xaxis.title.text, heat.layout.yaxis.title.text) == ("key j", "query i")


def test_queries_and_keys_count_from_1_and_the_tau_label_sits_on_its_line():
    heat = figs.attention_heatmap(torch.rand(5, 7), "t")
    assert list(heat.data[0].x) == list(range(1, 8)) and list(heat.data[0].y) == list(range(1, 6))
    pooled = figs.attention_heatmap(torch.rand(2, 3), "t", block=(8, 4))   # a cell: its first query / key
    assert list(pooled.data[0].x) == [1, 5, 9] and list(pooled.data[0].y) == [1, 9]
    sweep = figs.tau_sweep_lines(av.TAUS, torch.ones(len(av.TAUS), 2) / 2, ["k1", "k2"], 0.316, "t")
    (label,) = sweep.layout.annotations
    assert 10 ** label.x == pytest.approx(0.316) and sweep.layout.shapes[0].x0 == 0.316


@pytest.mark.parametrize("item", av.TRY_THIS, ids=lambda t: t.label)
def test_try_this_values_are_options_of_their_widgets(item):
    """A link's value that a widget does not offer would be dropped by Streamlit: tau on the log slider's grid,
    mechanisms among the mechanisms, alpha on its slider's steps, the prior through the page's own parser."""
    grid = {float(f"{v:.3g}") for v in np.logspace(-3, 2, 5 * 12 + 1)}
    for key, value in item.params.items():
        if key == av.Keys.TAU:
            assert value in grid and f"{value:.3g}" == str(value)        # the URL holds the slider's label
        elif key == av.Keys.MECHANISMS:
            assert set(value) <= set(av.CHOICES)
        elif key == av.Keys.RHO:
            assert value in av.RHOS and av.rho_text(value) == f"{value:g}"   # the URL holds the slider's label
        elif key == av.Keys.VIEW:
            assert value in (av.Labels.SIDE_BY_SIDE, av.Labels.LANDSCAPE, av.Labels.TAU_SWEEP, av.Labels.RHO_SWEEP,
                             av.Labels.MANY_QUERIES)
        elif key == av.Keys.ALPHA:
            assert 1.0 <= value <= 2.0 and round(value / 0.05, 9) % 1 == 0
        elif key == av.Keys.PRIOR_TABLE.format(3):
            table = pd.DataFrame(json.loads(value), columns=["key", "prior"])
            np.testing.assert_allclose(av.prior_from_table(table).numpy(), [0.6, 0.3, 0.1])
        else:
            raise AssertionError(f"unexpected parameter {key}")


# ---- semi-relaxed OT -----------------------------------------------------------------------------------------------

def default_inputs(mechanisms=("softmax", av.SEMI), rho=1.0, prior=None):
    s = av.scores_from_points(av.DEFAULT_QUERY, av.DEFAULT_KEYS)
    return av.Inputs(s, prior, mechanisms, 1.5, av.queries_from_points(s, av.DEFAULT_KEYS), rho)


def test_the_queries_are_the_page_query_and_the_keys_attending_to_each_other():
    keys = av.DEFAULT_KEYS.to_numpy()
    s = av.scores_from_points(av.DEFAULT_QUERY, av.DEFAULT_KEYS)
    S = av.queries_from_points(s, av.DEFAULT_KEYS)
    assert torch.equal(S[0], s)   # the page's own scores, bit for bit
    np.testing.assert_allclose(S[1:].numpy(), keys @ keys.T, atol=1e-15)
    q, k = av.random_queries_keys(1, 6, 4, seed=3, dtype=torch.float64)
    R = av.queries_random(av.scores_random(6, 4, 3), 6, 4, 3)
    torch.testing.assert_close(R, torch.cat([(k @ q[0])[None], k @ k.T]))


@pytest.mark.parametrize("tau", [0.3, 1.0])
def test_semi_relaxed_runs_from_softmax_to_the_balanced_plan(tau):
    """rho = 0: the query's weights are its softmax (uniform b) or prior-softmax (the prior as b); rho = inf: every
    key receives b_j from the n queries together, each query keeping its mass 1 / n; the bars are n P_0."""
    inputs = default_inputs()
    zero, inf = av.semi_relaxed(inputs, tau, 0.0), av.semi_relaxed(inputs, tau, math.inf)
    s = inputs.scores.numpy()
    np.testing.assert_allclose(zero.weights.numpy(), np.exp(s / tau) / np.exp(s / tau).sum(), atol=1e-12)
    np.testing.assert_allclose(inf.columns.numpy(), 1 / 3, atol=1e-6)
    np.testing.assert_allclose(inf.plan.sum(1).numpy(), 1 / 4, atol=1e-6)
    for semi in (zero, inf):
        torch.testing.assert_close(semi.weights, semi.plan[0] * 4)
    prior = torch.tensor([0.6, 0.3, 0.1], dtype=torch.float64)
    pz = av.semi_relaxed(default_inputs(prior=prior), tau, 0.0)
    want = prior.numpy() * np.exp(s / tau)
    np.testing.assert_allclose(pz.weights.numpy(), want / want.sum(), atol=1e-12)
    w = av.weights(default_inputs(rho=0.0), tau)
    torch.testing.assert_close(w.p[av.SEMI], w.p["softmax"], atol=1e-12, rtol=0)
    assert math.isnan(av.summary(w)["objective"][1])   # no objective of one query's p alone


def test_one_typed_query_is_the_prior_softmax_at_tau_plus_rho():
    """With one query (typed scores) the problem is min <C, p> + (tau + rho) KL(p | b): prior-softmax at tau + rho;
    a masked key gets nothing."""
    s = av.scores_typed("2, -inf, 0.5, 1")
    prior = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    inputs = av.Inputs(s, prior, (av.SEMI,), 1.5)
    for tau, rho in ((1.0, 0.5), (0.2, 3.0)):
        semi = av.semi_relaxed(inputs, tau, rho)
        b = torch.tensor([0.1, 0.0, 0.3, 0.4], dtype=torch.float64) / 0.8
        want = b * torch.exp(torch.where(torch.isfinite(s), s, 0) / (tau + rho))
        torch.testing.assert_close(semi.weights, want / want.sum(), atol=1e-6, rtol=0)   # the solver's tol
        assert float(semi.weights[1]) == 0.0
        torch.testing.assert_close(semi.columns, semi.weights)
    with pytest.raises(ValueError, match="every key is masked"):
        av.semi_relaxed(av.Inputs(s, torch.tensor([0.0, 1.0, 0.0, 0.0], dtype=torch.float64), (av.SEMI,), 1.5),
                        1.0, 1.0)


def test_the_rho_sweep_walks_the_columns_to_b():
    """Along the grid the columns' KL divergence from b falls, each rho's solve equals one made alone, and the
    ends are the closed forms; the animation runs from 0 to infinity in 24 frames."""
    inputs = default_inputs()
    sweep = av.rho_sweep(inputs, 1.0)
    kls = [float((c * (c / sweep.b).log()).sum()) for c in sweep.columns]
    assert all(x >= y - 1e-12 for x, y in zip(kls, kls[1:])) and kls[0] > 10 * kls[-1]
    for i in (0, 20, len(sweep.rhos) - 1):
        alone = av.semi_relaxed(inputs, 1.0, float(sweep.rhos[i]))
        torch.testing.assert_close(sweep.weights[i], alone.weights, atol=1e-5, rtol=0)
    assert sweep.ends[0].rho == 0.0 and math.isinf(sweep.ends[1].rho)
    frames = av.rho_frames(inputs, 1.0)
    assert len(frames) == 24 and frames[0].rho == 0.0 and math.isinf(frames[-1].rho)
    figures = figs.rho_frames(frames, inputs.labels)
    assert len({f.layout.title.text for f in figures}) == 24
    assert {f.layout.yaxis.range[1] for f in figures} == {figures[0].layout.yaxis.range[1]}   # one axis
    fig = figs.rho_sweep_lines(sweep, inputs.labels, 1.0)
    assert list(fig.layout.xaxis2.ticktext)[0] == "0" and list(fig.layout.xaxis2.ticktext)[-1] == "∞"


def test_many_queries_under_semi_relaxed_ot_are_distributions_whose_columns_approach_uniform():
    tight = av.many_queries(av.SEMI, 64, 32, 8, 0, 1.0, 1.5, rho=1e4)
    loose = av.many_queries(av.SEMI, 64, 32, 8, 0, 1.0, 1.5, rho=1e-3)
    soft = av.many_queries("softmax", 64, 32, 8, 0, 1.0, 1.5)
    for res in (tight, loose):
        np.testing.assert_allclose(res.pooled.sum(-1).numpy(), 1.0, atol=1e-4)
    np.testing.assert_allclose(loose.pooled.numpy(), soft.pooled.numpy(), atol=1e-3)
    np.testing.assert_allclose(tight.pooled.sum(0).numpy(), 64 / 32, rtol=1e-3)   # every key receives its share


# ---- what each guided experiment says to watch, on the numbers of the state its link opens ------------------------

def link_state(params: dict) -> tuple[av.Inputs, float]:
    """The inputs and tau that the page reads when a link sets ``params`` (every other widget at its default: the
    2-D points, tau = 1, alpha = 1.5, rho = 1; the prior table, shown for prior-softmax and semi-relaxed OT, uniform
    unless the link fills it)."""
    mechanisms = tuple(params.get(av.Keys.MECHANISMS, av.DEFAULT_MECHANISMS))
    s = av.scores_from_points(av.DEFAULT_QUERY, av.DEFAULT_KEYS)
    prior = None
    if "prior-softmax" in mechanisms or av.SEMI in mechanisms:
        prior_key = av.Keys.PRIOR_TABLE.format(3)
        rows = json.loads(params[prior_key]) if prior_key in params else av.prior_table(3).values.tolist()
        prior = av.prior_from_table(pd.DataFrame(rows, columns=["key", "prior"]))
    inputs = av.Inputs(s, prior, mechanisms, params.get(av.Keys.ALPHA, av.DEFAULT_ALPHA),
                       av.queries_from_points(s, av.DEFAULT_KEYS), params.get(av.Keys.RHO, av.DEFAULT_RHO))
    return inputs, params.get(av.Keys.TAU, 1.0)


def watch_small_tau(params):
    inputs, tau = link_state(params)
    w = av.weights(inputs, tau)
    support = dict(zip(*av.summary(w)[["mechanism", "support size"]].T.values))
    for name in ("sparsemax", "entmax"):
        assert support[name] == 1 and w.p[name][0] == 1                    # all the mass on k1
    p, s = w.p["softmax"], inputs.scores
    assert p[0] == pytest.approx(1, abs=1e-15) and 1e-244 < p[1] < 1e-243   # about 6e-244 for k2
    assert p[2] == 0 and float((s[2] - s[0]) / tau) < math.log(5e-324)       # k3 below the smallest double
    assert support["softmax"] == 2


def watch_large_tau(params):
    inputs, tau = link_state(params)
    w = av.weights(inputs, tau)
    assert set(w.p) == {"softmax", "sparsemax", "entmax"}
    assert all(0.32 <= float(p.min()) and float(p.max()) <= 0.35 for p in w.p.values())   # about 1/3 each
    assert int((w.p["sparsemax"] > 0).sum()) == 3                           # even sparsemax keeps all three


def watch_entmax_alpha_1(params):
    inputs, tau = link_state(params)
    w = av.weights(inputs, tau)
    torch.testing.assert_close(w.p["entmax"], w.p["softmax"], atol=1e-12, rtol=0)


def watch_semi_relaxed(params):
    inputs, tau = link_state(params)
    w = av.weights(inputs, tau)
    assert w.semi.plan.shape == (4, 3)                                      # four tokens attend to three keys
    softmax, semi = w.p["softmax"], w.p[av.SEMI]
    assert 0.075 < softmax[2] < 0.085 and (w.semi.columns - 1 / 3).abs().max() < 1e-3
    assert 0.145 < semi[2] < 0.155 and 1.8 < semi[2] / softmax[2] < 2       # k3's weight nearly doubles
    sweep = av.rho_sweep(inputs, tau)
    torch.testing.assert_close(sweep.ends[0].weights, softmax)              # rho = 0: softmax
    torch.testing.assert_close(sweep.ends[1].columns, sweep.b, atol=1e-6, rtol=0)   # rho = inf: balanced
    assert (torch.diff(sweep.weights[:, 2]) >= -1e-9).all()                 # k3 grows along the sweep


def watch_prior_softmax(params):
    inputs, tau = link_state(params)
    w = av.weights(inputs, tau)
    assert float((w.p["prior-softmax"] - torch.tensor([0.6, 0.3, 0.1], dtype=torch.float64)).abs().max()) < 0.01
    assert float((w.p["softmax"] - 1 / 3).abs().max()) < 0.01


WATCH = {"Send tau to 0.001": watch_small_tau, "Send tau to 100": watch_large_tau,
         "entmax with alpha = 1": watch_entmax_alpha_1, "Semi-relaxed OT: from softmax to Sinkhorn": watch_semi_relaxed,
         "prior-softmax with the prior (0.6, 0.3, 0.1) at tau = 100": watch_prior_softmax}


@pytest.mark.parametrize("item", av.TRY_THIS, ids=lambda t: t.label)
def test_each_guided_experiment_shows_what_its_sentence_says(item):
    """Every Try link's sentence, checked on the numbers of the state the link opens; a new link needs its check."""
    assert item.label in WATCH, f"Try {item.label!r} has no check of what its sentence says"
    WATCH[item.label](item.params)


def test_live_inputs_carry_what_the_browser_kernels_need():
    """The bars follow a drag with the scores, the prior and the mechanisms in the bars' trace order; with
    semi-relaxed OT also its problem (a, b, C of semi_problem) and the released plan's potentials, with which
    exp((f_i + g_j - C_ij) / tau) is that plan."""
    s = torch.tensor([1.0, -math.inf, 0.5], dtype=torch.float64)
    prior = torch.tensor([0.5, 0.25, 0.25], dtype=torch.float64)
    w = av.weights(av.Inputs(s, prior, ("entmax", "prior-softmax"), 1.3), 0.5)
    live = av.live_inputs(w)
    assert live["mechanisms"] == list(w.p) == [trace.name for trace in figs.main_figure(w).data]
    assert live["scores"] is s and live["prior"] is prior and "semi" not in live
    queries = torch.tensor([[1.0, 0.0, 0.5], [0.0, 1.0, 0.2]], dtype=torch.float64)
    inputs = av.Inputs(s.clamp(min=0), prior, ("softmax", av.SEMI), 1.5, queries)
    semi = av.live_inputs(av.weights(inputs, 0.5))["semi"]
    for name, x in zip("abC", av.semi_problem(inputs)):
        assert torch.equal(semi[name], x)
    P = ((semi["f"][:, None] + semi["g"][None, :] - semi["C"]) / 0.5).exp()
    torch.testing.assert_close(P, av.semi_relaxed(inputs, 0.5, inputs.rho).plan, atol=1e-15, rtol=0)
    assert semi["tol"] == av.SEMI_TOL


def test_a_mechanism_keeps_its_colour_and_keys_are_greys_not_mechanism_colours():
    """Issue 48: the second mechanism was orange whichever it was; in the sweeps blue, orange and green meant keys."""
    s = torch.tensor([1.06, 0.5, -0.92], dtype=torch.float64)
    colour = {}
    for chosen in (("softmax", "sparsemax"), ("softmax", "entmax"), ("entmax", "prior-softmax", av.SEMI)):
        prior = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64) if "prior-softmax" in chosen else None
        w = av.weights(av.Inputs(s, prior, chosen, 1.5), 1.0)
        for bar in figs.main_figure(w).data:
            assert colour.setdefault(bar.name, bar.marker.color) == bar.marker.color, bar.name
    assert len(set(colour.values())) == len(colour) == 5
    inputs = av.Inputs(s, None, ("softmax",), 1.5)
    lines = figs.tau_sweep_lines(av.TAUS, torch.rand(len(av.TAUS), 3), inputs.labels, 1.0, "t")
    greys = [t.line.color for t in lines.data]
    assert greys == figs.key_greys(3) and not set(greys) & set(colour.values())
    assert all(len(set(g[4:-1].split(","))) == 1 for g in greys)   # r = g = b


def test_the_summary_lists_each_keys_weight_for_a_few_keys():
    """Up to MAX_WEIGHT_COLUMNS keys the table holds p*(k_j) per mechanism (what the Try sentences quote); more
    keys, no such columns (the bars show them)."""
    s = torch.tensor([1.06, 0.5, -0.92], dtype=torch.float64)
    w = av.weights(av.Inputs(s, None, ("softmax", "sparsemax"), 1.5), 0.5)
    table = av.summary(w)
    for row, p in enumerate(w.p.values()):
        assert [table[f"p(k{j + 1})"][row] for j in range(3)] == p.tolist()
    many = av.weights(av.Inputs(torch.linspace(0, 1, av.MAX_WEIGHT_COLUMNS + 1, dtype=torch.float64), None,
                                ("softmax",), 1.5), 0.5)
    assert not [c for c in av.summary(many).columns if c.startswith("p(")]
