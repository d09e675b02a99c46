"""The lecture hall, in a real browser: every page at a desktop, a projector (1024x768) and half a laptop screen
(800x1000) shows its metrics and display equations whole, every heatmap with a colour scale, every figure's labels
within the margins it gives them; presentation mode hides the toolbar and draws no figure text under 18 px (guided
links, Reset, example files and animations: test_lecture_hall_links.py), and stays on for the session however a
page is reached."""
from urllib.parse import parse_qs, urlsplit

import plotly.graph_objects as go
import pytest

from tests.e2e.harness import page_paths, wait_until_idle
from tests.e2e.lecture import PRESENTATION_LOST, navigate, no_exception, open_page
from wviz.export import TEXT_PX
from wviz.figures.common import DIVERGING_SCALE, PICTURE_SCALE
from wviz.registry import PAGES


VIEWPORTS = ((1400, 1000), (1024, 768), (800, 1000))


# Every metric (label and value) and display equation whose content is wider than its box (cut, scrolled or
# ellipsised), every metric, equation, table and chart that runs past the right edge of the main column, every
# chart title or other chart text past its chart's right edge, every two text boxes of a chart that overlap, and
# every two titles of a chart (its own, its axes', its panels') that overlap.
CUT = """() => {
  const column = document.querySelector('[data-testid="stMain"] .stMainBlockContainer').getBoundingClientRect();
  const cut = [];
  // A closed expander's content is not drawn (and keeps the width it had when last laid out): not measured.
  const past = (el, what) => !el.closest('details:not([open])') && el.getBoundingClientRect().right > column.right + 1
    && cut.push(`${what} past the column: ${el.innerText.slice(0, 80) || el.getAttribute('data-testid')}`);
  document.querySelectorAll('[data-testid="stMetric"]').forEach(m => {
    const inner = [m, ...m.querySelectorAll('*')].find(e => e.scrollWidth > e.clientWidth + 1);
    if (inner) cut.push(`metric cut: ${m.innerText.slice(0, 80)}`);
    past(m, 'metric');
  });
  // An equation's box shrinks to its content (KaTeX's italic overhang adds a pixel or two); its element has the
  // width the column gives it.
  // Tables and charts stay within the column (a table's grid scrolls inside its box; its box must not).
  document.querySelectorAll('[data-testid="stMain"] :is([data-testid="stDataFrame"], [data-testid="stTable"], '
                            + '.js-plotly-plot, .vega-embed)').forEach(t => past(t, 'table or chart'));
  document.querySelectorAll('[data-testid="stMain"] .katex-display').forEach(d => {
    const room = d.closest('[data-testid="stMarkdown"]') || d;
    if (d.scrollWidth > room.clientWidth + 3) cut.push(`equation cut: ${d.innerText.slice(0, 80)}`);
    past(room, 'equation');
  });
  // A chart's title, subtitle, legend and colour bar texts stay inside the chart (Plotly wraps none of them).
  document.querySelectorAll('[data-testid="stMain"] .js-plotly-plot').forEach(gd => {
    const right = gd.getBoundingClientRect().right;
    gd.querySelectorAll('.infolayer text').forEach(t => {
      if (t.textContent.trim() && t.getBoundingClientRect().right > right + 1)
        cut.push(`chart text past its chart: ${t.textContent.trim().slice(0, 60)}`);
    });
  });
  // The bordered text boxes of a chart (a diagram's boxes) must not overlap one another.
  document.querySelectorAll('[data-testid="stMain"] .js-plotly-plot').forEach(gd => {
    const boxes = Array.from(gd.querySelectorAll('g.annotation'))
      .filter(a => a.textContent.trim() && parseFloat(getComputedStyle(a.querySelector('rect.bg')).strokeWidth) > 0)
      .map(a => [a.textContent.trim(), a.querySelector('rect.bg').getBoundingClientRect()]);
    boxes.forEach(([t1, r1], i) => boxes.slice(i + 1).forEach(([t2, r2]) => {
      if (r1.left < r2.right && r2.left < r1.right && r1.top < r2.bottom && r2.top < r1.bottom)
        cut.push(`boxes overlap: ${t1.slice(0, 30)} / ${t2.slice(0, 30)}`);
    }));
  });
  // Nor its titles: at 18 px an axis title runs into the next row's panel title when the rows' gap is too small.
  document.querySelectorAll('[data-testid="stMain"] .js-plotly-plot').forEach(gd => {
    const groups = ['g[class^="g-x"][class$="title"]', 'g[class^="g-y"][class$="title"]', 'g.g-gtitle', 'g.annotation'];
    const titles = Array.from(gd.querySelectorAll(groups.map(g => `.infolayer ${g} text`).join(', ')))
      .filter(t => t.textContent.trim() && t.getBoundingClientRect().width > 0)
      .map(t => [t.textContent.trim(), t.getBoundingClientRect()]);
    titles.forEach(([t1, r1], i) => titles.slice(i + 1).forEach(([t2, r2]) => {
      if (r1.left < r2.right - 1 && r2.left < r1.right - 1 && r1.top < r2.bottom - 1 && r2.top < r1.bottom - 1)
        cut.push(`chart titles overlap: ${t1.slice(0, 30)} / ${t2.slice(0, 30)}`);
    }));
  });
  return cut;
}"""


# Every chart whose labels, legend or colour bar need more room than its margins give: Plotly pushes its margins
# and draws the whole figure again, one draw more on every first visit (BENCHMARKS.md, "First load").
PUSHED = """() => Array.from(document.querySelectorAll('[data-testid="stMain"] .js-plotly-plot')).flatMap(gd => {
  const given = gd._fullLayout.margin, drawn = gd._fullLayout._size;
  return ['l', 'r', 't', 'b'].filter(side => drawn[side] > given[side] + 1).map(side =>
    `margin ${side} pushed from ${given[side]} to ${Math.round(drawn[side])} px: ${(gd.layout.title || {}).text}`);
})"""


# The heatmap traces of each chart that show no colour scale (their own colour bar or their colour axis's).
NO_SCALE = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).flatMap(gd =>
  (gd._fullData || []).filter(t => ['heatmap', 'contour'].includes(t.type) && t.visible === true)
    .filter(t => !(t.coloraxis ? gd._fullLayout[t.coloraxis].showscale : t.showscale)
                 || gd.querySelectorAll('g.colorbar').length === 0)
    .map(t => `${gd.layout.title && gd.layout.title.text}: ${t.name || t.type}`))"""


# Every non-empty text of every chart drawn under the given size (px).
SMALL_TEXT = """(px) => Array.from(document.querySelectorAll('.js-plotly-plot .main-svg text'))
  .filter(t => t.textContent.trim() && t.getBoundingClientRect().width > 0)
  .map(t => [t.textContent.trim().slice(0, 30), parseFloat(getComputedStyle(t).fontSize)])
  .filter(([, size]) => size < px)"""


# Every visible value a control of the main column shows (typed text, a chosen option, a slider's value and ends)
# under the given size (px).
SMALL_INPUTS = """(px) => Array.from(document.querySelectorAll(['input:not([type=hidden])', 'textarea',
    '[data-baseweb="select"] > div', '[data-testid="stSliderThumbValue"]', '[data-testid^="stSliderTickBar"]']
    .map(s => `[data-testid="stMain"] ${s}`).join(', ')))
  .filter(e => e.getBoundingClientRect().width > 0)
  .map(e => [e.value || e.textContent.trim().slice(0, 30), parseFloat(getComputedStyle(e).fontSize)])
  .filter(([, size]) => size < px)"""


# Whether every Plotly chart drawn in the main column has been laid out again at its box's width: Streamlit redraws
# a chart a frame or a few after its column changes width (Plotly does not reflow by itself); the rest (equations,
# metrics, tables) is laid out by the browser at once.
REFITTED = """() => Array.from(document.querySelectorAll('[data-testid="stMain"] .js-plotly-plot'))
  .filter(gd => !gd.closest('details:not([open])') && gd.getBoundingClientRect().width > 0)
  .every(gd => gd._fullLayout && Math.abs(gd._fullLayout.width - gd.getBoundingClientRect().width) <= 1)"""


def refitted(page) -> None:
    """Wait until every chart is drawn at its new width (REFITTED), and two frames more for Plotly's second draw when
    its labels push a margin."""
    page.wait_for_function(REFITTED, timeout=15_000, polling=100)
    page.wait_for_timeout(250)


def cut_at_every_width(page) -> dict:
    """What is cut (CUT) or pushed (PUSHED) at each width, the closed expanders opened."""
    page.evaluate("() => document.querySelectorAll('[data-testid=\"stMain\"] details:not([open]) > summary')"
                  ".forEach(s => s.click())")   # what a closed expander holds is measured open
    wait_until_idle(page, quiet_ms=500)   # an expander that reruns the page on opening draws its content then
    cut = {}
    for width, height in VIEWPORTS:
        page.set_viewport_size({"width": width, "height": height})
        refitted(page)
        if found := page.evaluate(CUT) + page.evaluate(PUSHED):
            cut[f"{width}x{height}"] = found
    return cut


@pytest.mark.parametrize("path", page_paths()[1:])
def test_nothing_is_cut_at_any_width_and_every_heatmap_has_a_colour_scale(server, page, path):
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    open_page(page, f"{server}/{path}")
    page.wait_for_selector(".js-plotly-plot", timeout=60_000)
    no_exception(page)
    assert not errors, errors
    assert page.evaluate(NO_SCALE) == []
    assert cut_at_every_width(page) == {}


@pytest.mark.parametrize("path", page_paths()[1:])
def test_presentation_mode_is_readable_from_the_back_of_the_hall(server, page, path):
    open_page(page, f"{server}/{path}?presentation=true")
    page.wait_for_selector(".js-plotly-plot", timeout=60_000)
    no_exception(page)
    assert page.evaluate("() => document.querySelector('[data-testid=\"stSidebar\"]').offsetWidth") == 0
    assert page.locator('[data-testid="stExpandSidebarButton"]').is_visible()  # the lecturer can open it
    assert not page.locator('[data-testid="stMainMenu"]').is_visible()
    assert page.evaluate(SMALL_TEXT, TEXT_PX) == []
    assert page.evaluate(SMALL_INPUTS, TEXT_PX) == []
    assert cut_at_every_width(page) == {}


# A heatmap's colours in presentation mode: Cividis, or a grey picture's or a signed map's own (as the browser holds
# them: Python's)
CIVIDIS, PICTURE, DIVERGING = ([colour for _, colour in go.Heatmap(colorscale=s).colorscale]
                               for s in ("Cividis", PICTURE_SCALE, DIVERGING_SCALE))


def presentation_lost(page, charts: bool = True) -> tuple[list[str], int]:
    """What of presentation mode the page drawn has lost (PRESENTATION_LOST; a heatmap in another scale than
    Cividis), once its charts have drawn their text; and how many heatmaps it has."""
    if charts:
        page.wait_for_function("() => document.querySelector('.js-plotly-plot .main-svg text')", timeout=60_000,
                               polling=100)
    found = page.evaluate(PRESENTATION_LOST, TEXT_PX)
    lost = found["lost"] + [f"{title}: {scale[0]}..{scale[-1]}" for title, scale in found["scales"]
                            if scale not in (CIVIDIS, PICTURE, DIVERGING)]
    return lost, len(found["scales"])


def test_presentation_mode_stays_on_for_the_session_on_every_page_however_reached(server, page):
    """From /?presentation=true, every page reached by the sidebar's navigation (each from the page before, the first
    from Home) and by Home's page list (whose links carry no query) keeps presentation mode: the URL and the page's
    links (guided experiments, Reset) say so, no chart text is under TEXT_PX and every heatmap is in Cividis (the Real
    transformer's and the inspector's on their colour axes). Home's links used to lose it, and the first navigation
    from a page drew the next page's figures in the plain style; Wasserstein self-attention's guided link
    ?representation=empirical lost it ('presentation=' was read in 'representation=')."""
    from wviz.views.wasserstein_self_attention import TRY_THIS

    (empirical,) = [t for t in TRY_THIS if "representation" in t.params]
    open_page(page, f"{server}/?presentation=true")
    lost, heatmaps, empirical_links = {}, {}, []
    for home_list in (False, True):
        for p in PAGES:
            if home_list:
                navigate(page, "")   # Home, by the sidebar
                lost[("Home", p.stem)] = presentation_lost(page, charts=False)[0]
            navigate(page, p.stem, home_list)
            lost[(p.stem, "Home's list" if home_list else "sidebar")], heatmaps[p.stem] = presentation_lost(page)
            if p.stem == "wasserstein_self_attention":
                empirical_links.append(page.locator("a", has_text=empirical.label).get_attribute("href"))
    assert {k: v for k, v in lost.items() if v} == {}
    assert heatmaps["real_transformer"] and heatmaps["uncertainty_inspector"]   # the colour check saw their maps
    assert [parse_qs(urlsplit(href).query) for href in empirical_links] == 2 * [
        {**parse_qs(urlsplit(empirical.query()).query), "presentation": ["true"]}]
