"""The "Particles and contraction" page through AppTest; its particles, W1 and bounds checked against numpy,
scipy's assignment solver and finite differences."""
import math
import re

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from tests.app.conftest import check_views, figure_titled, figures, link_params, no_exception, shown_text
from wviz.views import particles as pv

PAGE = "particles.py"


def np_attention(x, potential, tau):
    a = x @ x.T / tau if potential == "dot" else -((x[:, None] - x[None]) ** 2).sum(-1) / tau
    e = np.exp(a - a.max(1, keepdims=True))
    return (e / e.sum(1, keepdims=True)) @ x


def w1_assignment(x, y):
    """W1 (l1 ground) of two uniform clouds of the same size: an assignment problem (Birkhoff)."""
    C = np.abs(x[:, None] - y[None]).sum(-1)
    r, c = linear_sum_assignment(C)
    return C[r, c].mean()


def frames(at):
    fig = figure_titled(at, "Particles over")
    return fig, [np.stack([np.asarray(f["data"][1]["x"], float), np.asarray(f["data"][1]["y"], float)], 1)
                 for f in fig["frames"]]


def lines(fig):
    return {t["name"].split(":")[0]: t for t in fig["data"] if t.get("mode") == "lines"}


def test_default_flow_is_layerwise_attention_with_play_button_and_slider(open_page):
    at = open_page(PAGE)
    fig, xs = frames(at)
    layers, tau = at.sidebar.slider(key=pv.Keys.LAYERS).value, at.sidebar.select_slider(key=pv.Keys.TAU).value
    assert len(xs) == layers + 1
    np.testing.assert_allclose(xs[0], pv.particles("clusters", 40, 0).numpy(), atol=1e-12)
    for h in range(layers):
        np.testing.assert_allclose(xs[h + 1], np_attention(xs[h], "gaussian", tau), atol=1e-9)
    assert [b["label"] for b in fig["layout"]["updatemenus"][0]["buttons"]] == ["Play", "Pause"]
    assert len(fig["layout"]["sliders"][0]["steps"]) == layers + 1
    steps = figure_titled(at, "W1 between consecutive layers")["data"][0]["y"]
    np.testing.assert_allclose(steps, [w1_assignment(xs[h], xs[h + 1]) for h in range(layers)], atol=1e-9)


def test_contraction_points_and_bound_lines(open_page):
    at = open_page(PAGE)
    fig = figure_titled(at, "Contraction")
    w_in, w_out = (np.asarray(fig["data"][0][k], float) for k in ("x", "y"))
    assert len(w_in) == 16 and (w_in > 0).all()
    slope = {name: t["y"][1] / t["x"][1] for name, t in lines(fig).items()}
    N, d = 40, 2
    cor30 = 2 * d * (math.sqrt(d) * math.sqrt(math.log(N) + 1 / (2 * math.e)) * math.sqrt(2 / math.e) + 1
                     + math.sqrt(d) + 2)
    assert abs(slope["Cor. 30"] - cor30) < 1e-9
    assert slope["Thm. 23 as printed"] < slope["Thm. 23 (corrected)"]
    ratios = w_out / w_in
    assert (ratios <= slope["Cor. 30"]).all() and (ratios <= slope["Thm. 23 (corrected)"]).all()
    assert any(r"\text{Thm. 23 (corrected): }" in eq.value for eq in at.latex)   # the equation shows that form
    # the worst infinitesimal move against central finite differences of the attention map
    x, tau = pv.particles("clusters", N, 0).numpy(), at.sidebar.select_slider(key=pv.Keys.TAU).value
    J = np.zeros((N * d, N * d))
    h = 1e-6
    for c in range(N * d):
        e = np.zeros(N * d)
        e[c] = h
        J[:, c] = (np_attention((x.ravel() + e).reshape(N, d), "gaussian", tau)
                   - np_attention((x.ravel() - e).reshape(N, d), "gaussian", tau)).ravel() / (2 * h)
    assert abs(slope["worst infinitesimal move ||J||"] - np.abs(J).sum(0).max()) < 1e-6


def test_dot_potential_has_no_cor30_line_and_l2_no_bounds(open_page):
    at = open_page(PAGE)
    at.sidebar.radio(key=pv.Keys.POTENTIAL).set_value("dot").run()
    no_exception(at)
    names = set(lines(figure_titled(at, "Contraction")))
    assert "Thm. 23 (corrected)" in names and "Cor. 30" not in names
    _, xs = frames(at)
    np.testing.assert_allclose(xs[1], np_attention(xs[0], "dot", at.sidebar.select_slider(key=pv.Keys.TAU).value),
                               atol=1e-9)
    at.sidebar.radio(key=pv.Keys.GROUND).set_value("l2").run()
    no_exception(at)
    assert set(lines(figure_titled(at, "Contraction"))) == {"y = x"}


def test_small_values_make_a_provable_contraction_with_banach_envelope(open_page):
    at = open_page(PAGE, view=pv.Labels.INFINITE_DEPTH)
    at.sidebar.slider(key=pv.Keys.VALUE_SCALE).set_value(0.1).run()
    at.sidebar.select_slider(key=pv.Keys.TAU).set_value(100.0).run()
    no_exception(at)
    fig = figure_titled(at, "Fixed point")
    traces = {t["name"]: np.asarray(t["y"], float) for t in fig["data"]}
    envelope = traces["Banach: kappa^l / (1 - kappa) W1(mu^1, mu^0)"]
    to_last = traces["W1(mu^l, last iterate)"]
    assert len(envelope) == len(to_last) and (to_last <= envelope + 1e-12).all()
    _, xs = frames(at)
    np.testing.assert_allclose(xs[1], 0.1 * np_attention(xs[0], "gaussian", 100.0), atol=1e-9)


def test_max_entropy_curves_peak_at_the_gibbs_measure(open_page):
    at = open_page(PAGE, view=pv.Labels.MAXIMUM_ENTROPY)
    at.number_input(key=pv.Keys.QUERY).set_value(7).run()
    no_exception(at)
    fig = figure_titled(at, "Thm. 14")
    star = [t for t in fig["data"] if t.get("mode") == "markers"][0]
    assert star["x"] == [0.0]
    for t in fig["data"]:
        if t.get("mode") == "lines":
            assert np.max(np.asarray(t["y"], float)) <= star["y"][0] + 1e-12


def test_cor30_failure_curve_crosses_the_bound(open_page):
    at = open_page(PAGE)
    fig = figure_titled(at, "Where Cor. 30 fails")
    ratio, bound = (np.asarray(t["y"], float) for t in fig["data"])
    n = np.asarray(fig["data"][0]["x"], float)
    assert ratio[0] < bound[0] and ratio[-1] > bound[-1]
    q = 0.85
    R2 = np.log(n - 1) - np.log(q / (1 - q))
    big = n >= 1e5   # the closed form neglects how the clusters follow the token, an O(N^-1/2) effect
    np.testing.assert_allclose(ratio[big], ((1 - q) + 2 * q * R2)[big], rtol=1e-3)


def test_uploaded_pair_and_bad_uploads(open_page):
    at = open_page(PAGE)
    at.sidebar.selectbox(key=pv.Keys.PRESET).set_value("uploaded CSV").run()
    no_exception(at)
    assert at.error and figures(at)  # nothing uploaded yet: an error, the last figures stay
    src = [[0.0, 0.0], [1.0, 0.2], [0.3, 1.1], [1.4, 1.0], [-0.5, 0.4], [0.7, -0.6]]
    tgt = [[0.1, -0.2], [1.2, 0.4], [0.2, 1.3], [1.0, 1.1], [-0.2, 0.6], [0.9, -0.9]]
    csv = "cloud,x,y\n" + "".join(f"source,{a},{b}\n" for a, b in src) + "".join(f"target,{a},{b}\n" for a, b in tgt)
    at.sidebar.file_uploader(key=pv.Keys.PARTICLES_CSV).upload("p.csv", csv.encode(), "text/csv").run()
    no_exception(at)
    assert not at.error
    star = [t for t in figure_titled(at, "Contraction")["data"] if t["name"] == "uploaded X and Y"][0]
    x, y = np.array(src), np.array(tgt)
    assert abs(star["x"][0] - w1_assignment(x, y)) < 1e-12
    tau = at.sidebar.select_slider(key=pv.Keys.TAU).value
    assert abs(star["y"][0] - w1_assignment(np_attention(x, "gaussian", tau), np_attention(y, "gaussian", tau))) \
        < 1e-12
    bad = "cloud,x,y,mass\n" + "".join(f"source,{a},{b},{1 + i}\n" for i, (a, b) in enumerate(src)) \
        + "".join(f"target,{a},{b},1\n" for a, b in tgt)
    at.sidebar.file_uploader(key=pv.Keys.PARTICLES_CSV).upload("p.csv", bad.encode(), "text/csv").run()
    no_exception(at)
    assert "uniform measure" in at.error[0].value


def test_views_one_at_a_time_from_the_url_and_all_in_the_bundle(open_page):
    at = open_page(PAGE, view=pv.Labels.MAXIMUM_ENTROPY)
    assert figure_titled(at, "Thm. 14") and not [f for f in figures(at) if "Contraction" in str(f["layout"])]
    flow = ["animation", "layer_steps", "cor30_failure"]
    check_views(at, pv.Keys.VIEW, {pv.Labels.CONTRACTION: [*flow, "contraction"],
                                   pv.Labels.INFINITE_DEPTH: [*flow, "fixed_point"],
                                   pv.Labels.MAXIMUM_ENTROPY: [*flow, "maxent"],
                                   pv.Labels.SIDE_BY_SIDE: [*flow, "side_left", "side_right"]})


def flow_of(x, tau, layers):
    xs = [x]
    for _ in range(layers):
        xs.append(np_attention(xs[-1], "gaussian", tau))
    return xs


def test_side_by_side_draws_the_flow_at_two_temperatures(open_page):
    """tau 0.1 and 1 by default: each figure holds the particles after every layer (numpy's attention), and at
    tau = 1 they have collapsed to one point while at 0.1 they have not."""
    at = open_page(PAGE, view=pv.Labels.SIDE_BY_SIDE)
    layers = at.sidebar.slider(key=pv.Keys.LAYERS).value
    x0 = pv.particles("clusters", 40, 0).numpy()
    spread = {}
    for tau, key in ((0.1, pv.Keys.SIDE_TAU + "_left"), (1.0, pv.Keys.SIDE_TAU + "_right")):
        assert at.select_slider(key=key).value == tau
        fig = figure_titled(at, f"tau = {tau:g}: layer {layers}")
        pts = np.stack([np.asarray(fig["data"][1]["x"], float), np.asarray(fig["data"][1]["y"], float)], 1)
        np.testing.assert_allclose(pts, flow_of(x0, tau, layers)[-1], atol=1e-9)
        spread[tau] = np.ptp(pts, axis=0).max()
    assert spread[1.0] < 1e-6 and spread[0.1] > 0.5
    # one scale for both sides: the same axis ranges, holding every layer of both flows
    left, right = figure_titled(at, f"tau = 0.1: layer {layers}"), figure_titled(at, f"tau = 1: layer {layers}")
    for axis in ("xaxis", "yaxis"):
        assert left["layout"][axis]["range"] == right["layout"][axis]["range"]
    lo, hi = np.transpose([left["layout"][a]["range"] for a in ("xaxis", "yaxis")])
    for tau in (0.1, 1.0):
        xs = np.concatenate(flow_of(x0, tau, layers))
        assert (xs.min(0) >= lo).all() and (xs.max(0) <= hi).all()


def test_metrics_are_short_and_say_the_rest_in_their_help(open_page):
    at = open_page(PAGE)
    assert len(at.metric) == 3
    for m in at.metric:
        assert len(m.label) <= 18 and len(m.value) <= 8 and m.help, (m.label, m.value)


@pytest.mark.parametrize("item", pv.TRY_THIS, ids=[t.label for t in pv.TRY_THIS])
def test_try_this_links_set_their_widgets(open_page, item):
    """Each guided link, opened as the browser would (its query string), sets every widget it names."""
    at = open_page(PAGE, **link_params(item))
    no_exception(at)
    assert not at.error
    for key, value in item.params.items():
        assert at.session_state[key] == value, key
    metrics = {m.label: m.value for m in at.metric}
    captions = " ".join(shown_text(c) for c in at.caption)
    quoted = {"Measure the contraction on 32 sampled pairs": lambda: [
                  f"largest ratio metric reads {metrics['largest ratio']}",
                  f"bound is {metrics['Thm. 23 bound']} (its metric", f"(its metric: {metrics['Cor. 30 bound']})"],
              "Make the fixed point provable": lambda: [re.search(r"kappa\(T\) <= [\d.]+", captions)[0]]}
    for shown in quoted.get(item.label, list)():
        assert shown in item.watch, (shown, item.watch)   # the sentence quotes the page's own numbers


@pytest.mark.parametrize("presentation", [False, True])
def test_an_animation_made_in_presentation_mode_is_in_its_style(open_page, monkeypatch, presentation):
    """The frames of "Animation for slides" are the page's figures, in presentation style (text at least TEXT_PX)
    when the mode is on, as on the page; drawing them is kaleido's (tests/test_lecture_hall.py), recorded here."""
    from wviz import animation
    from wviz.export import TEXT_PX

    drawn = []

    def render(figures, progress=None):
        drawn.extend(figures)
        return [np.zeros((16, 16, 3), np.uint8)] * len(figures)

    monkeypatch.setattr(animation, "render", render)
    monkeypatch.setattr("wviz.export.browser_path", lambda: "/usr/bin/chromium")
    at = open_page(PAGE, **({"presentation": "true"} if presentation else {}))
    at.button(key="_animation_flow_make").click().run()
    no_exception(at)
    assert len(drawn) > 1
    sizes = {fig.layout.font.size for fig in drawn}
    assert sizes == ({TEXT_PX} if presentation else {None})
