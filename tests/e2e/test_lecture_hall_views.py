"""The lecture hall, in a real browser, on every view a page offers besides its opening one (test_lecture_hall.py
checks that one): each option of each view selector (ui.views: a segmented control; the inspector has two), chosen
by a click as a user does, draws no exception, every heatmap with a colour scale and nothing cut (CUT) at a
projector in presentation mode (1024x768), where no chart text or control value is under TEXT_PX, and at half a
laptop screen (800x1000, the narrowest column) in the plain style.

Not checked here: margins that Plotly pushes (PUSHED), a redraw more on a view's first draw that nobody sees cut;
the opening views are held to it (BENCHMARKS.md, "First load"), the others not yet (docs/ARCHITECTURE.md).

The views are read off the page (its selectors' options), so a new view is checked without a change here. One test
per page, both modes in it: a page is opened twice (a session is in presentation mode or not from its first run)
and each view is drawn once per mode. Every finding is collected and the test fails once, with all of them."""
import pytest

from tests.e2e.harness import ROOT, page_paths, wait_until_idle
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

# No section of the main column waits for background work (ui.wait_for's progress bar)
SETTLED = """() => !document.querySelector('[data-testid="stMain"] [data-testid="stProgress"]')"""


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


@pytest.mark.parametrize("path", WITH_VIEWS)
def test_every_other_view_is_whole_scaled_and_readable_in_the_hall(server, page, path):
    errors, found = [], {}
    page.on("pageerror", lambda e: errors.append(str(e)))

    def note(where: str, what: list[str]) -> None:
        if what:
            found[where] = what

    views = opened(page, f"{server}/{path}?presentation=true", PROJECTOR)
    assert any(len(labels) > 1 for _, labels, _ in views), f"{path} draws no view selector"
    for label in every_other_view(page, views):
        at = f"presentation, {label}"
        note(at, drawn_wrong(page, errors))
        note(f"{at}, {PROJECTOR[0]}x{PROJECTOR[1]}", cut_at(page, PROJECTOR, pushed=False))
        note(f"{at}, small text", [f"{text} ({size:g} px)" for text, size in
                                   page.evaluate(SMALL_TEXT, TEXT_PX) + page.evaluate(SMALL_INPUTS, TEXT_PX)])

    assert opened(page, f"{server}/{path}", HALF_LAPTOP) == views   # the same views in either mode
    for label in every_other_view(page, views):
        note(f"plain, {label}", drawn_wrong(page, errors))
        note(f"plain, {label}, {HALF_LAPTOP[0]}x{HALF_LAPTOP[1]}", cut_at(page, HALF_LAPTOP, pushed=False))
    assert found == {}, "\n".join(f"{where}: {what}" for where, what in found.items())
