"""What the lecture hall's tests share: a page opened and drawn, no exception on it, a page reached by the app's own
navigation, and what of presentation mode a page has lost."""
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
