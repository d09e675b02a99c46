"""The "Transport plans" page, driven through AppTest; its plans checked against POT on the same data."""

import json
import re

import numpy as np
import ot as pot
import pytest

from tests.app.conftest import (bundle_figures, check_views, figure_titled, figures, link_params, no_exception,
                               shown_text)
from wviz.views import transport_plans as tv

PAGE = "transport_plans.py"


def plan_and_marginals(at):
    """The plan heatmap (first figure) with the a and b bars beside it."""
    fig = figures(at)[0]
    bars = {t["name"]: np.asarray(t["x"] if t.get("orientation") == "h" else t["y"], dtype=float)
            for t in fig["data"] if t["type"] == "bar"}
    heat = [t for t in fig["data"] if t["type"] == "heatmap"][0]
    return np.asarray(heat["z"], dtype=float), bars["a (source)"], bars["b (target)"]


def default_problem():
    """The page's default: the "line" preset, 40 sources and 30 targets, seed 0 (it used to be the
    "gaussians" preset, whose random order made the plan look like noise)."""
    x, y = tv.preset_clouds("line", 40, 30, 0)
    C = pot.dist(x.numpy(), y.numpy())  # squared Euclidean
    return np.full(40, 1 / 40), np.full(30, 1 / 30), C


def test_default_sinkhorn_plan_has_the_marginals_and_matches_pot(open_page):
    at = open_page(PAGE)
    P, a, b = plan_and_marginals(at)
    np.testing.assert_allclose(P.sum(axis=1), a, atol=1e-6)
    np.testing.assert_allclose(P.sum(axis=0), b, atol=1e-6)
    a0, b0, C = default_problem()
    gamma = at.sidebar.select_slider(key=tv.Keys.GAMMA_REL).value * C.max()
    ref = pot.bregman.sinkhorn_log(a0, b0, C, gamma, stopThr=1e-12, numItermax=100000)
    np.testing.assert_allclose(P, ref, atol=1e-6)
    assert not at.warning  # converged


def test_exact_solver_gives_the_lp_cost_and_a_sparse_plan(open_page):
    at = open_page(PAGE)
    at.sidebar.radio(key=tv.Keys.SOLVER).set_value("exact").run()
    no_exception(at)
    P, _, _ = plan_and_marginals(at)
    a0, b0, C = default_problem()
    assert abs((P * C).sum() - pot.emd2(a0, b0, C)) < 1e-9
    assert (P > 1e-12).sum() <= 40 + 30 - 1  # a vertex of the transport polytope


def test_gamma_slider_and_the_scrubber(open_page):
    at = open_page(PAGE, view=tv.Labels.CONVERGE)
    dense = (plan_and_marginals(at)[0] > 1e-8).mean()
    at.sidebar.select_slider(key=tv.Keys.GAMMA_REL).set_value(0.001).run()
    no_exception(at)
    assert (plan_and_marginals(at)[0] > 1e-8).mean() < dense  # smaller gamma, sparser plan
    scrub = at.select_slider(key=tv.Keys.SCRUB)
    first = scrub.options[0]
    scrub.set_value(first).run()
    no_exception(at)
    titles = [f["layout"]["title"]["text"] for f in figures(at)]
    assert any(t.startswith(f"plan after iteration {first}") for t in titles)


def test_smallest_gamma_scrubber_is_capped_and_its_caption_says_so(open_page):
    """gamma = 1e-4 max C on the default problem: the main solve stops unconverged at 10000 iterations, plain
    Sinkhorn would need more than 10^5. The scrubber shows its first SCRUB_MAX_ITER iterations and says so."""
    at = open_page(PAGE, view=tv.Labels.CONVERGE)
    at.sidebar.select_slider(key=tv.Keys.GAMMA_REL).set_value(0.0001).run()
    no_exception(at)
    assert at.warning and "stopped before the marginals met the tolerance" in shown_text(at.warning[0])
    scrub = at.select_slider(key=tv.Keys.SCRUB)
    assert scrub.options[-1] == str(tv.SCRUB_MAX_ITER) and scrub.value == tv.SCRUB_MAX_ITER
    every, _ = tv.scrub_schedule(10000)
    caption = " ".join(shown_text(c) for c in at.caption)
    assert "**plain Sinkhorn**" in caption and f"marginal error is read every {every} iterations" in caption
    assert "did not converge either: it stopped at its limit of 10000 iterations" in caption
    assert f"**Truncated:** plain Sinkhorn has not reached the tolerance 1e-6 after {tv.SCRUB_MAX_ITER}" in caption
    figure_titled(at, f"Plain Sinkhorn: marginal error every {every} iterations")


def test_default_scrubber_caption_says_what_it_shows(open_page):
    at = open_page(PAGE, view=tv.Labels.CONVERGE)
    caption = " ".join(shown_text(c) for c in at.caption)
    assert "**plain Sinkhorn**" in caption and "Truncated" not in caption
    assert "reached the tolerance in" in caption
    errors = figure_titled(at, "Plain Sinkhorn: marginal error every")
    assert np.asarray(errors["data"][0]["y"], dtype=float)[-1] <= 1e-6   # plain Sinkhorn got there


@pytest.mark.parametrize("data, message", [
    (b"cloud,x,y\nsource,1,abc\ntarget,0,0\n", "non-numeric"),
    (b"cloud,x\nsource,1\n", "missing"),
    (b"\x00\x01\x02garbage", "needs columns cloud, x, y (and optionally mass); missing: cloud, x, y"),
])
def test_malformed_upload_shows_an_error_and_keeps_the_last_plan(open_page, data, message):
    at = open_page(PAGE)
    before = plan_and_marginals(at)[0]
    at.sidebar.file_uploader(key=tv.Keys.POINTS_CSV).upload("bad.csv", data, "text/csv").run()
    no_exception(at)
    assert at.error and message in shown_text(at.error[0])
    np.testing.assert_array_equal(plan_and_marginals(at)[0], before)


def test_uploaded_points_are_used(open_page):
    at = open_page(PAGE)
    csv = b"cloud,x,y,mass\nsource,0,0,1\nsource,1,0,1\ntarget,0,1,1\ntarget,1,1,1\ntarget,2,1,2\n"
    at.sidebar.file_uploader(key=tv.Keys.POINTS_CSV).upload("pts.csv", csv, "text/csv").run()
    no_exception(at)
    P, a, b = plan_and_marginals(at)
    assert P.shape == (2, 3)
    np.testing.assert_allclose(b, [0.25, 0.25, 0.5])


def test_edited_points_in_a_link_hold_while_their_editor_is_closed(open_page):
    """The points editor is drawn only while its expander is open (a first visit sends no table to draw); the
    edits a link holds make the problem either way: the source bar is the edited masses, normalised."""
    edited = tv.points_table("line", 40, 30, 0)
    edited.loc[0, "mass"] = 3.0                                      # source 1 three times as heavy
    rows = json.dumps(edited.astype(object).values.tolist(), separators=(",", ":"))
    want = np.r_[3.0, np.ones(39)] / 42
    for opened in (False, True):
        at = open_page(PAGE, points_line_40_30_0=rows, **({"edit_points": "true"} if opened else {}))
        drawn = [el.type for el in at.expander[1].children.values()]
        assert ("dataframe" in drawn) == opened, drawn
        P, a, _ = plan_and_marginals(at)
        np.testing.assert_allclose(a, want, rtol=1e-6)
        np.testing.assert_allclose(P.sum(axis=1), want, atol=1e-6)
        assert at.query_params[tv.Keys.POINTS.format("line", 40, 30, 0)] == rows   # the edits stay in the link


def test_cost_matrix_mode_and_its_bad_inputs(open_page):
    at = open_page(PAGE)
    at.sidebar.radio(key=tv.Keys.PROBLEM).set_value("cost matrix").run()
    at.sidebar.radio(key=tv.Keys.SOLVER).set_value("exact").run()
    no_exception(at)
    P, _, _ = plan_and_marginals(at)
    C = np.array([[0, 2, 4], [2, 0, 2], [4, 2, 0], [1, 1, 3]], dtype=float)
    assert abs((P * C).sum() - pot.emd2(np.full(4, 0.25), np.full(3, 1 / 3), C)) < 1e-9
    at.sidebar.text_area(key=tv.Keys.COST_TEXT).set_value("0 1\n2").run()
    no_exception(at)
    assert "same number" in shown_text(at.error[0])
    at.sidebar.text_area(key=tv.Keys.COST_TEXT).set_value("0 1\n1 0").run()
    at.sidebar.radio(key=tv.Keys.MARGINALS).set_value("edited").run()
    at.sidebar.text_input(key=tv.Keys.A.format(2)).set_value("1, 1").run()
    at.sidebar.text_input(key=tv.Keys.B.format(2)).set_value("1, 2").run()
    no_exception(at)
    assert at.error  # unequal totals


def test_views_one_at_a_time_from_the_url_and_all_in_the_bundle(open_page):
    at = open_page(PAGE, view=tv.Labels.COST_AGAINST_GAMMA)
    assert len(figures(at)) == 2 and figure_titled(at, "Entropic cost converges")
    check_views(at, tv.Keys.VIEW, {tv.Labels.SIDE_BY_SIDE: ["plan", "side_left", "side_right"],
                                   tv.Labels.MASS_MOVED: ["plan", "lines"],
                                   tv.Labels.CONVERGE: ["plan", "scrub_plan", "errors"],
                                   tv.Labels.COST_AGAINST_GAMMA: ["plan", "sweep"],
                                   tv.Labels.COST_AGAINST_RHO: ["plan", "rho_sweep"]})
    at.sidebar.radio(key=tv.Keys.SOLVER).set_value("exact").run()  # no Sinkhorn iterations to watch
    assert at.segmented_control(key=tv.Keys.VIEW).options == [tv.Labels.SIDE_BY_SIDE, tv.Labels.MASS_MOVED,
                                                              tv.Labels.COST_AGAINST_GAMMA]


def test_cost_against_gamma_is_in_the_sliders_unit(open_page):
    """The sweep's x axis is gamma / max C, as the slider: the slider's value is where its line and label stand."""
    at = open_page(PAGE, view=tv.Labels.COST_AGAINST_GAMMA, **{tv.Keys.GAMMA_REL: "0.0316"})
    fig = figure_titled(at, "Entropic cost converges")
    np.testing.assert_allclose(np.asarray(fig["data"][0]["x"], dtype=float), tv.SWEEP.numpy())
    (line,) = [s for s in fig["layout"]["shapes"] if s["x0"] == s["x1"]]
    (label,) = [a for a in fig["layout"]["annotations"] if a["text"].startswith("the slider")]
    assert line["x0"] == 0.0316 and 10 ** label["x"] == pytest.approx(0.0316)
    assert fig["layout"]["xaxis"]["title"]["text"] == "gamma / max C"


def test_the_bundle_holds_each_views_own_figures(open_page):
    """The views not drawn go into the lecture bundle, each figure built by its own view."""
    at = open_page(PAGE, view=tv.Labels.COST_AGAINST_GAMMA)
    titles = {k: f["layout"]["title"]["text"] for k, f in bundle_figures(at).items()}
    assert titles["lines"].startswith("Mass moved from x_i to y_j")
    assert titles["scrub_plan"].startswith("plan after iteration") and titles["errors"].startswith("Plain Sinkhorn")
    assert titles["sweep"].startswith("Entropic cost converges")


def test_default_plan_is_a_band_along_the_diagonal(open_page):
    """The default "line" preset lists both clouds left to right: the exact plan is the monotone map (a staircase)
    and the default entropic plan keeps almost all of its mass near that staircase."""
    at = open_page(PAGE)
    P, _, _ = plan_and_marginals(at)
    a0, b0, C = default_problem()
    exact = pot.emd(a0, b0, C)
    i, j = np.nonzero(exact > 1e-12)
    assert (np.diff(j[np.argsort(i, kind="stable")]) >= 0).all()      # the support is monotone
    rank_i = (np.cumsum(a0) - a0 / 2)[:, None]                         # each point's quantile
    rank_j = (np.cumsum(b0) - b0 / 2)[None, :]
    band = np.abs(rank_i - rank_j) <= 0.25
    assert P[band].sum() > 0.95 and np.outer(a0, b0)[band].sum() < 0.5   # a b^T (noise) would not be


def test_metrics_are_short_and_say_the_rest_in_their_help(open_page):
    at = open_page(PAGE)
    assert len(at.metric) == 5
    for m in at.metric:
        assert len(m.label) <= 18 and len(m.value) <= 8 and m.help, (m.label, m.value)
    P, _, _ = plan_and_marginals(at)
    _, _, C = default_problem()
    assert float(at.metric[0].value) == pytest.approx((P * C).sum(), rel=1e-3)


def test_side_by_side_plans_at_two_gammas(open_page):
    """gamma 1e-3 and 1e-1 (relative to max C) by default, each POT's entropic plan; the larger gamma's plan is
    closer to the independent coupling a b^T."""
    at = open_page(PAGE, view=tv.Labels.SIDE_BY_SIDE)
    a0, b0, C = default_problem()
    left, right = figure_titled(at, "gamma = 0.001 max C"), figure_titled(at, "gamma = 0.1 max C")
    far = []
    for fig, g in ((left, 0.001), (right, 0.1)):
        P = np.asarray(next(t for t in fig["data"] if t["type"] == "heatmap")["z"], dtype=float)
        ref = pot.bregman.sinkhorn_log(a0, b0, C, g * C.max(), stopThr=1e-12, numItermax=100000)
        np.testing.assert_allclose(P, ref, atol=1e-6)
        far.append(np.abs(P - np.outer(a0, b0)).sum())
    assert far[1] < far[0]
    # one colour scale for both: from 0 to the larger plan's largest entry (the sharper plan's, at the small gamma)
    scales = [(h["zmin"], h["zmax"]) for h in (next(t for t in f["data"] if t["type"] == "heatmap")
                                               for f in (left, right))]
    top = max(float(np.max(next(t for t in f["data"] if t["type"] == "heatmap")["z"])) for f in (left, right))
    assert scales[0] == scales[1] and scales[0][1] == pytest.approx(top) and scales[0][0] <= 1e-12
    at.select_slider(key=tv.Keys.SIDE_GAMMA_REL + "_right").set_value(10.0).run()
    no_exception(at)
    heat = next(t for t in figure_titled(at, "gamma = 10 max C")["data"] if t["type"] == "heatmap")
    P = np.asarray(heat["z"], dtype=float)
    assert np.abs(P - np.outer(a0, b0)).sum() < 0.01   # gamma -> infinity: the independent coupling


def test_an_old_link_opens_the_same_state(open_page):
    """gamma and rho were this page's parameters for gamma / max C and rho / max C (absolute on every other page):
    a link shared then still sets the sliders, and the URL then holds their new names; given both, the new wins."""
    at = open_page(PAGE, view=tv.Labels.SIDE_BY_SIDE, gamma="0.001", rho="0.01", side_gamma_right="10")
    assert at.sidebar.select_slider(key=tv.Keys.GAMMA_REL).value == 0.001
    assert at.sidebar.select_slider(key=tv.Keys.RHO_REL).value == 0.01
    assert at.select_slider(key=tv.Keys.SIDE_GAMMA_REL + "_right").value == 10.0
    assert {"gamma", "rho", "side_gamma_right"}.isdisjoint(at.query_params)
    assert at.query_params[tv.Keys.GAMMA_REL] == "0.001" and at.query_params[tv.Keys.RHO_REL] == "0.01"
    at = open_page(PAGE, gamma="0.001", **{tv.Keys.GAMMA_REL: "0.1"})
    assert at.sidebar.select_slider(key=tv.Keys.GAMMA_REL).value == 0.1 and "gamma" not in at.query_params


@pytest.mark.parametrize("item", tv.TRY_THIS, ids=[t.label for t in tv.TRY_THIS])
def test_try_this_links_set_their_widgets(open_page, item):
    """Each guided link, opened as the browser would (its query string), sets every widget it names."""
    at = open_page(PAGE, **link_params(item))
    no_exception(at)
    assert not at.error
    for key, value in item.params.items():
        assert at.session_state[key] == value, key
    for shown in SHOWN[item.label](at):
        assert shown in item.watch, (shown, item.watch)   # the sentence quotes the page's own numbers


def metric(at, start: str) -> str:
    (value,) = [m.value for m in at.metric if m.label.startswith(start)]
    return value


def shown_uneven(at):
    """The exact plan's brightest cell and cost; the side-by-side plans at small gamma stay dense here (the exact
    plan is not unique), and the caption says that they can."""
    P, _, _ = plan_and_marginals(at)
    i, j = np.unravel_index(P.argmax(), P.shape)
    side = np.asarray(next(t for t in figure_titled(at, "gamma = 0.001 max C")["data"] if t["type"] == "heatmap")["z"],
                      dtype=float)
    assert (side > 1e-8 * side.max()).sum() > sum(P.shape) - 1          # more than a basic plan's entries
    assert any("which can be dense" in shown_text(c) for c in at.caption)
    return [f"row {i + 1}, column {j + 1}", f"cost metric reads {metric(at, 'cost')}"]


def shown_converge(at):
    caption = next(shown_text(c) for c in at.caption if "reached the tolerance in" in c.value)
    solver = re.search(r"reached the tolerance in (\d+) iterations", caption)[1]
    last = at.select_slider(key=tv.Keys.SCRUB).options[-1]
    return [f"iteration {last} (the Iteration slider's last step)", f"needs {solver} (the caption)"]


# What each link's sentence quotes off the page: metrics, the sweep's dashed line, the plan, the scrubber
SHOWN = {
    "Send gamma to 0.001": lambda at: [
        f"metric reads {metric(at, 'cost')}",
        next(a["text"] for a in figure_titled(at, "Entropic cost")["layout"]["annotations"]
             if a["text"].startswith("exact OT = "))],
    "Hold the targets loosely": lambda at: [f"metric, {metric(at, 'cost')})"],
    "Solve exactly": lambda at: [f"metric reads {metric(at, 'P_ij')}",
                                 f"{len(plan_and_marginals(at)[1]) + len(plan_and_marginals(at)[2]) - 1} of its "
                                 f"{plan_and_marginals(at)[0].size} entries"],
    "Uneven masses": shown_uneven,
    "Watch Sinkhorn converge": shown_converge,
}


def test_rho_holds_the_targets_and_the_plan_matches_pot_unbalanced(open_page):
    """rho = 0.01 max C: the rows still sum to a, the plan's column sums (the marks over b) leave b, and the plan is
    POT's semi-relaxed one (sinkhorn_unbalanced with reg_m = (inf, rho)); the equation splits the objective into
    its three terms; the scrubber runs the semi-relaxed iteration and ends at the same plan."""
    at = open_page(PAGE, **{tv.Keys.RHO_REL: "0.01"}, view=tv.Labels.CONVERGE)
    no_exception(at)
    assert at.sidebar.select_slider(key=tv.Keys.RHO_REL).value == 0.01
    fig = figures(at)[0]
    assert fig["layout"]["title"]["text"] == "sinkhorn plan P, rho = 0.01 max C"
    marks = {t["name"]: np.asarray(t["x"] if t["name"].startswith("P 1") else t["y"], dtype=float)
             for t in fig["data"] if t["type"] == "scatter"}
    P, a, b = plan_and_marginals(at)
    np.testing.assert_allclose(P.sum(axis=1), a, atol=1e-6)
    np.testing.assert_allclose(marks["P^T 1 (column sums)"], P.sum(axis=0), atol=1e-12)
    assert np.abs(P.sum(axis=0) - b).sum() > 0.1   # the targets are held loosely
    a0, b0, C = default_problem()
    gamma, rho = 0.01 * C.max(), 0.01 * C.max()
    ref = pot.unbalanced.sinkhorn_unbalanced(a0, b0, C, gamma, (np.inf, rho), numItermax=100000, stopThr=1e-14)
    np.testing.assert_allclose(P, ref, atol=1e-6)
    assert any(r"\mathrm{KL}(P^\top 1 \Vert b)" in eq.value for eq in at.latex)
    last = figure_titled(at, "plan after iteration")
    np.testing.assert_allclose(np.asarray(next(t for t in last["data"] if t["type"] == "heatmap")["z"], dtype=float), P,
                               atol=1e-5)
    at = open_page(PAGE, **{tv.Keys.RHO_REL: "0.01"}, view=tv.Labels.COST_AGAINST_RHO)
    sweep = figure_titled(at, "Cost and columns against rho, gamma = 0.01 max C")
    kl = np.asarray(sweep["data"][1]["y"], dtype=float)
    assert (np.diff(kl) <= 1e-12).all() and kl[0] > 1e3 * kl[-1]   # the columns move to b as rho grows
    at.sidebar.radio(key=tv.Keys.SOLVER).set_value("exact").run()
    assert at.sidebar.select_slider(key=tv.Keys.RHO_REL).disabled   # rho is Sinkhorn's
