"""The "Gaussian W2 attention" page, driven through AppTest; its weights checked against scipy's sqrtm."""
import json

import numpy as np
import pytest
from scipy.linalg import sqrtm

from tests.app.conftest import check_views, figure_titled, figures, link_params, no_exception, shown_text
from wviz.views import gaussian_w2 as gv

PAGE = "gaussian_w2.py"
# the page's default tokens: mean, (sigma_x, sigma_y, rho)
MEANS = np.array([[0.0, 0.0], [1.0, 0.2], [-0.8, 0.9], [0.2, -1.0], [1.5, 1.2]])
SIG = np.array([[0.5, 0.5, 0.0], [0.3, 0.8, 0.5], [0.6, 0.2, -0.3], [0.2, 0.2, 0.0], [1.0, 0.4, 0.7]])


def covariances(sig, diagonal=False):
    out = []
    for sx, sy, rho in sig:
        rho = 0.0 if diagonal else rho
        out.append(np.array([[sx * sx, rho * sx * sy], [rho * sx * sy, sy * sy]]))
    return out


def w2_squared(m1, S1, m2, S2):
    r2 = sqrtm(S2)
    cross = sqrtm(r2 @ S1 @ r2)
    return float(((m1 - m2) ** 2).sum() + np.trace(S1 + S2 - 2 * cross.real))


def reference_attention(means, covs, tau):
    W = np.array([[w2_squared(mi, Si, mj, Sj) for mj, Sj in zip(means, covs)] for mi, Si in zip(means, covs)])
    E = np.exp(-(W - W.min(axis=1, keepdims=True)) / tau)
    return E / E.sum(axis=1, keepdims=True)


def heatmaps(at):
    fig = [f for f in figures(at) if len([t for t in f["data"] if t["type"] == "heatmap"]) == 2][0]
    w2, dot = [np.asarray(t["z"], dtype=float) for t in fig["data"] if t["type"] == "heatmap"]
    return w2, dot


def heatmaps_drawn(at):
    return any(len([t for t in f["data"] if t["type"] == "heatmap"]) == 2 for f in figures(at))


def test_default_w2_attention_matches_scipy(open_page):
    at = open_page(PAGE)
    w2, dot = heatmaps(at)
    np.testing.assert_allclose(w2, reference_attention(MEANS, covariances(SIG), 1.0), atol=1e-9)
    E = np.exp(MEANS @ MEANS.T - (MEANS @ MEANS.T).max(axis=1, keepdims=True))
    np.testing.assert_allclose(dot, E / E.sum(axis=1, keepdims=True), atol=1e-12)


def test_diagonal_mode_and_tau(open_page):
    at = open_page(PAGE)
    at.sidebar.radio(key=gv.Keys.COVARIANCE).set_value("diagonal").run()
    at.sidebar.select_slider(key=gv.Keys.TAU).set_value(0.1).run()
    no_exception(at)
    tau = at.sidebar.select_slider(key=gv.Keys.TAU).value
    np.testing.assert_allclose(heatmaps(at)[0], reference_attention(MEANS, covariances(SIG, True), tau), atol=1e-9)


def test_query_sliders_move_the_query(open_page):
    at = open_page(PAGE)
    at.sidebar.slider(key=gv.Keys.SIGMA_X.format(0)).set_value(1.5).run()
    at.sidebar.slider(key=gv.Keys.MEAN_X.format(0)).set_value(1.0).run()
    no_exception(at)
    sig, means = SIG.copy(), MEANS.copy()
    sig[0, 0], means[0, 0] = 1.5, 1.0
    np.testing.assert_allclose(heatmaps(at)[0], reference_attention(means, covariances(sig), 1.0), atol=1e-9)
    parts = [f for f in figures(at) if f["layout"].get("barmode") == "stack"][0]
    mean_part, cov_part = (np.asarray(t["y"], dtype=float) for t in parts["data"])
    covs = covariances(sig)
    for j in range(5):
        assert abs(mean_part[j] - ((means[0] - means[j]) ** 2).sum()) < 1e-12
        assert abs(mean_part[j] + cov_part[j] - w2_squared(means[0], covs[0], means[j], covs[j])) < 1e-9




def test_sweep_has_a_row_per_scale_summing_to_one(open_page):
    at = open_page(PAGE, view=gv.Labels.SWEEP)
    sweep = [f for f in figures(at) if f["layout"].get("title", {}).get("text", "").startswith("How the query")][0]
    W = np.array([np.asarray(t["y"], dtype=float) for t in sweep["data"]])  # keys x scales
    np.testing.assert_allclose(W.sum(axis=0), 1.0, atol=1e-12)


def test_sweep_point_matches_scipy(open_page):
    """The sweep widens token t2's covariance (the default sweep token) by factors 10^-2 .. 10^2; the point at
    factor 10 is the query t1's W2 attention with S_2 -> 10 S_2, recomputed with scipy's sqrtm."""
    at = open_page(PAGE, view=gv.Labels.SWEEP)
    sweep = [f for f in figures(at) if f["layout"].get("title", {}).get("text", "").startswith("How the query")][0]
    scales = np.asarray(sweep["data"][0]["x"], dtype=float)
    W = np.array([np.asarray(t["y"], dtype=float) for t in sweep["data"]])  # keys x scales
    k = int(np.argmin(np.abs(np.log10(scales) - 1.0)))
    assert abs(scales[k] - 10.0) < 1e-9
    covs = covariances(SIG)
    covs[1] = 10.0 * covs[1]
    np.testing.assert_allclose(W[:, k], reference_attention(MEANS, covs, 1.0)[0], atol=1e-9)


def open_with_table(open_page, rows):
    """The page opened with this token table in its URL (the table is bound to the query parameter 'tokens')."""
    return open_page(PAGE, tokens=json.dumps(rows))


def default_rows():
    return [[f"t{i + 1}", *MEANS[i], *SIG[i]] for i in range(5)]


def error_text(at):
    assert at.error, "expected an error message on the page"
    return shown_text(at.error[0])


def test_bad_table_shows_errors_naming_the_tables_token(open_page):
    """A bad row t3 is reported as token t3 (the table's 1-based names), with st.error and no exception; the
    query's own row (t1) is validated too, not clipped into the sliders' range."""
    for row, col, value, message in [
        (2, 3, -0.6, "sigma_x of token t3 is -0.6; a standard deviation must be >= 0"),
        (0, 4, -0.2, "sigma_y of token t1 is -0.2; a standard deviation must be >= 0"),
        (1, 5, 1.5, r"rho of token t2 is 1.5; a correlation must lie in [-1, 1]"),
        (3, 1, None, "token t4 has an empty entry"),
    ]:
        rows = default_rows()
        rows[row][col] = value
        at = open_with_table(open_page, rows)
        no_exception(at)
        assert error_text(at) == message
        assert not heatmaps_drawn(at)  # nothing computed from a bad table
    at = open_with_table(open_page, default_rows()[:1])
    no_exception(at)
    assert error_text(at) == "add at least two tokens to the table"


def test_renamed_token_named_in_errors(open_page):
    rows = default_rows()
    rows[2][0], rows[2][3] = "cat", -1.0
    at = open_with_table(open_page, rows)
    no_exception(at)
    assert error_text(at).startswith("sigma_x of token cat is -1")


def test_query_values_outside_the_slider_range_are_kept(open_page):
    """A valid query row beyond the sliders' default range (mean x = 4.2, sigma_x = 2.7) widens the sliders instead
    of being clipped to 3 and 2: the attention is that of the table's values."""
    rows = default_rows()
    rows[0][1], rows[0][3] = 4.2, 2.7
    at = open_with_table(open_page, rows)
    no_exception(at)
    assert not at.error
    assert at.sidebar.slider(key=gv.Keys.MEAN_X.format(0)).value == 4.2
    assert at.sidebar.slider(key=gv.Keys.SIGMA_X.format(0)).value == 2.7
    means, sig = MEANS.copy(), SIG.copy()
    means[0, 0], sig[0, 0] = 4.2, 2.7
    np.testing.assert_allclose(heatmaps(at)[0], reference_attention(means, covariances(sig), 1.0), atol=1e-9)



def test_views_one_at_a_time_from_the_url_and_all_in_the_bundle(open_page):
    at = open_page(PAGE, view=gv.Labels.SWEEP)
    assert len(figures(at)) == 3
    check_views(at, gv.Keys.VIEW, {gv.Labels.WEIGHTS: ["ellipses", "pair", "query_bars", "parts"],
                                   gv.Labels.SWEEP: ["ellipses", "pair", "sweep"],
                                   gv.Labels.SIDE_BY_SIDE: ["ellipses", "pair", "side_left", "side_right"],
                                   gv.Labels.CLICK: ["ellipses", "pair"]})




def test_side_by_side_draws_w2_attention_at_two_temperatures(open_page):
    """Defaults tau = 0.1 (left) and 10 (right); each widget moves its own figure; both recomputed with scipy."""
    at = open_page(PAGE, view=gv.Labels.SIDE_BY_SIDE)
    assert at.select_slider(key=gv.Keys.SIDE_TAU + "_left").value == 0.1
    assert at.select_slider(key=gv.Keys.SIDE_TAU + "_right").value == 10
    for tau in (0.1, 10.0):
        fig = figure_titled(at, f"W2 attention at τ = {tau:g}")
        (trace,) = fig["data"]
        np.testing.assert_allclose(np.asarray(trace["z"], dtype=float),
                                   reference_attention(MEANS, covariances(SIG), tau), atol=1e-9)
        assert trace["colorbar"]["title"]["text"] == "weight"
        assert (trace["zmin"], trace["zmax"]) == (0, 1)   # one colour scale for both sides: weights from 0 to 1
    at.select_slider(key=gv.Keys.SIDE_TAU + "_right").set_value(1.0).run()
    no_exception(at)
    fig = figure_titled(at, "W2 attention at τ = 1")
    np.testing.assert_allclose(np.asarray(fig["data"][0]["z"], dtype=float),
                               reference_attention(MEANS, covariances(SIG), 1.0), atol=1e-9)
    assert figure_titled(at, "W2 attention at τ = 0.1")


def test_click_a_query_draws_the_linked_altair_chart(open_page):
    """The Altair view: one Vega-Lite chart, selection on the field "query" starting at the page's query, bars
    filtered by it; nothing sent back to the server (on_select is "ignore": no selection state)."""
    at = open_page(PAGE, view=gv.Labels.CLICK, query="t3")  # the URL holds the selectbox's label
    (chart,) = at.get("vega_lite_chart")
    spec = json.loads(chart.proto.spec)
    (param,) = spec["params"]
    assert param["select"]["fields"] == ["query"] and param["value"] == [{"query": "t3"}]
    assert spec["vconcat"][1]["transform"] == [{"filter": {"param": param["name"], "empty": False}}]
    assert not chart.proto.selection_mode


def test_the_linked_chart_follows_presentation_mode(open_page):
    """In presentation mode the Altair chart's text is at least the lecture hall's size and its colours are the
    mode's (Okabe-Ito categories, Cividis for the weights), as the Plotly figures'."""
    from wviz.export import TEXT_PX
    from wviz.figures.common import PALETTE

    def config(**query):
        (chart,) = open_page(PAGE, view=gv.Labels.CLICK, **query).get("vega_lite_chart")
        return json.loads(chart.proto.spec)

    plain, hall = config(), config(presentation="true")
    assert plain["config"]["axis"]["labelFontSize"] < TEXT_PX
    sizes = [hall["config"][part][size] for part in ("axis", "legend") for size in ("labelFontSize", "titleFontSize")]
    assert min(sizes + [hall["config"]["title"]["fontSize"]]) >= TEXT_PX
    assert hall["config"]["range"]["category"] == PALETTE
    assert "viridis" in json.dumps(plain) and "viridis" not in json.dumps(hall) and "cividis" in json.dumps(hall)
    assert hall["params"] == plain["params"]   # the same chart, clicks included


def test_equal_covariances_toggle_leaves_only_the_means(open_page):
    at = open_page(PAGE)
    at.sidebar.toggle(key=gv.Keys.EQUAL_COVARIANCES).set_value(True).run()
    no_exception(at)
    D = ((MEANS[:, None] - MEANS[None]) ** 2).sum(-1)
    E = np.exp(-(D - D.min(axis=1, keepdims=True)))
    np.testing.assert_allclose(heatmaps(at)[0], E / E.sum(axis=1, keepdims=True), atol=1e-7)
    parts = [f for f in figures(at) if f["layout"].get("barmode") == "stack"][0]
    np.testing.assert_allclose(np.asarray(parts["data"][1]["y"], dtype=float), 0.0, atol=1e-7)


def test_every_problem_of_the_table_shown_at_once(open_page):
    rows = default_rows()
    rows[1][5], rows[3][1] = 1.5, None
    at = open_with_table(open_page, rows)
    no_exception(at)
    assert error_text(at).splitlines() == ["the token table has 2 problems:",
                                           "- rho of token t2 is 1.5; a correlation must lie in [-1, 1]",
                                           "- token t4 has an empty entry"]


def test_heatmaps_name_every_token_and_have_colour_bars(open_page):
    fig = figure_titled(open_page(PAGE), "Attention weights")
    names = ["t1", "t2", "t3", "t4", "t5"]
    assert [t["colorbar"]["title"]["text"] for t in fig["data"]] == ["weight", "weight"]
    assert all(t.get("showscale", True) for t in fig["data"])
    for axis, title in (("xaxis", "key j"), ("xaxis2", "key j"), ("yaxis", "query i")):
        assert fig["layout"][axis]["title"]["text"] == title
        assert fig["layout"][axis]["ticktext"] == names


@pytest.mark.parametrize("item", gv.TRY_THIS, ids=lambda t: t.label)
def test_try_this_links_open_the_page_in_their_state(open_page, item):
    """Opened through its link's query parameters, the page runs without an error and each widget named holds the
    value; at least one of them differs from the page's default (the link changes something)."""
    default = open_page(PAGE)
    at = open_page(PAGE, **link_params(item))
    assert not at.error
    for k, v in item.params.items():
        assert at.session_state[k] == v, (k, at.session_state[k], v)
    assert any(default.session_state[k] != v for k, v in item.params.items() if k in default.session_state)
