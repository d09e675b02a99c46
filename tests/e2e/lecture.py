"""What the lecture hall's tests share: a page opened and drawn, no exception on it, a page reached by the app's own
navigation, what of presentation mode a page has lost, and what is cut, pushed, unscaled or too small on a page
drawn (test_lecture_hall.py: each page's opening view; views.py: its other views)."""
from urllib.parse import urlsplit

from tests.e2e.harness import wait_until_idle


def open_page(page, url):
    page.goto(url)
    wait_until_idle(page)
    page.wait_for_timeout(500)


def no_exception(page):
    exceptions = page.locator('[data-testid="stException"]')
    assert exceptions.count() == 0, exceptions.first.inner_text()


# Where presentation mode, once on, is lost on the page drawn: a URL without presentation=true, a link of the page
# (a guided experiment, Reset to defaults) that would load it without, chart text under the given size (px), and the
# scales of the heatmaps, by chart title (the Cividis check is the caller's: the colours in Python's terms).
PRESENTATION_LOST = """(px) => {
  const lost = [];
  if (new URL(location.href).searchParams.get('presentation') !== 'true') lost.push(`URL: ${location.href}`);
  document.querySelectorAll('a[href^="?"]').forEach(a => {
    if (new URL(a.href).searchParams.get('presentation') !== 'true') lost.push(`link: ${a.textContent.trim()}`);
  });
  const texts = Array.from(document.querySelectorAll('.js-plotly-plot .main-svg text'))
    .filter(t => t.textContent.trim() && t.getBoundingClientRect().width > 0);
  texts.filter(t => parseFloat(getComputedStyle(t).fontSize) < px)
    .forEach(t => lost.push(`${getComputedStyle(t).fontSize} text: ${t.textContent.trim().slice(0, 30)}`));
  const scales = Array.from(document.querySelectorAll('.js-plotly-plot')).flatMap(gd => (gd._fullData || [])
    .filter(t => ['heatmap', 'contour'].includes(t.type) && t.visible === true)
    .map(t => [(gd.layout.title && gd.layout.title.text) || t.name || t.type,
               (t.coloraxis ? gd._fullLayout[t.coloraxis] : t).colorscale.map(([, colour]) => colour)]));
  return {lost, texts: texts.length, scales};
}"""


def nav_link(page, path: str, home_list: bool = False):
    """The link to the page at ``path`` ('' for Home) in the sidebar's navigation, or in Home's page list (its
    page links, which carry no query)."""
    if home_list:
        return page.locator(f'[data-testid="stMain"] a[data-testid="stPageLink-NavLink"][href="{path}"]')
    return page.locator(f'[data-testid="stSidebarNavLink"][href$="/{path}"]')


# Notes the title of the page shown now and, from now, when the page's run state (stApp's data-test-script-state)
# last changed. NEW_PAGE_DRAWN: another page's title is shown, its run has ended and no other has started for
# ``quiet`` ms. (Not a count of runs: a short run's two changes of state can reach the page in one render.)
_LEAVING = """() => {
  const app = document.querySelector('[data-testid="stApp"]');
  app.wvizLeft = (document.querySelector('[data-testid="stMain"] h1') || {}).textContent;
  app.wvizSince = performance.now();
  if (!app.wvizStateWatch) {
    app.wvizStateWatch = new MutationObserver(() => { app.wvizSince = performance.now(); });
    app.wvizStateWatch.observe(app, {attributes: true, attributeFilter: ['data-test-script-state']});
  }
}"""
_NEW_PAGE_DRAWN = """quiet => {
  const app = document.querySelector('[data-testid="stApp"]');
  const title = document.querySelector('[data-testid="stMain"] h1');
  return title && title.textContent !== app.wvizLeft && app.getAttribute('data-test-script-state') === 'notRunning'
    && performance.now() - app.wvizSince >= quiet; }"""


def navigate(page, path: str, home_list: bool = False, quiet_ms: int = 300) -> None:
    """Go to the page at ``path`` ('' for Home) in the session, as the app's own links do (no new load): by Home's page
    list, or by the sidebar's navigation, whose link is clicked without opening the sidebar (its slide costs a
    second a page; opening it is test_lecture_hall_links.py's); wait until the new page is drawn (another title than
    the page left, its run ended)."""
    page.evaluate(_LEAVING)
    link = nav_link(page, path, home_list)
    if home_list:
        link.click()
    else:
        link.dispatch_event("click")   # what the link's own handler does on a click: the app's page change
    page.wait_for_url(lambda url: urlsplit(url).path.strip("/") == path)
    page.wait_for_function(_NEW_PAGE_DRAWN, arg=quiet_ms, timeout=120_000, polling=100)


# Every metric (label and value) and display equation whose content is wider than its box (cut, scrolled or
# ellipsised), every display equation fitted to its column below 75 % of its size, every metric, equation, table
# and chart that runs past the right edge of the main column, every
# chart title or other chart text past its chart's right edge, every two text boxes of a chart that overlap, and
# every two titles of a chart (its own, its axes', its panels') that overlap.
CUT = """() => {
  const SHRUNK = 75;
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
  // ... and one fitted to its column (wviz.ui.style) keeps at least SHRUNK of its size: below it, it is too small to
  // read; such an equation goes over lines instead.
  document.querySelectorAll('[data-testid="stMain"] .katex-display').forEach(d => {
    const room = d.closest('[data-testid="stMarkdown"]') || d;
    if (d.scrollWidth > room.clientWidth + 3) cut.push(`equation cut: ${d.innerText.slice(0, 80)}`);
    const katex = d.querySelector(':scope > .katex'), size = katex ? katex.style.fontSize : '';
    if (size && parseFloat(size) < SHRUNK && !d.closest('details:not([open])'))
      cut.push(`equation shrunk to ${size}: ${(d.querySelector('annotation') || d).textContent.slice(0, 80)}`);
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
    '[data-testid="stSliderThumbValue"]', '[data-testid^="stSliderTickBar"]']
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


# The widths that matter: a desktop, a projector (1024x768) and half a laptop screen (800x1000).
VIEWPORTS = ((1400, 1000), (1024, 768), (800, 1000))


def refitted(page) -> None:
    """Wait until every chart is drawn at its new width (REFITTED), and two frames more for Plotly's second draw when
    its labels push a margin."""
    page.wait_for_function(REFITTED, timeout=15_000, polling=100)
    page.wait_for_timeout(250)


def open_expanders(page, always_wait: bool = False) -> None:
    """Open the main column's closed expanders: what one holds is measured open. Waits for the page to be idle
    again (an expander that reruns the page on opening draws its content then) when one was opened, or always."""
    opened = page.evaluate("() => Array.from(document.querySelectorAll("
                           "'[data-testid=\"stMain\"] details:not([open]) > summary')).map(s => s.click()).length")
    if opened or always_wait:
        wait_until_idle(page, quiet_ms=500)


def cut_at(page, size: tuple[int, int], pushed: bool = True) -> list[str]:
    """What is cut (CUT), and unless ``pushed`` is False what is pushed (PUSHED), with the viewport at ``size``
    (width, height), once every chart is drawn at its width."""
    width, height = size
    page.set_viewport_size({"width": width, "height": height})
    refitted(page)
    return page.evaluate(CUT) + (page.evaluate(PUSHED) if pushed else [])


def cut_at_every_width(page) -> dict:
    """What is cut (CUT) or pushed (PUSHED) at each width, the closed expanders opened."""
    open_expanders(page, always_wait=True)
    return {f"{w}x{h}": found for w, h in VIEWPORTS if (found := cut_at(page, (w, h)))}
