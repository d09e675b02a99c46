"""The "Attention solves a dual problem" page, driven through AppTest; its numbers checked against numpy/scipy
references written here (the dual (9) maximised by scipy, (18), T5's masked biased softmax, (25) and (40) by loops)."""
import json
import re

import numpy as np
import pytest
import scipy.optimize

from tests.app.conftest import check_views, figure_titled, figures, link_params, no_exception, shown_text
from wviz.views import fenchel_dual as fv

PAGE = "fenchel_dual.py"
# the page's default preset and evidence
T = np.array([[0.0, 0.0], [2.0, 0.0], [1.0, 1.5], [-1.0, 1.0]])
U = np.array([0.1, 0.4, 0.3, 0.2])
Z = np.array([1.5, -1.0])
BIAS = np.array([-1.2, -0.6, 0.3, 0.0, 0.8, 0.1, -0.9])   # offsets j - i = -3..3
EXTRAS = np.array([[2.25, 0.3], [0.8, 1.75], [3.0, 3.0]])


def lam_star(t, u, z, alpha):
    """The maximiser of (9), by scipy on a numpy transcription of the dual."""
    def neg(lam):
        s = np.log(u) + t @ lam
        m = s.max()
        w = np.exp(s - m)
        value = lam @ (u @ t + z) - lam @ lam / (2 * alpha) - m - np.log(w.sum())
        return -value, -(u @ t + z - lam / alpha - w @ t / w.sum())
    return scipy.optimize.minimize(neg, alpha * z, jac=True, method="BFGS", options=dict(gtol=1e-12)).x


def tilted(t, u, lam):
    w = u * np.exp(t @ lam - (t @ lam).max())
    return w / w.sum()


def trace(fig, name):
    found = [tr for tr in fig["data"] if tr.get("name") == name]
    assert len(found) == 1, [tr.get("name") for tr in fig["data"]]
    return found[0]


def point(fig, name):
    tr = trace(fig, name)
    return np.array([tr["x"][0], tr["y"][0]], dtype=float)


def bars(fig):
    return {tr["name"]: np.asarray(tr["y"], dtype=float) for tr in fig["data"] if tr["type"] == "bar"}


def test_figure3_view_matches_the_dual_solved_by_scipy(open_page):
    at = open_page(PAGE)
    assert not at.error
    fig = figure_titled(at, "Exact and approximate h at alpha = 1")
    lam = lam_star(T, U, Z, 1.0)
    np.testing.assert_allclose(point(fig, "h exact (12)"), tilted(T, U, lam) @ T, atol=1e-8)
    np.testing.assert_allclose(point(fig, "h of (18), lambda = alpha z"), tilted(T, U, Z) @ T, atol=1e-12)
    S = (T - U @ T).T @ np.diag(U) @ (T - U @ T)
    lam2 = np.linalg.solve(np.eye(2) + S, Z)
    np.testing.assert_allclose(point(fig, "h at (15), second order"), tilted(T, U, lam2) @ T, atol=1e-12)
    # the Figure 3 grid: five panels alpha = 0.1, 0.5, 1, 2, 5, each with its own exact h
    at.segmented_control(key=fv.Keys.VIEW).set_value(fv.Labels.FIGURE3).run()
    grid = figure_titled(at, "Figure 3")
    exact = [tr for tr in grid["data"] if tr.get("legendgroup") == "h exact (12)"]
    assert len(exact) == 5
    for tr, a in zip(exact, (0.1, 0.5, 1.0, 2.0, 5.0)):
        np.testing.assert_allclose([tr["x"][0], tr["y"][0]], tilted(T, U, lam_star(T, U, Z, a)) @ T, atol=1e-8)
    # the dual map marks lambda* and alpha z
    at.segmented_control(key=fv.Keys.VIEW).set_value(fv.Labels.DUAL).run()
    dual = figure_titled(at, "The dual objective (9)")
    np.testing.assert_allclose(point(dual, "lambda* (maximiser)"), lam, atol=1e-8)
    np.testing.assert_allclose(point(dual, "alpha z (16)"), Z, atol=1e-12)


def test_alpha_slider_and_weights(open_page):
    at = open_page(PAGE, view=fv.Labels.WEIGHTS)
    at.sidebar.select_slider(key=fv.Keys.ALPHA).set_value(0.1).run()
    no_exception(at)
    alpha = at.sidebar.select_slider(key=fv.Keys.ALPHA).value
    w = bars(figure_titled(at, "Attention weights"))
    np.testing.assert_allclose(w["p~ of (11) at lambda* (exact)"], tilted(T, U, lam_star(T, U, Z, alpha)), atol=1e-8)
    np.testing.assert_allclose(w["attention (18), lambda = alpha z"], tilted(T, U, alpha * Z), atol=1e-12)
    at.segmented_control(key=fv.Keys.VIEW).set_value(fv.Labels.DUAL).run()
    sweep = figure_titled(at, "How good the approximations are")
    dev = trace(sweep, "relative deviation ||lambda* - alpha z|| / ||lambda*||")
    a, d = np.asarray(dev["x"], dtype=float), np.asarray(dev["y"], dtype=float)
    k = int(np.argmin(abs(np.log(a) - np.log(0.5))))
    lam = lam_star(T, U, Z, a[k])
    assert abs(d[k] - np.linalg.norm(lam - a[k] * Z) / np.linalg.norm(lam)) < 1e-7


def t5_reference(t, z, mask, j):
    R = 3
    b = np.array([BIAS[min(max(j - i, -R), R) + R] for i in range(len(t))])
    logits = t @ z + b + np.where(mask, -np.inf, 0.0)
    w = np.exp(logits - logits.max())
    u = np.where(mask, 0.0, np.exp(b))
    return u / u.sum(), w / w.sum()


def test_t5_panel_and_masking_every_word(open_page):
    at = open_page(PAGE, view=fv.Labels.T5)
    fig = figure_titled(at, "T5 preference")
    u, w = t5_reference(T, Z, np.array([True, False, False, False]), 0)
    got = bars(fig)
    np.testing.assert_allclose(got["u of (19)"], u, atol=1e-14)
    np.testing.assert_allclose(got["weights of (20), T5's masked biased softmax"], w, atol=1e-14)
    np.testing.assert_allclose(got["(18) with alpha = 1 and u of (19)"], w, atol=1e-14)
    at.selectbox(key=fv.Keys.T5_TARGET).set_value(2).run()
    at.multiselect(key=fv.Keys.T5_MASKED).set_value(["t3", "t4"]).run()
    no_exception(at)
    u, w = t5_reference(T, Z, np.array([False, False, True, True]), 2)
    good = bars(figure_titled(at, "T5 preference"))
    np.testing.assert_allclose(good["weights of (20), T5's masked biased softmax"], w, atol=1e-14)
    at.multiselect(key=fv.Keys.T5_MASKED).set_value(["t1", "t2", "t3", "t4"]).run()
    no_exception(at)
    assert any("every word is masked" in shown_text(e) for e in at.error)
    kept = bars(figure_titled(at, "T5 preference"))        # the last good state stays on the page
    for name in good:
        np.testing.assert_array_equal(kept[name], good[name])


def test_ot_panel_matches_25_and_40_by_loops(open_page):
    at = open_page(PAGE, view=fv.Labels.OT)
    gamma = at.select_slider(key=fv.Keys.GAMMA).value
    A = np.concatenate([T, EXTRAS])
    uA = np.concatenate([U, np.zeros(3)])
    M = ((A[:, None] - A[None]) ** 2).sum(-1)
    true = np.zeros(7)
    p25 = np.zeros(7)
    for i in range(7):
        k = np.exp(-M[:, i] / gamma)
        true += uA[i] * k / k.sum()
        e = np.exp((A @ Z - M[:, i]) / gamma)
        p25 += uA[i] * e / e.sum()
    got = bars(figure_titled(at, "OT attention weights"))
    np.testing.assert_allclose(got["true preference u~ (40)"], true, atol=1e-12)
    np.testing.assert_allclose(got["OT attention p* (25), lambda = alpha z"], p25, atol=1e-12)
    exact = got["exact p* (38), lambda* of (39)"]
    assert abs(exact.sum() - 1) < 1e-12 and exact.min() >= 0 and exact[4:].sum() > 0.01
    sweep = figure_titled(at, "True preference and OT attention against gamma")
    gap = np.asarray(trace(sweep, "||u~ (40) - u||_1")["y"], dtype=float)
    assert gap[0] < 1e-3 < gap[-1]                          # u~ -> u as gamma -> 0


def test_bad_input_shows_plain_errors(open_page):
    rows = [["t1", 0.0, 0.0, 0.5], ["t2", 1.0, 0.0, -0.5], ["t3", 0.0, 1.0, 1.0]]
    at = open_page(PAGE, templates_figure=json.dumps(rows))
    assert at.error and "negative weight" in shown_text(at.error[0])
    rows = [["t1", 0.0, 0.0, 0.5], ["t2", 1.0, 0.0, 0.2]]
    at = open_page(PAGE, templates_figure=json.dumps(rows), normalise="false")
    assert at.error and "sum to 0.7" in shown_text(at.error[0])
    # normalised, the same weights are fine
    at = open_page(PAGE, templates_figure=json.dumps(rows))
    assert not at.error
    # an edited cost matrix that is not symmetric
    M = ((np.concatenate([T, EXTRAS])[:, None] - np.concatenate([T, EXTRAS])[None]) ** 2).sum(-1).round(3)
    M[0, 1] += 1.0
    at = open_page(PAGE, cost_kind="edited", cost_7=json.dumps(M.tolist()), view=fv.Labels.OT)
    assert any("must be symmetric" in shown_text(e) for e in at.error)
    assert figure_titled(at, "Exact and approximate h")                # the rest of the page still draws


def test_gaussian_expander_agrees_with_the_closed_form(open_page):
    at = open_page(PAGE)
    text = " ".join(shown_text(m) for m in at.markdown if "closed form gives" in shown_text(m))
    mu = U @ T
    h = mu / 2 + (mu + Z) / 2                             # alpha = 1
    assert f"({h[0]:.6f}, {h[1]:.6f}); the closed form gives ({h[0]:.6f}, {h[1]:.6f})" in text
    assert "started from lambda = 0, takes 1 step " in text      # Newton really ran (the quadratic: one step)


def test_views_one_at_a_time_from_the_url_and_all_in_the_bundle(open_page):
    at = open_page(PAGE, view=fv.Labels.FIGURE3)
    assert len(figures(at)) == 2 and figure_titled(at, "Figure 3")
    check_views(at, fv.Keys.VIEW, {fv.Labels.WEIGHTS: ["estimates", "weights"],
                                   fv.Labels.DUAL: ["estimates", "dual", "sweep"],
                                   fv.Labels.FIGURE3: ["estimates", "grid"], fv.Labels.T5: ["estimates", "t5"],
                                   fv.Labels.OT: ["estimates", "ot_map", "ot_bars", "ot_sweep"]})


@pytest.mark.parametrize("view, key", [(fv.Labels.FIGURE3, "grid"), (fv.Labels.T5, "t5")])
def test_views_the_slider_leaves_standing_do_not_depend_on_alpha(open_page, view, key):
    """Figure 3 (the page's first view) and T5 are drawn below alpha's fragment (View.live False), so an alpha move
    does not redraw them: they must be the same figures whatever alpha."""
    at = open_page(PAGE, view=view)
    assert at.segmented_control(key=fv.Keys.VIEW).value == view

    def drawn(alpha):   # the estimates' and the view's figures as sent
        at.sidebar.select_slider(key=fv.Keys.ALPHA).set_value(alpha).run()
        no_exception(at)
        return [next(c.proto.spec for c in at.get("plotly_chart") if c.proto.id.endswith(f"-{k}"))
                for k in ("estimates", key)]

    small, large = drawn(0.1), drawn(5.0)
    assert small[0] != large[0] and small[1] == large[1]


def metric_values(at) -> dict:
    return {m.label: m.value for m in at.metric}


# The metrics whose values a link's sentence quotes, as the page shows them
QUOTED = {"Shrink alpha to 0.01": ("error of (18)", "error of (15)"),
          "Grow alpha to 10 with z = (0.5, 0.25)": ("error of (18)",)}


@pytest.mark.parametrize("item", fv.TRY_THIS, ids=lambda t: t.label)
def test_try_this_links_open_the_page_in_their_state(open_page, item):
    """Each guided link, opened as the browser would (its query string), sets its widgets, and what its sentence
    asks to watch is on the page."""
    at = open_page(PAGE, **link_params(item))
    assert not at.error
    for key, value in item.params.items():
        assert at.session_state[key] == value, key
    shown = metric_values(at)
    for metric in QUOTED.get(item.label, ()):
        assert f"{metric}" in item.watch and shown[metric] in item.watch, (metric, shown[metric], item.watch)
    alpha = item.params.get(fv.Keys.ALPHA, 1.0)
    z = np.array([item.params.get(fv.Keys.Z1, 1.5), item.params.get(fv.Keys.Z2, -1.0)])
    fig = figure_titled(at, f"Exact and approximate h at alpha = {alpha:g}")
    h12, h18 = point(fig, "h exact (12)"), point(fig, "h of (18), lambda = alpha z")
    mu = U @ T
    if alpha == 0.01:            # everything next to mu, and (18) on (12)
        assert np.linalg.norm(h12 - mu) < 0.05 and np.linalg.norm(h12 - h18) < 5e-4
    if alpha == 10:              # (12) near mu + z inside the hull; (18) run off towards t2
        assert np.linalg.norm(h12 - (mu + z)) < 0.15 and np.linalg.norm(h12 - h18) > 0.5
        assert np.linalg.norm(h18 - T[1]) < np.linalg.norm(h12 - T[1])
    if item.params.get(fv.Keys.VIEW) == fv.Labels.WEIGHTS:   # uniform u, alpha = 1: dot-product attention
        w = bars(figure_titled(at, "Attention weights"))
        e = np.exp(T @ Z)
        np.testing.assert_allclose(w["attention (18), lambda = alpha z"], e / e.sum(), atol=1e-12)
    if item.params.get(fv.Keys.VIEW) == fv.Labels.DUAL:      # the error of (18) falls like alpha^2
        err = trace(figure_titled(at, "How good the approximations are"), "||h(12) - h(18)||")
        a, e = np.log(np.asarray(err["x"], dtype=float)), np.log(np.asarray(err["y"], dtype=float))
        small = a < np.log(0.1)
        assert abs(np.polyfit(a[small], e[small], 1)[0] - 2) < 0.2
    if item.params.get(fv.Keys.VIEW) == fv.Labels.OT:        # u~ back to u, (25) far from (38)
        got = bars(figure_titled(at, "OT attention weights"))
        np.testing.assert_allclose(got["true preference u~ (40)"][:4], U, atol=1e-4)
        assert abs(got["exact p* (38), lambda* of (39)"] - got["OT attention p* (25), lambda = alpha z"]).sum() > 0.5


def test_metrics_are_short_and_right(open_page):
    at = open_page(PAGE)
    got = metric_values(at)
    assert set(got) == {"deviation", "error of (18)", "error of (15)"}
    assert all(len(label) <= 18 and len(value) <= 8 for label, value in got.items())
    assert all(m.proto.help for m in at.metric)              # the full meaning is in the help
    lam = lam_star(T, U, Z, 1.0)
    assert float(got["deviation"]) == pytest.approx(np.linalg.norm(lam - Z) / np.linalg.norm(lam), rel=2e-3)
    assert float(got["error of (18)"]) == pytest.approx(np.linalg.norm(tilted(T, U, lam) @ T - tilted(T, U, Z) @ T),
                                                        rel=2e-3)
    at = open_page(PAGE, alpha="0.01")
    assert all(len(value) <= 8 for value in metric_values(at).values())   # small numbers: 3.38e-04 style


def rendered_width(line: str) -> int:
    """An upper bound on the characters a line of LaTeX shows: one per command, a fraction's numerator and
    denominator counted side by side, spacing commands as the spaces they make."""
    t = re.sub(r"\\(begin|end)\{\w+\}|&", "", line)
    t = re.sub(r"\\qquad", "  ", t)
    t = re.sub(r"\\(quad|[,;:!])", " ", t)
    t = re.sub(r"\\(mathrm|text|mathbf|operatorname)\{([^}]*)\}", r"\2", t)
    t = re.sub(r"\\(frac|left|right|big|Big|tfrac)\b", "", t)
    t = re.sub(r"\\[a-zA-Z]+", "x", t)
    return len(re.sub(r"[{}^_]|\s(?=\s)", "", t).strip())


@pytest.mark.parametrize("view", [fv.Labels.WEIGHTS, fv.Labels.T5, fv.Labels.OT])
def test_display_equations_fit_a_narrow_screen(open_page, view):
    """Every line of every display equation is at most about 60 characters wide (800 px screens)."""
    at = open_page(PAGE, view=view)
    lines = [line for eq in at.latex for line in eq.value.split(r"\\")]
    assert len(lines) >= 6
    wide = [(rendered_width(line), line) for line in lines if rendered_width(line) > 60]
    assert not wide, wide


def test_figures_label_every_template_and_read_at_800_px(open_page):
    at = open_page(PAGE, view=fv.Labels.FIGURE3)
    grid = figure_titled(at, "Figure 3")
    titles = [a["text"] for a in grid["layout"]["annotations"]]
    assert titles == ["α = 0.1", "α = 0.5", "α = 1", "α = 2", "α = 5"]
    assert all(tr["textfont"]["size"] >= 12 for tr in grid["data"] if tr.get("mode") == "markers+text")
    at = open_page(PAGE, view=fv.Labels.WEIGHTS)
    axis = figure_titled(at, "Attention weights")["layout"]["xaxis"]
    assert list(axis["ticktext"]) == ["t1", "t2", "t3", "t4"] and axis["title"]["text"] == "template"
    at = open_page(PAGE, view=fv.Labels.DUAL)
    sweep = figure_titled(at, "How good the approximations are")["layout"]
    assert list(sweep["xaxis"]["ticktext"]) == ["0.01", "0.1", "1", "10"]
    dual = figure_titled(at, "The dual objective (9)")["data"][0]
    assert dual["showscale"] is True and dual["colorbar"]["title"]["text"] == "dual (9)"
