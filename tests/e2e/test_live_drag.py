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


def opened_link(page, other_page):
    """The page's link opened in another browser (conftest's other_page), once its run is done."""
    other_page.goto(page.url)
    wait_until_idle(other_page)
    return other_page


def drawn(page) -> dict:
    page.wait_for_function("() => document.querySelector('.st-key-bars .js-plotly-plot')?.calcdata")
    return page.evaluate(DRAWN)


def python_weights(tau: float) -> np.ndarray:
    w = av.at_defaults()(tau)
    return np.stack([p.numpy() for p in w.p.values()])


@pytest.mark.timeout(300)
def test_tau_drag_redraws_the_bars_live_and_equal_to_python(server, page, other_page):
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

    shared = opened_link(page, other_page)   # the link after the drag reproduces the released value's figure
    np.testing.assert_allclose(np.array(drawn(shared)["weights"]), python_weights(tau), atol=1e-12, rtol=0)


def semi_weights(rho: float) -> np.ndarray:
    """wviz's bars at the page's defaults with softmax and semi-relaxed OT chosen, at tau = 1 and ``rho``."""
    s = av.scores_from_points(av.DEFAULT_QUERY, av.DEFAULT_KEYS)
    inputs = av.Inputs(s, av.prior_from_table(av.prior_table(len(s))), ("softmax", av.SEMI), av.DEFAULT_ALPHA,
                       av.queries_from_points(s, av.DEFAULT_KEYS), rho)
    return np.stack([p.numpy() for p in av.weights(inputs, 1.0).p.values()])


@pytest.mark.timeout(300)
def test_rho_drag_re_solves_semi_relaxed_ot_live(server, page, other_page):
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
    shared = opened_link(page, other_page)
    np.testing.assert_allclose(np.array(drawn(shared)["weights"]), want, atol=1e-12, rtol=0)


@pytest.mark.timeout(300)
def test_tau_drag_redraws_the_many_queries_heatmap_live(server, page):
    """Attention as transport, Many queries at 64 x 64 under sparsemax: the heatmap follows tau, each row wviz's
    sparsemax of that query's scores at the tau drawn (to 1e-9, from the same float32 scores in float64), and the
    title names that tau."""
    from wviz import attention

    page.goto(f"{server}/attention_transport?view=Many+queries&many_n=64&many_m=64&many_mech=sparsemax")
    wait_until_idle(page)
    drag(page, "tau", 0.75, seconds=1.0, release=False)   # from tau = 1 up to about 5
    taus = [f["values"]["tau"] for f in live_frames(page) if f["chart"] == "many"]
    assert len(set(taus)) >= 10, taus
    page.wait_for_timeout(300)
    (live,) = heatmaps(page, "many")
    s = av.dot_scores(*av.random_queries_keys(64, 64, 16, 0)).double()
    np.testing.assert_allclose(np.array(live), attention.sparsemax(s, taus[-1]).numpy(), atol=1e-9, rtol=0)
    title = page.evaluate("() => document.querySelector('.st-key-many .g-gtitle text').textContent")
    assert title == f"sparsemax, tau = {taus[-1]:.3g}"
    assert np.abs(np.array(live) - attention.sparsemax(s, 1.0).numpy()).max() > 0.05   # the weights moved
    release(page, "tau", str(taus[-1]))
    np.testing.assert_allclose(np.array(heatmaps(page, "many")[0]), np.array(live), atol=1e-6, rtol=0)   # float32


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
def test_tau_drag_redraws_the_simplex_landscape_and_its_argmins_live(server, page):
    """Attention as transport, the objective on the simplex (entmax): the landscape and both argmins follow tau;
    each cell equals wviz's objective at the tau drawn (to 1e-9, outside cells blank), the closed-form star and the
    interior-point circle sit at wviz's argmins, and the picture matches Plotly's drawing of Python's figure after
    the release (the reversed colour scale, the blank cells)."""
    from wviz.figures import attention_transport as figs

    page.goto(f"{server}/attention_transport?view=Objective+on+the+simplex+%28m+%3D+3%29&land_mech=entmax")
    wait_until_idle(page)
    drag(page, "tau", 0.45, seconds=1.0, release=False)   # from tau = 1 (0.6 of the track) down to about 0.18
    taus = [f["values"]["tau"] for f in live_frames(page) if f["chart"] == "land"]
    assert len(set(taus)) >= 10, taus
    page.wait_for_timeout(300)
    (live,) = heatmaps(page, "land")
    land = av.landscape("entmax", av.scores_from_points(av.DEFAULT_QUERY, av.DEFAULT_KEYS), taus[-1])
    live = np.array([[np.nan if v is None else v for v in row] for row in live], dtype=float)
    want = land.values.numpy()
    assert (np.isnan(live) == np.isnan(want)).all()
    np.testing.assert_allclose(np.nan_to_num(live), np.nan_to_num(want), atol=1e-9, rtol=0)
    chart = "document.querySelector('.st-key-land .js-plotly-plot')"
    points = page.evaluate(f"names => names.map(n => {chart}.calcdata.find(cd => cd[0].trace.name === n)"
                           ".map(di => [di.x, di.y])[0])", list(figs.ARGMINS))
    for drawn_xy, p in zip(points, (land.closed_form, land.numerical)):
        np.testing.assert_allclose(drawn_xy, [float(v) for v in land.xy(p)], atol=1e-9, rtol=0)
    live_shot = page.locator(".st-key-land").screenshot()

    release(page, "tau", str(taus[-1]))
    page.wait_for_timeout(500)
    differ = pixels_differing(live_shot, page.locator(".st-key-land").screenshot())
    assert differ < 0.02, f"{differ:.1%} of the pixels differ from Plotly's drawing"   # cell edges at most


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


def gaussian_scene(**row):
    """wviz's scene at the page's defaults (query t1) with the query's row changed as given (by COLUMNS name)."""
    from wviz.views import gaussian_w2 as gv

    tokens = gv.tokens_from_table(gv.DEFAULT, False)
    values = dict(zip(gv.COLUMNS, gv.query_row(tokens, 0))) | row
    return gv.scene(gv.with_query(tokens, 0, [values[c] for c in gv.COLUMNS]), 0)


@pytest.mark.timeout(300)
def test_gaussian_covariance_drag_moves_the_heatmaps_and_the_ellipse_live(server, page, other_page):
    """Gaussian W2 attention: dragging the query's sigma_x redraws both heatmaps (W2^2 by the 2 x 2 closed form in
    the browser) and the query's 1- and 2-sigma ellipses while it moves, the ellipses' axis widened as they grow;
    at the sigma_x drawn, the heatmaps equal wviz's to 1e-9 and each ellipse's points equal wviz.gaussian.ellipse's,
    its line through all of them; the link reproduces the released sigma_x."""
    from wviz.views import gaussian_w2 as gv

    page.goto(f"{server}/gaussian_w2")
    wait_until_idle(page)
    drag(page, "sx_0", 0.95, seconds=1.0, release=False)   # t1's sigma_x from 0.5 to 1.9
    frames = [f for f in live_frames(page) if f["chart"] == "pair"]
    sigmas = [f["values"]["sigma_x"] for f in frames]
    assert len(set(sigmas)) >= 10, sigmas
    assert {f["values"]["sigma_x"] for f in live_frames(page) if f["chart"] == "ellipses"} == set(sigmas)
    page.wait_for_timeout(300)
    s = gaussian_scene(sigma_x=sigmas[-1])
    a = gv.attend(s, 1.0)
    live = np.array(heatmaps(page))
    np.testing.assert_allclose(live, np.stack([a.w2.numpy(), a.dot.numpy()]), atol=1e-9, rtol=0)
    assert np.abs(live[0] - gv.attend(gaussian_scene(), 1.0).w2.numpy()).max() > 0.05   # W2 attention moved

    chart = "document.querySelector('.st-key-ellipses .js-plotly-plot')"
    drawn_ellipses = page.evaluate(f"() => [0, 1].map(i => {chart}.calcdata[i].map(di => [di.x, di.y]))")
    for n_sigma, points in zip((1, 2), drawn_ellipses):
        np.testing.assert_allclose(np.array(points), s.ellipses[n_sigma][0].numpy(), atol=1e-9, rtol=0)
    line = page.evaluate(f"() => {chart}.querySelector('.scatterlayer .trace path.js-line').getAttribute('d')")
    assert line.count("L") == gv.ELLIPSE_POINTS - 1
    x_range = page.evaluate(f"() => {chart}._fullLayout.xaxis.range")
    assert min(x_range) <= float(s.ellipses[2][0][:, 0].min()) and max(x_range) >= float(s.ellipses[2][0][:, 0].max())

    release(page, "sx_0", f"{sigmas[-1]:g}")
    np.testing.assert_allclose(np.array(heatmaps(page)), live, atol=1e-12, rtol=0)
    shared = opened_link(page, other_page)
    np.testing.assert_allclose(np.array(heatmaps(shared)), live, atol=1e-12, rtol=0)


@pytest.mark.timeout(300)
def test_gamma_drag_re_solves_the_transport_plan_live(server, page, other_page):
    """Transport plans: the plan follows gamma (Sinkhorn re-solved in the browser, warm-started frame to frame); the
    plan drawn at the released gamma meets the marginals and equals wviz.ot.sinkhorn's to twice the solvers'
    tolerance, its picture and colour bar match Plotly's drawing of Python's figure, and the link reproduces it."""
    from wviz import ot
    from wviz.views import transport_plans as tv

    page.goto(f"{server}/transport_plans")
    wait_until_idle(page)
    drag(page, tv.Keys.GAMMA_REL, 0.2, seconds=1.0, release=False)   # from 0.01 max C to about 1e-3.5 max C
    gammas = [f["values"]["gamma"] for f in live_frames(page)]
    assert len(set(gammas)) >= 10, gammas
    page.wait_for_timeout(300)
    [live], live_shot = heatmaps(page, "plan"), page.locator(".st-key-plan").screenshot()
    t = tv.at_defaults()(gammas[-1])
    a, b = (np.asarray(x) for x in (t.problem.a, t.problem.b))
    P = np.array(live)
    assert float(ot.marginal_error(a, b, P.sum(1), P.sum(0))) <= tv.TOL
    np.testing.assert_allclose(P, t.plan.numpy(), atol=2 * tv.TOL, rtol=0)

    release(page, tv.Keys.GAMMA_REL, str(gammas[-1]))
    page.wait_for_timeout(500)
    np.testing.assert_allclose(np.array(heatmaps(page, "plan")[0]), t.plan.numpy(), atol=1e-12, rtol=0)
    differ = pixels_differing(live_shot, page.locator(".st-key-plan").screenshot())
    assert differ < 0.01, f"{differ:.1%} of the pixels differ from Plotly's drawing"

    shared = opened_link(page, other_page)
    np.testing.assert_allclose(np.array(heatmaps(shared, "plan")[0]), t.plan.numpy(), atol=1e-12, rtol=0)


@pytest.mark.timeout(300)
def test_rho_drag_re_solves_the_semi_relaxed_plan_live(server, page, other_page):
    """Transport plans at a finite rho: the semi-relaxed plan, its column sums (the markers over b) and the title
    follow rho; at the rho drawn they equal wviz's (plan and sums to twice the solvers' tolerance, the title
    exactly), and the link reproduces the released rho. It opens an old link's ?rho=1 (the parameter is rho_rel
    since rho is absolute on every other page): the page moves it to rho_rel."""
    from wviz.figures import transport_plans as figs
    from wviz.views import transport_plans as tv

    page.goto(f"{server}/transport_plans?rho=1")
    wait_until_idle(page)
    assert "rho_rel=1" in page.url and "?rho=" not in page.url and "&rho=" not in page.url, page.url
    drag(page, tv.Keys.RHO_REL, 0.25, seconds=1.0, release=False)   # from rho = 1 max C down to about 0.02 max C
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

    release(page, tv.Keys.RHO_REL, f"{rhos[-1]:g}")
    shared = opened_link(page, other_page)
    np.testing.assert_allclose(np.array(heatmaps(shared, "plan")[0]), t.plan.numpy(), atol=1e-12, rtol=0)


@pytest.mark.timeout(300)
def test_alpha_drag_moves_the_fenchel_estimates_live(server, page, other_page):
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
    shared = opened_link(page, other_page)
    shared.wait_for_function(f"() => {chart}?.layout")
    title = shared.evaluate(f"() => {chart}.layout.title.text")
    assert re.sub("<[^>]+>", "", title) == figs.main_figure(s).layout.title.text   # the page draws titles bold


@pytest.mark.timeout(300)
def test_tau_drag_moves_the_particle_flow_live(server, page, other_page):
    """Particles: the flow follows tau (every layer recomputed in the browser): at the tau drawn, the last layer's
    particles and every trail equal wviz.measure's flow to 1e-9, each particle's trail one piece of the line, and
    the title names that tau; the link reproduces the released tau."""
    from wviz.figures import particles as figs
    from wviz.views import particles as pv

    page.goto(f"{server}/particles")
    wait_until_idle(page)
    drag(page, "tau", 0.1, seconds=1.0, release=False)   # from tau = 0.3 down to about 0.025
    taus = [f["values"]["tau"] for f in live_frames(page)]
    assert len(set(taus)) >= 10, taus
    page.wait_for_timeout(300)
    chart = "document.querySelector('.st-key-animation .js-plotly-plot')"
    trails, particles = page.evaluate(f"() => [0, 1].map(i => {chart}.calcdata[i].map(di => [di.x, di.y]))")
    f = pv.at_defaults()(taus[-1])
    want = f.trajectory.numpy()
    np.testing.assert_allclose(np.array(particles), want[-1], atol=1e-9, rtol=0)
    n, layers = want.shape[1], want.shape[0] - 1
    trails = np.array(trails, dtype=float).reshape(n, layers + 2, 2)   # each trail, then its gap (NaN)
    np.testing.assert_allclose(trails[:, :-1], want.transpose(1, 0, 2), atol=1e-9, rtol=0)
    assert np.isnan(trails[:, -1]).all()
    line = page.evaluate(f"() => {chart}.querySelector('.scatterlayer .trace path.js-line').getAttribute('d')")
    assert line.count("M") == n and line.count("L") == n * layers
    assert page.evaluate(f"() => {chart}.querySelector('.g-gtitle text').textContent") == \
        figs.main_figure(f).layout.title.text
    assert np.abs(np.array(particles) - pv.at_defaults()(0.3).trajectory[-1].numpy()).max() > 0.05   # they moved

    release(page, "tau", f"{taus[-1]:g}")
    shared = opened_link(page, other_page)
    shared.wait_for_function(f"() => {chart}?.calcdata")
    np.testing.assert_allclose(np.array(shared.evaluate(f"() => {chart}.calcdata[1].map(di => [di.x, di.y])")),
                               want[-1], atol=1e-12, rtol=0)


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
