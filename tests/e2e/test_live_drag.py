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

    page.mouse.up()
    page.wait_for_url(re.compile(rf"tau={re.escape(str(tau))}(&|$)"), timeout=30_000)
    wait_until_idle(page)
    released = drawn(page)   # Python's figure at the released value, drawn by Plotly itself
    np.testing.assert_allclose(np.array(released["weights"]), python_weights(tau), atol=1e-12, rtol=0)
    np.testing.assert_allclose(np.array(live["heights"]), np.array(released["heights"]), atol=1.0)

    shared = page.context.new_page()   # the link after the drag reproduces the released value's figure
    shared.goto(page.url)
    wait_until_idle(shared)
    np.testing.assert_allclose(np.array(drawn(shared)["weights"]), python_weights(tau), atol=1e-12, rtol=0)


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

    page.mouse.up()
    page.wait_for_url(re.compile(rf"tau={re.escape(str(taus[-1]))}(&|$)"), timeout=30_000)
    wait_until_idle(page)
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

    page.mouse.up()
    page.wait_for_url(re.compile(rf"gamma={re.escape(str(gammas[-1]))}(&|$)"), timeout=30_000)
    wait_until_idle(page)
    page.wait_for_timeout(500)
    np.testing.assert_allclose(np.array(heatmaps(page, "plan")[0]), t.plan.numpy(), atol=1e-12, rtol=0)
    differ = pixels_differing(live_shot, page.locator(".st-key-plan").screenshot())
    assert differ < 0.01, f"{differ:.1%} of the pixels differ from Plotly's drawing"

    shared = page.context.new_page()
    shared.goto(page.url)
    wait_until_idle(shared)
    np.testing.assert_allclose(np.array(heatmaps(shared, "plan")[0]), t.plan.numpy(), atol=1e-12, rtol=0)


@pytest.mark.timeout(300)
def test_arrow_keys_move_the_bars_as_the_slider_moves(server, page):
    """The keyboard, as on any slider: each arrow press is drawn at once from the slider's own value, and the bars
    then hold wviz's weights at the value the slider shows."""
    page.goto(f"{server}/attention_transport?tau=3.16")
    wait_until_idle(page)
    page.locator(".st-key-tau input[type=range]").focus()
    watched(page, "tau")
    for _ in range(4):   # each press's rerun finished before the next (tests/e2e/test_sharing_and_export.py)
        page.keyboard.press("ArrowRight")
        wait_until_idle(page)
    shown = float(page.locator(".st-key-tau input[type=range]").get_attribute("aria-valuetext"))
    taus = [f["values"]["tau"] for f in live_frames(page)]
    assert taus[-1] == shown and len(set(taus)) >= 4, (taus, shown)
    np.testing.assert_allclose(np.array(drawn(page)["weights"]), python_weights(shown), atol=1e-9, rtol=0)
