"""The "Attention as transport" page, driven through AppTest; its numbers checked against numpy and the entmax
package."""
import json
import re

import numpy as np
import pytest
import torch
from entmax import entmax15, entmax_bisect

from tests.app.conftest import check_views, figure_titled, figures, link_params, no_exception, shown_table, shown_text
from tests.app.test_fenchel_dual_page import rendered_width
from wviz.views import attention_transport as av

PAGE = "attention_transport.py"
# The page's default: q = (1, 0.3), keys (1, 0.2), (0.2, 1), (-0.8, -0.4), so s_j = <q, k_j>:
S_DEFAULT = np.array([1.0 * 1 + 0.3 * 0.2, 1.0 * 0.2 + 0.3 * 1, -0.8 - 0.3 * 0.4])


def bars(at) -> dict:
    """The main figure's weights (not those of the side-by-side view, whose titles name their side, nor the rho
    view's column sums)."""
    fig = [f for f in figures(at) if f["layout"].get("barmode") == "group"
           and not f["layout"].get("title", {}).get("text", "").startswith(("Left", "Right", "Semi-relaxed OT"))]
    assert len(fig) == 1
    return {trace["name"]: np.array(trace["y"]) for trace in fig[0]["data"]}


def numpy_softmax(s, tau):
    e = np.exp((s - s.max()) / tau)
    return e / e.sum()


def test_default_page_shows_the_closed_forms(open_page):
    at = open_page(PAGE)
    w = bars(at)
    assert set(w) == {"softmax", "sparsemax", "entmax"}
    np.testing.assert_allclose(w["softmax"], numpy_softmax(S_DEFAULT, 1.0), atol=1e-12)
    # sparsemax is the Euclidean projection of s / tau onto the simplex: here threshold (1.06 + 0.5 - 1) / 2
    np.testing.assert_allclose(w["sparsemax"], [0.78, 0.22, 0.0], atol=1e-12)
    assert w["entmax"][2] == 0.0
    # 1.5-entmax of s / tau by the entmax package (sort-based, Peters et al. 2019): same Tsallis objective
    np.testing.assert_allclose(w["entmax"], entmax15(torch.tensor(S_DEFAULT)).numpy(), atol=1e-12)
    # the view drawn first is side by side (tau 0.1 and 10)
    assert figure_titled(at, "Left: tau = 0.1") and figure_titled(at, "Right: tau = 10")


def test_the_landscape_marks_the_closed_form_where_the_solver_lands(open_page):
    """The m = 3 landscape: the generic solver lands on the closed form, drawn on the triangle."""
    at = open_page(PAGE, view=av.Labels.LANDSCAPE)
    land = figure_titled(at, "softmax: -<s, p>")
    marks = {t["name"]: (t["x"][0], t["y"][0]) for t in land["data"] if t["name"] in ("closed form p*",
                                                                                      "numerical argmin")}
    p = numpy_softmax(S_DEFAULT, 1.0)   # drawn at x = p_1 / 2 + p_3, y = sqrt(3) / 2 p_1 on the triangle
    for x, y in marks.values():
        np.testing.assert_allclose([x, y], [p[0] / 2 + p[2], np.sqrt(3) / 2 * p[0]], atol=1e-5)


def test_tau_slider_moves_the_weights(open_page):
    at = open_page(PAGE)
    at.sidebar.select_slider(key=av.Keys.TAU).set_value(0.01).run()
    no_exception(at)
    w = bars(at)
    np.testing.assert_allclose(w["softmax"], numpy_softmax(S_DEFAULT, 0.01), atol=1e-12)
    np.testing.assert_array_equal(w["sparsemax"], [1.0, 0.0, 0.0])
    at.sidebar.select_slider(key=av.Keys.TAU).set_value(100.0).run()
    assert np.ptp(bars(at)["softmax"]) < 0.02  # close to uniform


def test_switching_mechanisms_and_alpha(open_page):
    at = open_page(PAGE)
    at.sidebar.multiselect(key=av.Keys.MECHANISMS).set_value(["entmax"]).run()
    at.sidebar.slider(key=av.Keys.ALPHA).set_value(1.0).run()
    no_exception(at)
    np.testing.assert_allclose(bars(at)["entmax"], numpy_softmax(S_DEFAULT, 1.0), atol=1e-12)
    at.sidebar.slider(key=av.Keys.ALPHA).set_value(2.0).run()
    np.testing.assert_allclose(bars(at)["entmax"], [0.78, 0.22, 0.0], atol=1e-12)


@pytest.mark.parametrize("alpha, tau", [(1.3, 1.0), (1.5, 0.316), (1.75, 0.316), (1.25, 0.1)])
def test_entmax_weights_match_the_entmax_package(open_page, alpha, tau):
    at = open_page(PAGE, mechanisms="entmax")
    at.sidebar.slider(key=av.Keys.ALPHA).set_value(alpha)
    at.sidebar.select_slider(key=av.Keys.TAU).set_value(tau).run()
    no_exception(at)
    assert at.sidebar.select_slider(key=av.Keys.TAU).value == tau
    assert at.sidebar.slider(key=av.Keys.ALPHA).value == alpha
    ref = entmax_bisect(torch.tensor(S_DEFAULT) / tau, alpha=alpha, n_iter=100).numpy()
    np.testing.assert_allclose(bars(at)["entmax"], ref, atol=1e-10)


def test_bad_scores_show_an_error_and_keep_the_last_good_state(open_page):
    at = open_page(PAGE)
    at.sidebar.radio(key=av.Keys.SOURCE).set_value("typed scores").run()
    at.sidebar.text_input(key=av.Keys.SCORES).set_value("3, 1, 2").run()
    good = bars(at)
    for bad in ("1, nan, 2", "1, abc", "", "inf, 1"):
        at.sidebar.text_input(key=av.Keys.SCORES).set_value(bad).run()
        no_exception(at)
        assert at.error, f"no error shown for {bad!r}"
        kept = bars(at)  # the last good figure is still on the page
        for name in good:
            np.testing.assert_array_equal(kept[name], good[name])


def test_masked_key_and_random_source(open_page):
    at = open_page(PAGE, view=av.Labels.LANDSCAPE)
    at.sidebar.radio(key=av.Keys.SOURCE).set_value("typed scores").run()
    at.sidebar.text_input(key=av.Keys.SCORES).set_value("1, -inf, 0.5").run()
    no_exception(at)
    assert not at.error
    for p in bars(at).values():
        assert p[1] == 0.0
    at.sidebar.radio(key=av.Keys.SOURCE).set_value("random").run()
    at.sidebar.slider(key=av.Keys.M).set_value(7).run()
    no_exception(at)
    assert all(len(p) == 7 and abs(p.sum() - 1) < 1e-9 for p in bars(at).values())
    assert any("exactly 3 keys" in shown_text(i) for i in at.info)


def test_prior_softmax_with_a_uniform_prior_is_softmax(open_page):
    at = open_page(PAGE)
    at.sidebar.multiselect(key=av.Keys.MECHANISMS).set_value(["softmax", "prior-softmax"]).run()
    no_exception(at)
    w = bars(at)
    np.testing.assert_allclose(w["prior-softmax"], w["softmax"], atol=1e-12)


def test_many_queries_heatmap_rows_are_distributions(open_page):
    at = open_page(PAGE, view=av.Labels.MANY_QUERIES)
    at.select_slider(key=av.Keys.MANY_N).set_value(64)
    at.select_slider(key=av.Keys.MANY_M).set_value(16).run()
    no_exception(at)
    heat = figure_titled(at, "softmax, tau")
    z = np.array(heat["data"][0]["z"])
    assert z.shape == (64, 16)
    np.testing.assert_allclose(z.sum(axis=1), 1.0, atol=1e-5)


def prior_page(open_page, rows):
    """The page with prior-softmax chosen and the prior table (key prior_table_3) as a shared link carries it."""
    return open_page(PAGE, mechanisms=["softmax", "prior-softmax"],
                     prior_table_3=json.dumps([[f"k{j + 1}", v] for j, v in enumerate(rows)]))


def test_an_edited_prior_reweights_softmax(open_page):
    at = prior_page(open_page, [0.5, 0.0, 0.5])
    assert not at.error
    pi = np.array([0.5, 0.0, 0.5])
    want = pi * np.exp(S_DEFAULT - S_DEFAULT.max())
    np.testing.assert_allclose(bars(at)["prior-softmax"], want / want.sum(), atol=1e-12)  # a zero masks k2


@pytest.mark.parametrize("rows, message", [
    ([-0.2, 0.6, 0.6], "k1 has a negative weight (-0.2). A prior gives each key a number >= 0"),
    ([0.5, 0.3, 0.5], "the weights sum to 1.3, not 1"),
    ([-0.2, None, -0.1], "k2 is empty or not a number; k1 has a negative weight (-0.2); k3 has a negative weight"),
])
def test_a_bad_prior_shows_an_error_not_an_exception(open_page, rows, message):
    at = prior_page(open_page, rows)
    no_exception(at)
    assert at.error and message in shown_text(at.error[0])
    assert not figures(at)   # nothing computed yet: the page stops after the error instead of drawing NaN


def test_a_bad_prior_entered_later_keeps_the_last_good_weights(open_page):
    at = open_page(PAGE)
    good = bars(at)
    # read when it opens
    at.query_params[av.Keys.PRIOR_TABLE.format(3)] = json.dumps([["k1", 0.7], ["k2", -0.1], ["k3", 0.4]])
    at.sidebar.multiselect(key=av.Keys.MECHANISMS).set_value(["softmax", "sparsemax", "entmax", "prior-softmax"]).run()
    no_exception(at)
    assert at.error and "k2 has a negative weight (-0.1)" in shown_text(at.error[0])
    kept = bars(at)
    assert set(kept) == set(good)
    for name in good:
        np.testing.assert_array_equal(kept[name], good[name])


def test_views_one_at_a_time_from_the_url_and_all_in_the_bundle(open_page):
    at = open_page(PAGE, view=av.Labels.TAU_SWEEP)
    assert len(figures(at)) == 2 and figure_titled(at, "softmax: weights against tau")
    check_views(at, av.Keys.VIEW, {av.Labels.LANDSCAPE: ["bars", "land"], av.Labels.TAU_SWEEP: ["bars", "sweep"],
                                   av.Labels.RHO_SWEEP: ["bars", "columns", "rho_sweep"],
                                   av.Labels.SIDE_BY_SIDE: ["bars", "side_left", "side_right"],
                                   av.Labels.MANY_QUERIES: ["bars", "many"]})


@pytest.mark.parametrize("item", av.TRY_THIS, ids=lambda t: t.label)
def test_try_this_links_open_the_page_in_their_state(open_page, item):
    """Each guided link, opened as the browser would (its query string), sets its widgets (a table's parameter
    fills that table), and what its sentence asks to watch is on the page."""
    at = open_page(PAGE, **link_params(item))
    assert not at.error
    for key, value in item.params.items():
        if key == av.Keys.PRIOR_TABLE.format(3):   # a table editor: the URL's rows are the table the page reads
            assert at.query_params[key] == [value] or at.query_params[key] == value
        else:
            assert at.session_state[key] == value, key
    w, table = bars(at), at.dataframe[0].value
    support = dict(zip(table["mechanism"], table["support size"]))
    tau, alpha = item.params.get(av.Keys.TAU, 1.0), item.params.get(av.Keys.ALPHA, 1.5)
    if tau == 0.001:
        assert support["sparsemax"] == support["entmax"] == 1 and w["softmax"][0] > 1 - 1e-12
    if tau == 100.0 and "sparsemax" in w:
        assert support["sparsemax"] == 3 and all(abs(p - 1 / 3).max() < 0.02 for p in w.values())
    if alpha == 1.0:
        np.testing.assert_allclose(w["entmax"], w["softmax"], atol=1e-12)
    if alpha == 2.0:
        np.testing.assert_allclose(w["entmax"], w["sparsemax"], atol=1e-12)
        assert w["entmax"][2] == 0.0
    if "prior-softmax" in w:       # tau = 100: prior-softmax near the prior, softmax near uniform
        np.testing.assert_allclose(w["prior-softmax"], [0.6, 0.3, 0.1], atol=0.01)
        assert abs(w["softmax"] - 1 / 3).max() < 0.02
    if av.SEMI in w:                # rho = 1000: every key's column sum at b = 1/3; the query's k3 weight grows
        columns = {t["name"]: np.asarray(t["y"], dtype=float) for t in figure_titled(at, "Semi-relaxed OT")["data"]}
        np.testing.assert_allclose(columns["column sums P<sup>T</sup>1 (all queries)"], 1 / 3, atol=1e-3)
        assert w[av.SEMI][2] > 1.5 * w["softmax"][2]
    for shown in SHOWN[item.label](shown_table(at).set_index("mechanism"), at):
        assert shown in item.watch, (shown, item.watch)   # the sentence quotes the page's own numbers


# What each link's sentence quotes off the page: the summary table's cells as shown (by mechanism) and captions
SHOWN = {
    "Send tau to 0.001": lambda cells, at: [f"{cells['p(k2)']['softmax']} for k2",
                                            *[f"support {cells['support size'][m]}" for m in cells.index]],
    "Send tau to 100": lambda cells, at: [
        "run from {} to {}".format(*sorted(cells[[f"p(k{j})" for j in (1, 2, 3)]].values.ravel(), key=float)[::8])],
    "entmax with alpha = 1": lambda cells, at: [] if (cells.loc["entmax"] == cells.loc["softmax"]).all() else
                                               ["(the table's entmax row differs from softmax's)"],
    "Semi-relaxed OT: from softmax to Sinkhorn": lambda cells, at: [
        f"k3 {cells['p(k3)']['softmax']}", f"to {cells['p(k3)'][av.SEMI]}.",
        re.search(r"KL\(P\^T 1 \| b\) = \S+(?= at rho)", " ".join(shown_text(c) for c in at.caption))[0]],
    "prior-softmax with the prior (0.6, 0.3, 0.1) at tau = 100": lambda cells, at: [
        "reads {}, {} and {}".format(*cells.loc["prior-softmax", ["p(k1)", "p(k2)", "p(k3)"]])],
}


def test_the_summary_table_reads_in_significant_digits(open_page):
    """At tau = 0.001 softmax's entropy is about 3.5e-241: the cell says so in a power of ten (not "0.000000..."),
    a zero entropy reads 0 (not -0), and no cell is longer than its number needs; the table keeps the numbers."""
    at = open_page(PAGE, tau="0.001")
    cells, values = shown_table(at), at.dataframe[0].value
    assert list(cells["entropy (nats)"]) == ["3.494e-241", "0", "0"]
    assert list(cells["support size"]) == ["2", "1", "1"] and list(cells["objective"]) == ["-1.06"] * 3
    assert values["entropy (nats)"][0] == pytest.approx(3.4936e-241, rel=1e-4)


def test_side_by_side_draws_both_temperatures(open_page):
    at = open_page(PAGE, view=av.Labels.SIDE_BY_SIDE)
    left, right = figure_titled(at, "Left: tau = 0.1"), figure_titled(at, "Right: tau = 10")
    for fig, tau in ((left, 0.1), (right, 10.0)):
        got = {tr["name"]: np.asarray(tr["y"], dtype=float) for tr in fig["data"]}
        assert set(got) == {"softmax", "sparsemax", "entmax"}
        np.testing.assert_allclose(got["softmax"], numpy_softmax(S_DEFAULT, tau), atol=1e-12)
    assert list(left["layout"]["xaxis"]["ticktext"]) == ["k1", "k2", "k3"]
    assert left["layout"]["yaxis"]["range"] == right["layout"]["yaxis"]["range"] == [0, 1.05]   # one scale
    # each side's tau is its own widget, bound to the URL
    # as the slider writes them
    at = open_page(PAGE, view=av.Labels.SIDE_BY_SIDE, side_tau_left="0.01", side_tau_right="100")
    assert at.select_slider(key=av.Keys.SIDE_TAU + "_left").value == 0.01
    right = figure_titled(at, "Right: tau = 100")
    got = {tr["name"]: np.asarray(tr["y"], dtype=float) for tr in right["data"]}
    np.testing.assert_allclose(got["softmax"], numpy_softmax(S_DEFAULT, 100.0), atol=1e-12)
    sparse = {tr["name"]: np.asarray(tr["y"], dtype=float) for tr in figure_titled(at, "Left")["data"]}["sparsemax"]
    np.testing.assert_array_equal(sparse, [1.0, 0.0, 0.0])


def test_many_queries_heatmap_has_a_colour_bar_and_axis_titles(open_page):
    at = open_page(PAGE, view=av.Labels.MANY_QUERIES, many_n="16", many_m="64")
    heat = figure_titled(at, "softmax, tau")
    trace = heat["data"][0]
    assert trace["type"] == "heatmap" and trace["showscale"] is True and trace["colorbar"]["title"]["text"] == "weight"
    assert heat["layout"]["xaxis"]["title"]["text"] == "key j"
    assert heat["layout"]["yaxis"]["title"]["text"] == "query i"


def test_display_equations_fit_a_narrow_screen(open_page):
    """Every line of every display equation is at most about 60 characters wide (800 px screens), also with 40
    keys: long vectors are shortened."""
    at = open_page(PAGE, source="random", m="40", mechanisms=["softmax", "entmax", "prior-softmax"])
    lines = [line for eq in at.latex for line in eq.value.split(r"\\")]
    assert len(lines) >= 8 and any(r"\mathbb{R}^{40}" in line for line in lines)
    wide = [(rendered_width(line), line) for line in lines if rendered_width(line) > 60]
    assert not wide, wide


def test_semi_relaxed_ot_from_softmax_to_the_balanced_plan(open_page):
    """The semi-relaxed bars are the page query's row of the plan of the four tokens (the query and the three keys
    as queries) times 4: at the rho slider's smallest value they are softmax's, at infinity every key receives 1/3
    from the four queries; the rho view draws the column sums and the sweep, titled with the slider's rho."""
    at = open_page(PAGE, mechanisms=["softmax", av.SEMI], view=av.Labels.RHO_SWEEP)
    no_exception(at)
    assert at.sidebar.select_slider(key=av.Keys.RHO).value == av.DEFAULT_RHO
    at.sidebar.select_slider(key=av.Keys.RHO).set_value(av.RHOS[0]).run()
    w = bars(at)
    np.testing.assert_allclose(w[av.SEMI], w["softmax"], atol=2e-3)
    at.sidebar.select_slider(key=av.Keys.RHO).set_value(float("inf")).run()
    no_exception(at)
    columns = {t["name"]: np.asarray(t["y"], dtype=float)
               for t in figure_titled(at, "Semi-relaxed OT at rho = ∞")["data"]}
    np.testing.assert_allclose(columns["column sums P<sup>T</sup>1 (all queries)"], 1 / 3, atol=1e-6)
    np.testing.assert_allclose(columns["the query's weights"], bars(at)[av.SEMI], atol=1e-12)
    sweep = figure_titled(at, "From softmax (rho = 0) to Sinkhorn")
    assert list(sweep["layout"]["xaxis2"]["ticktext"])[-1] == "∞"
    assert any(r"\rho\, \mathrm{KL}(P^\top 1" in eq.value for eq in at.latex)   # the problem beside the bars
    assert "semi-relaxed OT" in at.dataframe[0].value["mechanism"].tolist()


def test_semi_relaxed_ot_with_typed_scores_and_in_the_many_queries_view(open_page):
    """Typed scores give one query: the view says so, and its weights are the prior-softmax at tau + rho; the many
    queries view solves n random queries jointly, rows summing to 1."""
    at = open_page(PAGE, source="typed scores", mechanisms=[av.SEMI], view=av.Labels.RHO_SWEEP)
    no_exception(at)
    assert any("only the typed one" in shown_text(md) for md in at.markdown)
    s = np.array([2.0, 1.0, 0.5])
    want = np.exp(s / 2.0) / np.exp(s / 2.0).sum()   # tau = 1, rho = 1: prior-softmax (uniform) at 2
    np.testing.assert_allclose(bars(at)[av.SEMI], want, atol=1e-6)
    at = open_page(PAGE, view=av.Labels.MANY_QUERIES, many_mech=av.SEMI, many_n="64", many_m="16")
    no_exception(at)
    z = np.array(figure_titled(at, "semi-relaxed OT, tau = 1, rho = 1")["data"][0]["z"])
    np.testing.assert_allclose(z.sum(axis=1), 1.0, atol=1e-4)
