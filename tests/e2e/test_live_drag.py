"""Figures follow their sliders while they are dragged (wviz.ui.drag): chromium drags the slider, the figure changes
in many frames before the release, and what the browser drew equals wviz's figure at the released value (to 1e-9,
or to the solvers' tolerance for a transport plan), bar heights and pixels included; the released value is in the
link, which reproduces the figure."""
import re

import numpy as np
import pytest

from tests.e2e.harness import drag, live_frames, wait_until_idle, watched
from wviz.views import attention_transport as av

# Each trace's weights as the figure holds them (what drag.js drew, or Python's after a rerun), and each bar's
# height in px on the screen (its path's vertical extent).
DRAWN = """() => {
    const gd = document.querySelector('.st-key-bars .js-plotly-plot');
    return {weights: gd.calcdata.map(cd => cd.map(di => di.s)),
            heights: Array.from(gd.querySelectorAll('.barlayer .trace'),
                t => Array.from(t.querySelectorAll('.point path'), p => {
                    const v = (p.getAttribute('d').match(/[-\\d.]+/g) || []).map(Number);
                    return v.length >= 3 ? Math.abs(v[2] - v[1]) : 0; }))};
}"""


def release(page, key: str, text: str) -> None:
    """Release the mouse and wait for the page's rerun at the released value, ``text`` as the URL writes it."""
    page.mouse.up()
    page.wait_for_url(re.compile(rf"{key}={re.escape(text)}(&|$)"), timeout=30_000)
    wait_until_idle(page)


def opened_link(page):
    """The page's link opened in a new page of the same browser, once its run is done."""
    shared = page.context.new_page()
    shared.goto(page.url)
    wait_until_idle(shared)
    return shared


def drawn(page) -> dict:
    page.wait_for_function("() => document.querySelector('.st-key-bars .js-plotly-plot')?.calcdata")
    return page.evaluate(DRAWN)


def python_weights(tau: float) -> np.ndarray:
    w = av.at_defaults()(tau)
    return np.stack([p.numpy() for p in w.p.values()])


@pytest.mark.timeout(300)
def test_tau_drag_redraws_the_bars_live_and_equal_to_python(server, page):
    page.goto(f"{server}/attention_transport")
    wait_until_idle(page)
    drag(page, "tau", 0.85, seconds=1.0, release=False)   # to tau near 20, where every weight moves
    frames = live_frames(page)
    taus = [f["values"]["tau"] for f in frames]
    assert len(set(taus)) >= 10, taus   # the figure changed in at least 10 frames during one drag
    live = drawn(page)
    tau = taus[-1]
    np.testing.assert_allclose(np.array(live["weights"]), python_weights(tau), atol=1e-9, rtol=0)

    release(page, "tau", str(tau))
    released = drawn(page)   # Python's figure at the released value, drawn by Plotly itself
    np.testing.assert_allclose(np.array(released["weights"]), python_weights(tau), atol=1e-12, rtol=0)
    np.testing.assert_allclose(np.array(live["heights"]), np.array(released["heights"]), atol=1.0)

    shared = opened_link(page)   # the link after the drag reproduces the released value's figure
    np.testing.assert_allclose(np.array(drawn(shared)["weights"]), python_weights(tau), atol=1e-12, rtol=0)


def semi_weights(rho: float) -> np.ndarray:
    """wviz's bars at the page's defaults with softmax and semi-relaxed OT chosen, at tau = 1 and ``rho``."""
    s = av.scores_from_points(av.DEFAULT_QUERY, av.DEFAULT_KEYS)
    inputs = av.Inputs(s, av.prior_from_table(av.prior_table(len(s))), ("softmax", av.SEMI), av.DEFAULT_ALPHA,
                       av.queries_from_points(s, av.DEFAULT_KEYS), rho)
    return np.stack([p.numpy() for p in av.weights(inputs, 1.0).p.values()])


@pytest.mark.timeout(300)
def test_rho_drag_re_solves_semi_relaxed_ot_live(server, page):
    """Attention as transport with semi-relaxed OT: its bars follow rho (the n queries' plan re-solved in the
    browser, warm-started frame to frame) and hold wviz's weights at the rho drawn, to n times twice the solvers'
    tolerance (each query's row is 1 / n of its weights), softmax's untouched; the link reproduces the released
    rho."""
    page.goto(f"{server}/attention_transport?mechanisms=softmax&mechanisms=semi-relaxed+OT")
    wait_until_idle(page)
    drag(page, "rho", 0.8, seconds=1.0, release=False)   # from rho = 1 to about 500
    rhos = [f["values"]["rho"] for f in live_frames(page)]
    assert len(set(rhos)) >= 10, rhos
    page.wait_for_timeout(300)
    live, want = np.array(drawn(page)["weights"]), semi_weights(rhos[-1])
    np.testing.assert_allclose(live, want, atol=4 * 2 * 1e-6, rtol=0)
    assert np.abs(live - semi_weights(rhos[0])).max() > 0.01   # the bars moved

    release(page, "rho", f"{rhos[-1]:g}")
    np.testing.assert_allclose(np.array(drawn(page)["weights"]), want, atol=1e-12, rtol=0)
    shared = opened_link(page)
    np.testing.assert_allclose(np.array(drawn(shared)["weights"]), want, atol=1e-12, rtol=0)


def heatmaps(page, chart: str = "pair") -> list:
    """The z of each heatmap of the chart keyed ``chart``, as the figure holds them."""
    page.wait_for_function(f"() => document.querySelector('.st-key-{chart} .js-plotly-plot')?._fullData")
    return page.evaluate(f"() => document.querySelector('.st-key-{chart} .js-plotly-plot')._fullData"
                         ".filter(t => t.type === 'heatmap').map(t => Array.from(t.z, row => Array.from(row)))")


def pixels_differing(before: bytes, after: bytes) -> float:
    """The share of pixels of two screenshots of the same size that differ visibly (by more than 8 of 255)."""
    from io import BytesIO

    from PIL import Image

    a, b = (np.asarray(Image.open(BytesIO(s)).convert("RGB"), dtype=int) for s in (before, after))
    assert a.shape == b.shape
    return float((np.abs(a - b).max(axis=-1) > 8).mean())


@pytest.mark.timeout(300)
def test_gaussian_tau_drag_redraws_both_heatmaps_as_plotly_would(server, page):
    """Gaussian W2 attention: both heatmaps follow tau; the values drawn equal wviz's at the released tau to 1e-9,
    and the picture drawn in place (one pixel per cell, the trace's colour scale) matches Plotly's own drawing of
    Python's figure after the release."""
    from wviz.views import gaussian_w2 as gv

    page.goto(f"{server}/gaussian_w2")
    wait_until_idle(page)
    drag(page, "tau", 0.35, seconds=1.0, release=False)
    taus = [f["values"]["tau"] for f in live_frames(page)]
    assert len(set(taus)) >= 10, taus
    page.wait_for_timeout(300)
    live, live_shot = heatmaps(page), page.locator(".st-key-pair").screenshot()
    a = gv.at_defaults()(taus[-1])
    np.testing.assert_allclose(np.array(live), np.stack([a.w2.numpy(), a.dot.numpy()]), atol=1e-9, rtol=0)

    release(page, "tau", str(taus[-1]))
    page.wait_for_timeout(500)
    np.testing.assert_allclose(np.array(heatmaps(page)), np.array(live), atol=1e-12, rtol=0)
    differ = pixels_differing(live_shot, page.locator(".st-key-pair").screenshot())
    assert differ < 0.01, f"{differ:.1%} of the pixels differ from Plotly's drawing"   # cell edges at most


@pytest.mark.timeout(300)
def test_gamma_drag_re_solves_the_transport_plan_live(server, page):
    """Transport plans: the plan follows gamma (Sinkhorn re-solved in the browser, warm-started frame to frame); the
    plan drawn at the released gamma meets the marginals and equals wviz.ot.sinkhorn's to twice the solvers'
    tolerance, its picture and colour bar match Plotly's drawing of Python's figure, and the link reproduces it."""
    from wviz import ot
    from wviz.views import transport_plans as tv

    page.goto(f"{server}/transport_plans")
    wait_until_idle(page)
    drag(page, "gamma", 0.2, seconds=1.0, release=False)   # from 0.01 max C down to about 1e-3.5 max C
    gammas = [f["values"]["gamma"] for f in live_frames(page)]
    assert len(set(gammas)) >= 10, gammas
    page.wait_for_timeout(300)
    [live], live_shot = heatmaps(page, "plan"), page.locator(".st-key-plan").screenshot()
    t = tv.at_defaults()(gammas[-1])
    a, b = (np.asarray(x) for x in (t.problem.a, t.problem.b))
    P = np.array(live)
    assert float(ot.marginal_error(a, b, P.sum(1), P.sum(0))) <= tv.TOL
    np.testing.assert_allclose(P, t.plan.numpy(), atol=2 * tv.TOL, rtol=0)

    release(page, "gamma", str(gammas[-1]))
    page.wait_for_timeout(500)
    np.testing.assert_allclose(np.array(heatmaps(page, "plan")[0]), t.plan.numpy(), atol=1e-12, rtol=0)
    differ = pixels_differing(live_shot, page.locator(".st-key-plan").screenshot())
    assert differ < 0.01, f"{differ:.1%} of the pixels differ from Plotly's drawing"

    shared = opened_link(page)
    np.testing.assert_allclose(np.array(heatmaps(shared, "plan")[0]), t.plan.numpy(), atol=1e-12, rtol=0)


@pytest.mark.timeout(300)
def test_rho_drag_re_solves_the_semi_relaxed_plan_live(server, page):
    """Transport plans at a finite rho: the semi-relaxed plan, its column sums (the markers over b) and the title
    follow rho; at the rho drawn they equal wviz's (plan and sums to twice the solvers' tolerance, the title
    exactly), and the link reproduces the released rho."""
    from wviz.figures import transport_plans as figs
    from wviz.views import transport_plans as tv

    page.goto(f"{server}/transport_plans?rho=1")
    wait_until_idle(page)
    drag(page, "rho", 0.25, seconds=1.0, release=False)   # from rho = 1 max C down to about 0.02 max C
    rhos = [f["values"]["rho"] for f in live_frames(page)]
    assert len(set(rhos)) >= 10, rhos
    page.wait_for_timeout(300)
    t = tv.transport(tv.at_defaults()(0.01).problem, "sinkhorn", 0.01, rho_rel=rhos[-1])   # the page's gamma
    chart = "() => document.querySelector('.st-key-plan .js-plotly-plot')"
    sums = page.evaluate(f"() => ({chart})().calcdata.find(cd => cd[0].trace.type === 'scatter').map(di => di.y)")
    title = page.evaluate(f"() => ({chart})().querySelector('.g-gtitle text').textContent")
    [live] = heatmaps(page, "plan")
    np.testing.assert_allclose(np.array(live), t.plan.numpy(), atol=2 * tv.TOL, rtol=0)
    np.testing.assert_allclose(np.array(sums), t.columns.numpy(), atol=2 * tv.TOL, rtol=0)
    assert title == figs.plan_title("sinkhorn", rhos[-1]) == figs.main_figure(t).layout.title.text

    release(page, "rho", f"{rhos[-1]:g}")
    shared = opened_link(page)
    np.testing.assert_allclose(np.array(heatmaps(shared, "plan")[0]), t.plan.numpy(), atol=1e-12, rtol=0)


@pytest.mark.timeout(300)
def test_alpha_drag_moves_the_fenchel_estimates_live(server, page):
    """Fenchel dual: the exact h (12), attention (18) and the second-order (15) follow alpha (the dual re-solved by
    Newton in the browser); at the alpha drawn each point and the title equal wviz's (to 1e-9), and the link
    reproduces the released alpha."""
    from wviz.figures import fenchel_dual as figs
    from wviz.views import fenchel_dual as fv

    page.goto(f"{server}/fenchel_dual")
    wait_until_idle(page)
    drag(page, "alpha", 0.2, seconds=1.0, release=False)   # from alpha = 1 down to about 0.04: 17 grid values
    alphas = [f["values"]["alpha"] for f in live_frames(page)]
    assert len(set(alphas)) >= 10, alphas
    page.wait_for_timeout(300)
    chart = "document.querySelector('.st-key-estimates .js-plotly-plot')"
    points = page.evaluate(f"names => names.map(n => {chart}.calcdata.find(cd => cd[0].trace.name === n)"
                           ".map(di => [di.x, di.y])[0])", list(figs.ESTIMATES))
    s = fv.at_defaults()(alphas[-1])
    np.testing.assert_allclose(np.array(points), np.stack([s.est.h[0], s.est.h1[0], s.est.h2[0]]), atol=1e-9,
                               rtol=0)
    assert page.evaluate(f"() => {chart}.querySelector('.g-gtitle text').textContent") == \
        figs.main_figure(s).layout.title.text
    assert np.abs(np.array(points[0]) - fv.at_defaults()(1.0).est.h[0].numpy()).max() > 0.1   # h moved

    release(page, "alpha", f"{alphas[-1]:g}")
    shared = opened_link(page)
    shared.wait_for_function(f"() => {chart}?.layout")
    title = shared.evaluate(f"() => {chart}.layout.title.text")
    assert re.sub("<[^>]+>", "", title) == figs.main_figure(s).layout.title.text   # the page draws titles bold


@pytest.mark.timeout(300)
def test_arrow_keys_move_the_bars_as_the_slider_moves(server, page):
    """The keyboard, as on any slider: each arrow press is drawn at once from the slider's own value, and the bars
    then hold wviz's weights at the value the slider shows."""
    page.goto(f"{server}/attention_transport?tau=3.16")
    wait_until_idle(page)
    page.locator(".st-key-tau input[type=range]").focus()
    watched(page, "tau")
    for _ in range(4):   # each press's rerun finished before the next (tests/e2e/sharing.py)
        page.keyboard.press("ArrowRight")
        wait_until_idle(page)
    shown = float(page.locator(".st-key-tau input[type=range]").get_attribute("aria-valuetext"))
    taus = [f["values"]["tau"] for f in live_frames(page)]
    assert taus[-1] == shown and len(set(taus)) >= 4, (taus, shown)
    np.testing.assert_allclose(np.array(drawn(page)["weights"]), python_weights(shown), atol=1e-9, rtol=0)
