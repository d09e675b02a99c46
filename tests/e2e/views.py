"""What the lecture hall's tests of every view share (test_lecture_hall_views.py at a projector in presentation mode,
test_lecture_hall_views_narrow.py at half a laptop screen in the plain style): the view selectors read off a page,
each other option chosen by a click as a user does, and what is drawn wrong, cut, pushed (a margin that Plotly grew
after a first draw, which draws the figure again: PUSHED) or too small in each view. The views are read off the page
(its selectors' options), so a new view is checked without a change here."""
from tests.e2e.harness import ROOT, SETTLED, page_paths, wait_until_idle
from tests.e2e.lecture import NO_SCALE, SMALL_INPUTS, SMALL_TEXT, cut_at, open_expanders, open_page
from wviz.export import TEXT_PX

PROJECTOR, HALF_LAPTOP = (1024, 768), (800, 1000)

# Every view selector of the main column (the only segmented controls the app draws: ui.widgets.view_selector), by
# its widget key, with its options' labels and whether each is the one chosen.
SELECTORS = """() => Array.from(document.querySelectorAll('[data-testid="stMain"] [data-testid="stButtonGroup"]'))
  .map(g => [Array.from(g.closest('[class*="st-key-"]').classList).find(c => c.startsWith('st-key-')).slice(7),
             Array.from(g.querySelectorAll('button[aria-checked]'))
               .map(b => [b.innerText.trim(), b.getAttribute('aria-checked') === 'true'])])"""

# The page has run again since ``since`` (performance.now(); the run state that harness.wait_until_idle watches,
# called by open_page) and has not run for ``quiet`` ms: a view's click has been answered.
RAN_SINCE = """([since, quiet]) => { const app = document.querySelector('[data-testid="stApp"]');
  return app.wvizChanged > since && app.getAttribute('data-test-script-state') === 'notRunning'
    && performance.now() - app.wvizChanged >= quiet; }"""


def selectors(page) -> list[tuple[str, list[str], int]]:
    """(key, option labels, index of the option chosen) of each view selector, once the page's background work is
    done: a section waiting for it (the inspector's dataset panel on the server's first visit) draws its selector
    only then."""
    page.wait_for_function(SETTLED, timeout=180_000, polling=500)
    wait_until_idle(page, quiet_ms=500)
    return [(key, [label for label, _ in options], [chosen for _, chosen in options].index(True))
            for key, options in page.evaluate(SELECTORS)]


def choose(page, key: str, index: int) -> None:
    """Click option ``index`` of the view selector keyed ``key`` and wait until the page's run it sends has ended."""
    since = page.evaluate("() => performance.now()")
    option = page.locator(f'.st-key-{key} [data-testid="stButtonGroup"] button[aria-checked]').nth(index)
    option.click()
    page.wait_for_function(RAN_SINCE, arg=[since, 300], timeout=60_000, polling=100)
    assert option.get_attribute("aria-checked") == "true"


def every_other_view(page, found: list):
    """Choose each option of each selector but the one chosen at opening, in turn, yielding its label; a selector is
    set back to its opening option before the next one's views, so that what is found is the view's own."""
    for n, (key, labels, opening) in enumerate(found):
        for index, label in enumerate(labels):
            if index != opening:
                choose(page, key, index)
                open_expanders(page)
                yield label
        if n + 1 < len(found):
            choose(page, key, opening)


def drawn_wrong(page, errors: list[str]) -> list[str]:
    """The exceptions drawn on the page or raised in the browser since the last call, and the heatmaps without a
    colour scale."""
    found = [f"exception: {e[:200]}" for e in page.locator('[data-testid="stException"]').all_inner_texts()]
    found += [f"page error: {e[:200]}" for e in errors] + [f"no colour scale: {m}" for m in page.evaluate(NO_SCALE)]
    errors.clear()
    return found


def opened(page, url: str, size: tuple[int, int]) -> list:
    page.set_viewport_size({"width": size[0], "height": size[1]})
    open_page(page, url)
    page.wait_for_selector(".js-plotly-plot", timeout=60_000)
    return selectors(page)


# The pages that draw secondary views (ui.views): Heads solve the dual draws none
WITH_VIEWS = [path for path in page_paths()[1:] if "ui.views(" in (ROOT / "pages" / f"{path}.py").read_text()]


def every_view_found_wrong(page, url: str, size: tuple[int, int], readable: bool) -> dict[str, list[str]]:
    """Open ``url`` at ``size`` and choose each of its other views in turn: per view, the exceptions, the heatmaps
    without a colour scale, what is cut or pushed and, if ``readable``, the chart texts and control values under
    TEXT_PX. Every finding is collected, so that a test fails once, with all of them."""
    errors: list[str] = []
    found: dict[str, list[str]] = {}
    page.on("pageerror", lambda e: errors.append(str(e)))
    views = opened(page, url, size)
    assert any(len(labels) > 1 for _, labels, _ in views), f"{url} draws no view selector"
    for label in every_other_view(page, views):
        found[label] = drawn_wrong(page, errors) + cut_at(page, size)
        if readable:
            found[label] += [f"{text} ({px:g} px)" for text, px in
                             page.evaluate(SMALL_TEXT, TEXT_PX) + page.evaluate(SMALL_INPUTS, TEXT_PX)]
    return {label: what for label, what in found.items() if what}
