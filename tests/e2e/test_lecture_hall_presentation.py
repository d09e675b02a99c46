"""The lecture hall in presentation mode, in a real browser, on every page: the toolbar hidden, no figure text and
no sidebar control under 18 px, nothing cut at any width, and with the sidebar opened at a projector (1024x768) its
controls whole and the page's main slider in view with the figure it moves. (A file of its own, apart from
test_lecture_hall.py, so that the two run on two workers: each takes minutes.)"""
import pytest

from tests.e2e.harness import page_paths
from tests.e2e.lecture import SMALL_INPUTS, SMALL_TEXT, cut_at_every_width, no_exception, open_page, refitted
from wviz.export import TEXT_PX
from wviz.registry import BY_STEM


# The open sidebar's texts (labels, options, slider values and ends, captions, links; the navigation above its
# controls left out) that a projector loses, in one walk over them:
# - small: drawn under the given size (px), fields included. Equations (whose indices are smaller by design), icons
#   and the tables' cells (a canvas, zoomed with the main column's) are not counted.
# - cut: clipped or ellipsised in its box (a label, an option, a multiselect's chosen tag, a selectbox's chosen
#   value), or running past the sidebar's right edge. A field's typed text scrolls inside it, and is not counted; a
#   selectbox's value is a field too (Streamlit's combobox, an <input>), but the hall reads it: drawn, it counts when
#   wider than its field ("all-MiniLM-L6-v2 (encoder, 22.7..." at 1024x768).
SIDEBAR_LOST = """(px) => {
  const side = document.querySelector('[data-testid="stSidebarUserContent"]');
  const edge = side.getBoundingClientRect().right;
  const drawn = e => e.getBoundingClientRect().width > 1 && !e.closest('.katex, details:not([open])');
  const texts = new Set();
  const walker = document.createTreeWalker(side, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode())
    if (n.textContent.trim() && drawn(n.parentElement)) texts.add(n.parentElement);
  const fields = Array.from(side.querySelectorAll('input:not([type=hidden]):not([type=range]), textarea'))
    .filter(drawn);
  const small = [...new Set([...texts, ...fields])]
    .filter(e => !e.closest('[data-testid="stIconMaterial"], [data-testid="stDataFrame"]'))
    .map(e => [e.value || e.textContent.trim().slice(0, 30), parseFloat(getComputedStyle(e).fontSize)])
    .filter(([, size]) => size < px);
  const chosen = fields.filter(e => e.matches('input[role="combobox"]') && getComputedStyle(e).opacity !== '0'
                                    && e.scrollWidth > e.clientWidth + 1);
  const cut = [...texts].filter(e => (e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflowX !== 'visible')
                                     || e.getBoundingClientRect().right > edge + 1)
    .map(e => e.textContent.trim().slice(0, 40)).concat(chosen.map(e => `chosen: ${e.value.slice(0, 40)}`));
  return {small, cut};
}"""


# The options of an open selectbox or multiselect (drawn in a list of their own, outside the sidebar) under the given
# size (px), cut in their row or past the window's right edge. They were Streamlit's 14 px in presentation mode.
OPTIONS_WRONG = """(px) => Array.from(document.querySelectorAll('[role="option"]')).flatMap(o => {
  const texts = [o, ...o.querySelectorAll('*')].filter(e => e.textContent.trim());
  const small = texts.some(e => parseFloat(getComputedStyle(e).fontSize) < px);
  const cut = texts.some(e => e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflowX !== 'visible')
    || o.getBoundingClientRect().right > innerWidth + 1;
  return small || cut ? [`${o.textContent.trim().slice(0, 40)}${small ? ' small' : ''}${cut ? ' cut' : ''}`] : [];
})"""


# The page's main slider (its key) scrolled to the top of the window (under Streamlit's header), as a lecturer who
# moves it sees it: what of its main figure (its key) is out of view then. Seen: the slider whole, and the figure's
# top half (its first 300 px when taller than 600).
BESIDE_ITS_FIGURE = """([key, figure]) => {
  const slider = document.querySelector(`.st-key-${key}`);
  const chart = document.querySelector(`.st-key-${figure} .js-plotly-plot`);
  const header = document.querySelector('[data-testid="stHeader"]').getBoundingClientRect().bottom;
  slider.style.scrollMarginTop = `${header}px`;   // just under Streamlit's header, which covers the main column's top
  slider.scrollIntoView({block: 'start'});
  const s = slider.getBoundingClientRect(), c = chart.getBoundingClientRect();
  const seen = Math.min(c.height / 2, 300);
  return s.top > header - 1 && s.bottom <= innerHeight && c.top > -1 && c.top + seen <= innerHeight ? [] :
    [`slider at ${Math.round(s.top)}-${Math.round(s.bottom)} px, figure from ${Math.round(c.top)} px `
     + `(its first ${Math.round(seen)} px needed) in a window ${innerHeight} px high`];
}"""


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
    assert the_open_sidebar_at_a_projector(page, path) == {}
    assert cut_at_every_width(page) == {}


def the_open_sidebar_at_a_projector(page, path) -> dict:
    """At 1024x768 with the sidebar opened, as the lecturer does to move a control: the sidebar's text under TEXT_PX
    and what of it is cut (SIDEBAR_LOST), whether the page's main slider and the top of the figure it
    drives are in view together (BESIDE_ITS_FIGURE), and what of the first selectbox's options, opened, is small or
    cut (OPTIONS_WRONG). The sidebar is closed again after. Its labels and values were 14 px, and the slider sat
    among them below the navigation, its figure below the main column's fold."""
    page.set_viewport_size({"width": 1024, "height": 768})
    page.locator('[data-testid="stExpandSidebarButton"]').click()
    page.wait_for_function("() => document.querySelector('[data-testid=\"stSidebar\"]').offsetWidth >= 250")
    page.wait_for_timeout(400)   # the sidebar's slide
    refitted(page)
    p = BY_STEM[path]
    found = {**page.evaluate(SIDEBAR_LOST, TEXT_PX), "apart": page.evaluate(BESIDE_ITS_FIGURE, [p.slider, p.figure]),
             "options": open_options(page)}
    page.evaluate("() => document.querySelector('[data-testid=\"stSidebarCollapseButton\"] button').click()")
    page.wait_for_function("() => document.querySelector('[data-testid=\"stSidebar\"]').offsetWidth === 0")
    return {k: v for k, v in found.items() if v}


def open_options(page) -> list[str]:
    """OPTIONS_WRONG of the sidebar's first selectbox or multiselect (none: []), its list opened from the keyboard as
    a click on the field does, then closed without a choice."""
    fields = page.locator('[data-testid="stSidebarUserContent"] :is([data-testid="stSelectbox"], '
                          '[data-testid="stMultiSelect"]) input')
    if not fields.count():
        return []
    fields.first.click()
    page.keyboard.press("ArrowDown")
    page.wait_for_selector('[role="option"]', timeout=10_000)
    wrong = page.evaluate(OPTIONS_WRONG, TEXT_PX)
    page.keyboard.press("Escape")
    return wrong
