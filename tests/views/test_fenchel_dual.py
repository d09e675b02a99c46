"""The "Attention solves a dual problem" page's computations (002) against independent references: the optimality
condition of the dual (9), numpy transcriptions of (15), (18), (19)-(20), (25), (40), the closed form of Sec. 5,
and scipy maximising the dual (39)."""
import numpy as np
import pandas as pd
import pytest
import scipy.optimize
import torch
from scipy.special import logsumexp, softmax

from wviz.figures import fenchel_dual as figs
from wviz.views import fenchel_dual as fv

F64 = torch.float64
T = np.array([[0.0, 0.0], [2.0, 0.0], [1.0, 1.5], [-1.0, 1.0]])    # the page's default preset
U = np.array([0.1, 0.4, 0.3, 0.2])
Z = np.array([1.5, -1.0])


@pytest.fixture
def templates():
    return fv.templates_from_table(fv.PRESETS["Figure 3 (four templates)"], normalise=True)


def tilted(lam):
    """p~ of (11): softmax_i(log u_i + <t_i, lam>)."""
    return softmax(np.log(U) + T @ lam)


def dual_gradient(lam, alpha):
    """The gradient of (9): mu + z - lam / alpha - sum_i p~_i t_i; zero at lambda*."""
    return U @ T + Z - lam / alpha - tilted(lam) @ T


def dual_value(lam, alpha):
    """(9) by numpy: <lam, mu + z> - ||lam||^2 / (2 alpha) - log sum_i u_i exp<t_i, lam>."""
    return lam @ (U @ T + Z) - lam @ lam / (2 * alpha) - logsumexp(np.log(U) + T @ lam)


def test_templates_from_table_normalises_and_names_the_bad_cell():
    table = fv.PRESETS["Figure 3 (four templates)"].assign(u=[1.0, 4.0, 3.0, 2.0])
    got = fv.templates_from_table(table, normalise=True)
    np.testing.assert_allclose(got.u.numpy(), U, atol=1e-15)
    np.testing.assert_array_equal(got.t.numpy(), T)
    assert got.names == ["t1", "t2", "t3", "t4"]
    np.testing.assert_allclose(fv.templates_from_table(table.assign(u=U), normalise=False).u.numpy(), U, atol=0)
    # every problem at once, in the user's terms (the template's name, the value typed) with what a valid table holds
    bad = table.assign(template=["t1", "t2", "t1", None], u=[0.5, -0.5, 1.0, -2.0])
    with pytest.raises(ValueError) as err:
        fv.templates_from_table(bad, normalise=True)
    message = str(err.value)
    for part in ("t2 has a negative weight (u = -0.5)", "row 4 has a negative weight (u = -2)",
                 "the name 't1' is used by rows 1, 3", "u >= 0"):
        assert part in message, message
    with pytest.raises(ValueError, match=r"the weights u sum to 10, not 1 \(turn on 'Normalise u"):
        fv.templates_from_table(table, normalise=False)
    with pytest.raises(ValueError, match="every weight u is zero"):
        fv.templates_from_table(table.assign(u=0.0), normalise=True)
    unnamed = fv.templates_from_table(table.assign(template=["a", None, " ", "b"]), normalise=True)
    assert unnamed.names == ["a", "row 2", "row 3", "b"]
    with pytest.raises(ValueError, match="row 3, column y"):
        fv.templates_from_table(table.assign(y=[0.0, 0.0, None, 1.0]), normalise=True)
    with pytest.raises(ValueError, match="at least one template"):
        fv.templates_from_table(table.iloc[:0], normalise=True)


@pytest.mark.parametrize("alpha", [0.05, 1.0, 7.0])
def test_estimates_satisfy_the_optimality_of_the_dual_and_match_numpy(alpha):
    est = fv.estimates(torch.tensor(T), torch.tensor(U), torch.tensor(Z), [alpha])
    lam = est.lam[0].numpy()
    assert np.linalg.norm(dual_gradient(lam, alpha)) < 1e-9                     # grad (9) = 0 at lambda*
    np.testing.assert_allclose(est.h[0].numpy(), tilted(lam) @ T, atol=1e-12)   # (12)
    np.testing.assert_allclose(est.lam1[0].numpy(), alpha * Z, atol=1e-15)      # (16)
    np.testing.assert_allclose(est.h1[0].numpy(), softmax(np.log(U) + alpha * T @ Z) @ T, atol=1e-12)   # (18)
    C = T - U @ T
    lam2 = np.linalg.solve(np.eye(2) + alpha * C.T @ np.diag(U) @ C, alpha * Z)  # (15)
    np.testing.assert_allclose(est.lam2[0].numpy(), lam2, atol=1e-12)
    np.testing.assert_allclose(est.h2[0].numpy(), tilted(lam2) @ T, atol=1e-12)
    np.testing.assert_allclose(est.mu.numpy(), U @ T, atol=1e-15)
    assert abs(float(est.deviation[0]) - np.linalg.norm(lam - alpha * Z) / np.linalg.norm(lam)) < 1e-12


def test_solution_weights_are_11_and_18(templates):
    s = fv.solve(templates, (1.5, -1.0), 2.0)
    w = fv.weights(s)
    assert np.linalg.norm(dual_gradient(s.lam.numpy(), 2.0)) < 1e-9
    np.testing.assert_allclose(w.exact.numpy(), tilted(s.lam.numpy()), atol=1e-12)
    np.testing.assert_allclose(w.attention.numpy(), softmax(np.log(U) + 2.0 * T @ Z), atol=1e-12)   # (18)
    np.testing.assert_allclose(w.second.numpy(), tilted(s.est.lam2[0].numpy()), atol=1e-12)
    np.testing.assert_allclose(w.u.numpy(), U, atol=1e-15)
    np.testing.assert_allclose(s.alpha_z.numpy(), 2.0 * Z)
    assert s.deviation == pytest.approx(float(s.est.deviation[0]))


def test_figure3_and_the_alpha_sweep_equal_one_solve_per_alpha(templates):
    s = fv.solve(templates, Z, 1.0)
    grid = fv.figure3(s)
    np.testing.assert_array_equal(grid.alphas.numpy(), fv.FIGURE3_ALPHAS)
    sweep = fv.sweep(s)
    assert len(sweep.alphas) == len(fv.ALPHAS)
    for k in (0, 30, 60):
        a = float(fv.ALPHAS[k])
        one = fv.estimates(templates.t, templates.u, s.z, [a])
        assert np.linalg.norm(dual_gradient(one.lam[0].numpy(), a)) < 1e-9
        assert abs(float(sweep.deviation[k]) - float(one.deviation[0])) < 1e-10
        assert abs(float(sweep.err1[k]) - float((one.h - one.h1).norm())) < 1e-10
        assert abs(float(sweep.err2[k]) - float((one.h - one.h2).norm())) < 1e-10
    # small alpha: the error of (18) grows like alpha^2, that of (15) like alpha^3 (alpha x sqrt(10) from 0 to 10)
    assert 8 < float(sweep.err1[10] / sweep.err1[0]) < 11
    assert 25 < float(sweep.err2[10] / sweep.err2[0]) < 35


def test_dual_map_is_9_and_peaks_at_lambda_star(templates):
    s = fv.solve(templates, Z, 1.0)
    dual = fv.dual_map(s)
    assert dual.values.shape == (81, 81)
    for i, j in ((0, 0), (40, 13), (80, 55)):
        lam = np.array([float(dual.xs[j]), float(dual.ys[i])])
        assert abs(float(dual.values[i, j]) - dual_value(lam, 1.0)) < 1e-12
    assert float(dual.values.max()) <= dual_value(s.lam.numpy(), 1.0) + 1e-12
    centre = (s.lam + s.alpha_z) / 2
    assert abs(float(dual.xs[40]) - float(centre[0])) < 1e-12 and abs(float(dual.ys[40]) - float(centre[1])) < 1e-12


def test_gaussian_preference_matches_the_closed_form_of_sec5():
    mu, z, alpha = torch.tensor([0.7, -0.2], dtype=F64), torch.tensor([1.5, -1.0], dtype=F64), 2.5
    g = fv.gaussian_check(mu, z, alpha)
    closed = mu.numpy() / (1 + alpha) + alpha * (mu.numpy() + z.numpy()) / (1 + alpha)
    np.testing.assert_allclose(g.closed.numpy(), closed, atol=1e-15)
    np.testing.assert_allclose(g.h.numpy(), closed, atol=1e-12)
    # u = N(mu, I): (9) is <lam, mu + z> - |lam|^2 / (2 alpha) - <mu, lam> - |lam|^2 / 2,
    # so lambda* = alpha z / (1 + alpha)
    np.testing.assert_allclose(g.h.numpy(), mu.numpy() + alpha * z.numpy() / (1 + alpha), atol=1e-12)
    assert g.n_iter == 1 and g.grad_norm < 1e-12


def t5_reference(j, mask, b):
    """(19) and (20) by numpy: offsets j - i clipped to the table's -3..3."""
    bias = np.array([b[min(max(j - i, -3), 3) + 3] for i in range(len(T))])
    u = np.where(mask, 0.0, np.exp(bias))
    logits = np.where(mask, -np.inf, T @ Z + bias)
    return u / u.sum(), softmax(logits)


@pytest.mark.parametrize("j, masked", [(0, ["t1"]), (2, ["t3", "t4"]), (3, [])])
def test_t5_is_20_and_equals_18_with_the_preference_19(templates, j, masked):
    b = fv.T5_BIAS["b"].to_numpy()
    w = fv.t5(templates, Z, j, masked, fv.T5_BIAS)
    u, w20 = t5_reference(j, np.array([n in masked for n in templates.names]), b)
    np.testing.assert_allclose(w.u.numpy(), u, atol=1e-15)
    np.testing.assert_allclose(w.w20.numpy(), w20, atol=1e-15)
    np.testing.assert_allclose(w.w18.numpy(), w20, atol=1e-14)    # T5 attention is (18) with alpha = 1, u of (19)
    np.testing.assert_allclose(w.dot.numpy(), softmax(T @ Z), atol=1e-15)


def test_t5_errors_in_plain_words(templates):
    with pytest.raises(ValueError, match="every word is masked"):
        fv.t5(templates, Z, 0, templates.names, fv.T5_BIAS)
    with pytest.raises(ValueError, match="row 2, column b"):
        fv.t5(templates, Z, 0, [], fv.T5_BIAS.assign(b=[0.0, None, 0, 0, 0, 0, 0]))


def test_universe_and_costs(templates):
    world = fv.universe(templates, fv.EXTRAS)
    A = np.concatenate([T, fv.EXTRAS[["x", "y"]].to_numpy()])
    np.testing.assert_array_equal(world.A.numpy(), A)
    assert world.names == ["t1", "t2", "t3", "t4", "t2'", "t3'", "far"]
    np.testing.assert_array_equal(world.in_T.numpy(), [True] * 4 + [False] * 3)
    sq = ((A[:, None] - A[None]) ** 2).sum(-1)
    np.testing.assert_allclose(fv.cost(world, "squared Euclidean").numpy(), sq, atol=1e-12)
    np.testing.assert_allclose(fv.cost(world, "Euclidean").numpy(), np.sqrt(sq), atol=1e-7)
    start = fv.cost_table(world)
    np.testing.assert_allclose(start.to_numpy(), sq, atol=5e-4 + 1e-12)        # to 3 decimals
    assert list(start.columns) == world.names
    np.testing.assert_array_equal(fv.cost(world, "edited", start).numpy(), start.to_numpy())
    twins = pd.DataFrame([[0.0, 1.0], [1.0, 0.0]], columns=["a", "a"])    # names may repeat
    np.testing.assert_array_equal(fv.cost(world, "edited", twins).numpy(), [[0, 1], [1, 0]])
    with pytest.raises(ValueError, match="row 1, column 1"):
        fv.cost(world, "edited", twins.where(twins > 0.5))
    with pytest.raises(ValueError, match="row 2, column x"):
        fv.universe(templates, fv.EXTRAS.assign(x=[1.0, None, 2.0]))


def ot_dual_maximiser(A, u, z, alpha, gamma, M):
    """lambda* of (39) by scipy on a numpy transcription."""
    mu = (u @ softmax(-M / gamma, axis=1)) @ A                      # the mean of u~ (40), (41)

    def neg(lam):
        L = (A @ lam - M) / gamma                                   # L[t, t'] = (<t', lam> - M(t, t')) / gamma
        value = lam @ (mu + z) - lam @ lam / (2 * alpha) - gamma * u @ logsumexp(L, axis=1)
        grad = mu + z - lam / alpha - (u @ softmax(L, axis=1)) @ A
        return -value, -grad
    return scipy.optimize.minimize(neg, alpha * z, jac=True, method="BFGS", options=dict(gtol=1e-13)).x


def ot_weights(A, u, lam, gamma, M):
    """p of (38) by a loop over the templates t' that send mass."""
    p = np.zeros(len(A))
    for i in range(len(A)):
        e = np.exp((A @ lam - M[:, i]) / gamma)
        p += u[i] * e / e.sum()
    return p


def test_ot_attention_is_25_40_and_38(templates):
    s = fv.solve(templates, Z, 0.8)
    world = fv.universe(templates, fv.EXTRAS)
    A, uA = world.A.numpy(), world.u.numpy()
    M = ((A[:, None] - A[None]) ** 2).sum(-1)
    gamma = 0.7
    ot = fv.ot_attention(s, world, gamma, torch.tensor(M))
    true = sum(uA[i] * np.exp(-M[:, i] / gamma) / np.exp(-M[:, i] / gamma).sum() for i in range(len(A)))   # (40)
    np.testing.assert_allclose(ot.panel.true.numpy(), true, atol=1e-14)
    np.testing.assert_allclose(ot.panel.approx.numpy(), ot_weights(A, uA, 0.8 * Z, gamma, M), atol=1e-14)   # (25)
    lam = ot_dual_maximiser(A, uA, Z, 0.8, gamma, M)
    np.testing.assert_allclose(ot.panel.exact.numpy(), ot_weights(A, uA, lam, gamma, M), atol=1e-7)   # (38)
    np.testing.assert_allclose(ot.panel.u.numpy(), uA)
    assert ot.alpha == 0.8 and ot.gamma == gamma


def test_ot_gamma_sweep_equals_one_panel_per_gamma(templates):
    s = fv.solve(templates, Z, 0.5)
    world = fv.universe(templates, fv.EXTRAS)
    M = fv.cost(world, "squared Euclidean")
    ot = fv.ot_attention(s, world, 1.0, M)
    for k in (0, 15, 30):
        g = float(fv.GAMMAS[k])
        panel = fv.ot_panel(world.A, world.u, s.z, 0.5, g, M)
        assert abs(float(ot.sweep.gap_u[k]) - float((panel.true - panel.u).abs().sum())) < 1e-12
        assert abs(float(ot.sweep.gap_p[k]) - float((panel.exact - panel.approx).abs().sum())) < 1e-9
    assert float(ot.sweep.gap_u[0]) < 1e-3 < float(ot.sweep.gap_u[-1])    # Prop. 1: u~ -> u as gamma -> 0


def test_the_metrics_errors_are_the_distances_between_the_estimates(templates):
    s = fv.solve(templates, Z, 1.0)
    lam = s.lam.numpy()
    S = (T - U @ T).T @ np.diag(U) @ (T - U @ T)
    lam2 = np.linalg.solve(np.eye(2) + S, Z)                        # (15) at alpha = 1
    assert s.error_18 == pytest.approx(np.linalg.norm(tilted(lam) @ T - tilted(Z) @ T), abs=1e-10)
    assert s.error_15 == pytest.approx(np.linalg.norm(tilted(lam) @ T - tilted(lam2) @ T), abs=1e-10)


@pytest.mark.parametrize("item", fv.TRY_THIS, ids=lambda t: t.label)
def test_try_this_values_are_options_of_their_widgets(item):
    """A link's value that a widget does not offer would be dropped by Streamlit: alpha and gamma on their log
    sliders' grids (written as the sliders write them), z on its slider's steps, a preset among the presets."""
    grid = {float(f"{v:.3g}") for v in np.logspace(-2, 1, 3 * 12 + 1)}
    for key, value in item.params.items():
        if key in (fv.Keys.ALPHA, fv.Keys.GAMMA):
            assert value in grid and f"{value:.3g}" == str(value)
        elif key in (fv.Keys.Z1, fv.Keys.Z2):
            assert -4 <= value <= 4 and round(value / 0.05, 9) % 1 == 0
        elif key == fv.Keys.PRESET:
            assert value in fv.PRESETS
        else:
            assert key == fv.Keys.VIEW and isinstance(value, str)


def test_figures_read_at_800_px(templates):
    s = fv.solve(templates, Z, 1.0)
    grid = figs.estimates_grid(s, fv.figure3(s))
    assert [a.text for a in grid.layout.annotations] == ["α = 0.1", "α = 0.5", "α = 1", "α = 2", "α = 5"]
    assert {tr.xaxis for tr in grid.data} == {"x", "x2", "x3", "x4", "x5"}          # five panels, three a row
    assert grid.layout.xaxis4.domain[0] == grid.layout.xaxis.domain[0]
    assert all(tr.textfont.size >= 12 for tr in grid.data if tr.mode == "markers+text")
    names = ["first template", "second", "t3"]
    bars = figs.weight_bars({"u": [0.2, 0.3, 0.5]}, names, "t", 110)
    assert list(bars.layout.xaxis.ticktext) == names and bars.layout.xaxis.tickangle == -45
    sweep = figs.alpha_sweep(fv.sweep(s), 1.0)
    assert list(sweep.layout.xaxis.ticktext) == ["0.01", "0.1", "1", "10"]
    assert sweep.layout.yaxis.type == "log" and sweep.layout.yaxis.dtick == 1
    assert sweep.layout.yaxis.exponentformat == "power"


# ---- what each guided experiment says to watch, on the numbers of the state its link opens ------------------------

def link_state(params: dict) -> fv.Solution:
    """The solution the page computes when a link sets ``params`` (every other widget at its default: the Figure 3
    preset, u normalised, z = DEFAULT_Z, alpha = 1)."""
    templates = fv.templates_from_table(fv.PRESETS[params.get(fv.Keys.PRESET, next(iter(fv.PRESETS)))], True)
    z = (params.get(fv.Keys.Z1, fv.DEFAULT_Z[0]), params.get(fv.Keys.Z2, fv.DEFAULT_Z[1]))
    return fv.solve(templates, z, params.get(fv.Keys.ALPHA, 1.0))


def inside_hull(point, t) -> bool:
    """Whether point lies in the convex hull of the rows of t (a feasible convex combination, by scipy's LP)."""
    n = len(t)
    res = scipy.optimize.linprog(np.zeros(n), A_eq=np.vstack([np.asarray(t).T, np.ones(n)]),
                                 b_eq=np.append(point, 1), bounds=[(0, None)] * n)
    return res.status == 0


def watch_small_alpha(params):
    s = link_state(params)
    e = s.est
    for h in (e.h[0], e.h1[0], e.h2[0]):
        assert float((h - e.mu).norm()) < 0.03                             # next to mu
    assert 2.5e-4 < s.error_18 < 4e-4 and s.error_15 < 1e-6


def watch_large_alpha(params):
    s = link_state(params)
    e, t = s.est, s.templates.t
    target = e.mu + s.z
    assert inside_hull(target.numpy(), t.numpy())
    assert float((e.h[0] - target).norm()) < 0.13                          # the exact h follows mu + z
    to_templates = (t - e.h1[0]).norm(dim=1)
    best = int((t @ s.z).argmax())
    assert s.templates.names[best] == "t2" and int(to_templates.argmin()) == best
    assert float(to_templates[best]) < 0.33 and float((e.h1[0] - target).norm()) > 0.75   # (18) off to t2


def watch_uniform_u(params):
    s = link_state(params)
    assert s.alpha == 1 and torch.equal(s.templates.u, torch.full((4,), 0.25, dtype=F64))
    np.testing.assert_allclose(fv.weights(s).attention.numpy(), softmax(s.templates.t.numpy() @ s.z.numpy()),
                               rtol=1e-12)


def watch_errors_against_alpha(params):
    sweep = fv.sweep(link_state(params))
    a, e18, e15 = (np.log(x.numpy()) for x in (sweep.alphas, sweep.err1, sweep.err2))
    slope = lambda e: (e[3] - e[0]) / (a[3] - a[0])    # noqa: E731  at the small end of the plot
    assert 1.9 < slope(e18) < 2.1 and 2.9 < slope(e15) < 3.1
    below = a < np.log(0.8)
    assert (np.diff(e18[below]) > 0).all() and (np.diff(e15[below]) > 0).all()   # both fall as alpha shrinks
    assert (e15[below] < e18[below]).all() and np.diff(e18)[a[:-1] > np.log(0.8)].max() < 0   # from about 0.8


def watch_ot_small_gamma(params):
    s = link_state(params)
    world = fv.universe(s.templates, fv.EXTRAS)
    ot = fv.ot_attention(s, world, params[fv.Keys.GAMMA], fv.cost(world, "squared Euclidean"))
    p = ot.panel
    assert float((p.true - p.u).abs().sum()) < 1e-4                       # (40) is back to u
    assert float((p.exact - p.approx).abs().sum()) > 0.5                   # (25) and (38) part ways
    assert s.alpha / ot.gamma == pytest.approx(100)


WATCH = {"Shrink alpha to 0.01": watch_small_alpha, "Grow alpha to 10 with z = (0.5, 0.25)": watch_large_alpha,
         "Uniform u: dot-product attention": watch_uniform_u, "Errors against alpha": watch_errors_against_alpha,
         "OT attention at gamma = 0.01": watch_ot_small_gamma}


@pytest.mark.parametrize("item", fv.TRY_THIS, ids=lambda t: t.label)
def test_each_guided_experiment_shows_what_its_sentence_says(item):
    """Every Try link's sentence, checked on the numbers of the state the link opens; a new link needs its check."""
    assert item.label in WATCH, f"Try {item.label!r} has no check of what its sentence says"
    WATCH[item.label](item.params)


def test_the_value_as_set_is_labelled_on_its_line(templates):
    """On a log axis Plotly reads an annotation's x as log10 of the value: the label stands on the dashed line."""
    s = fv.solve(templates, Z, 0.316)
    fig = figs.alpha_sweep(fv.sweep(s), s.alpha)
    (label,) = [a for a in fig.layout.annotations if a.text == "alpha as set"]
    (line,) = fig.layout.shapes
    assert line.x0 == 0.316 and 10 ** label.x == pytest.approx(0.316)


def test_the_value_as_set_is_labelled_above_the_curves(templates):
    """The 'as set' labels of both sweeps stood inside the plot's top, on the curves near 1 (1024 px, presentation
    mode): each stands on top of its line, its bottom at the top of the plot (y domain 1), above every curve, with
    room for it in the top margin."""
    s = fv.solve(templates, Z, 1.0)
    world = fv.universe(templates, fv.EXTRAS)
    ot = fv.ot_attention(s, world, 1.0, fv.cost(world, "squared Euclidean"))
    for fig, param in ((figs.alpha_sweep(fv.sweep(s), s.alpha), "alpha"), (figs.gamma_sweep(ot.sweep, 1.0), "gamma")):
        (label,) = [a for a in fig.layout.annotations if a.text == f"{param} as set"]
        assert (label.yref, label.y, label.yanchor, label.xanchor) == ("y domain", 1, "bottom", "center"), param
        assert fig.layout.margin.t >= 70, param


def hue(colour: str) -> float:
    """The hue in degrees of a '#rrggbb' colour."""
    import colorsys

    r, g, b = (int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5))
    return 360 * colorsys.rgb_to_hsv(r, g, b)[0]


def test_the_sentences_name_the_estimates_colours_as_drawn():
    """The Try sentence and the page's caption call the exact h orange-red and attention (18) pink: the drawn
    markers' hues are there (orange-red 0-30 degrees, pink 300-350), not red and purple."""
    fig = figs.main_figure(fv.at_defaults()(1.0))
    drawn = {t.name: t.marker.color for t in fig.data if t.name in figs.ESTIMATES}
    assert 0 <= hue(drawn[figs.ESTIMATES[0]]) <= 30 and 300 <= hue(drawn[figs.ESTIMATES[1]]) <= 350
    watch = next(t.watch for t in fv.TRY_THIS if t.label.startswith("Grow alpha to 10"))
    assert "orange-red square" in watch and "pink square" in watch and "purple" not in watch


# ---- labels clear of one another and of the markers (issue 48: as a lecturer sees them) ---------------------------

def side(textposition: str) -> np.ndarray:
    """The direction in which Plotly draws a point's text from it: 'top right' -> (1, 1)."""
    rows, cols = textposition.split()
    return np.array([{"left": -1, "center": 0, "right": 1}[cols], {"bottom": -1, "middle": 0, "top": 1}[rows]])


def test_the_universe_labels_close_templates_on_opposite_sides_and_keeps_every_label_inside(templates):
    """t3 and its synonym t3' (0.32 apart) had their labels one over the other, and 'far: 0.00' was clipped at the
    top: of two close points the lower is labelled below, and the axes leave room beyond the outermost point."""
    s = fv.solve(templates, Z, 1.0)
    world = fv.universe(templates, fv.EXTRAS)
    fig = figs.ot_map(fv.ot_attention(s, world, 1.0, fv.cost(world, "squared Euclidean")), s.z)
    labelled = [t for t in fig.data if t.mode == "markers+text"]
    points = np.concatenate([np.c_[t.x, t.y] for t in labelled])
    sides = [p for t in labelled for p in t.textposition]
    names = [text.split(":")[0] for t in labelled for text in t.text]
    gaps = np.linalg.norm(points[:, None] - points[None], axis=-1) + np.diag(np.full(len(points), np.inf))
    for k, j in enumerate(gaps.argmin(1)):
        if gaps[k, j] < 1 and gaps[j].argmin() == k:             # two close points: their labels on either side
            assert side(sides[k])[1] == -side(sides[j])[1] == np.sign(points[k, 1] - points[j, 1]), names[k]
    assert [sides[names.index(n)] for n in ("t3", "t3'", "t2", "t2'", "t1", "t4", "far")] == \
        ["bottom center", "top center", "bottom center", "top center", "top center", "top center", "top center"]
    (x0, x1), (y0, y1) = fig.layout.xaxis.range, fig.layout.yaxis.range
    assert points[:, 0].min() - x0 >= 0.5 and x1 - points[:, 0].max() >= 0.5      # 'far' at (3, 3) not cut
    assert points[:, 1].min() - y0 >= 0.5 and y1 - points[:, 1].max() >= 0.5
    # z / 2 named in the legend, not by a label at an end of its arrow (the tail's lay on t1, at the origin)
    (arrow,) = [t for t in fig.data if t.name == "z / 2, from the origin"]
    assert arrow.text is None and not fig.layout.annotations
    np.testing.assert_allclose([arrow.x[1], arrow.y[1]], s.z.numpy() / 2)
    assert max(len(line) for line in fig.layout.title.text.split("<br>")) <= 30    # fits beside the controls at 800


@pytest.mark.parametrize("alpha", [0.01, 1.0, 10.0])
@pytest.mark.parametrize("z", [fv.DEFAULT_Z, (0.5, 0.25)])
def test_mu_and_mu_plus_z_are_labelled_away_from_the_estimates(templates, alpha, z):
    """At alpha = 10 and z = (0.5, 0.25) (a Try link) the exact h comes within 0.13 of mu + z, whose label was
    drawn below it, under the marker: each end's label points away from every estimate near it."""
    s = fv.solve(templates, z, alpha)
    fig = figs.main_figure(s)
    (arrow,) = [t for t in fig.data if t.text is not None and list(t.text) == ["mu", "mu + z"]]
    estimates = [np.array([t.x[0], t.y[0]]) for t in fig.data if t.name in figs.ESTIMATES]
    for x, y, where in zip(arrow.x, arrow.y, arrow.textposition):
        for h in estimates:
            if np.linalg.norm(h - (x, y)) < 0.3:
                assert side(where) @ (h - (x, y)) <= 0, (where, h)


@pytest.mark.parametrize("alpha", [0.01, 1.0, 5.0, 10.0])
@pytest.mark.parametrize("z", [fv.DEFAULT_Z, (0.5, 0.25)])
def test_the_templates_are_labelled_away_from_the_estimates(templates, alpha, z):
    """At alpha = 10 and z = (0.5, 0.25) (a Try link) the pink (18) marker sat just above t2 and covered its label
    "t2: 0.40": a template's label points away from every estimate within 0.75 of it (below one that is higher), in
    the main figure and in Figure 3's grid."""
    s = fv.solve(templates, z, alpha)
    data = figs.main_figure(s).data + figs.estimates_grid(s, fv.figure3(s)).data
    for k in [k for k, t in enumerate(data) if t.name == "templates t_i (size: u_i)"]:   # one panel's, in turn
        labelled, estimates = data[k], [np.array([t.x[0], t.y[0]]) for t in data[k + 2:k + 5]]  # then z, h, h1, h2
        assert [t.name for t in data[k + 2:k + 5]] == list(figs.ESTIMATES)
        for x, y, where, name in zip(labelled.x, labelled.y, labelled.textposition, labelled.text):
            for h in estimates:
                if 0 < np.linalg.norm(h - (x, y)) < 0.75:
                    assert side(where) @ (h - (x, y)) <= 0, (name, where, h)
