"""The lecture hall, in a real browser: every page at a desktop, a projector (1024x768) and half a laptop screen
(800x1000) shows its metrics and display equations whole, every heatmap with a colour scale, every figure's labels
within the margins it gives them; presentation mode collapses the sidebar, hides the toolbar and draws no figure text
under 18 px; guided links and Reset work."""
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import expect

from tests.e2e.harness import page_paths, wait_until_idle
from wviz.export import TEXT_PX

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


def open_page(page, url):
    page.goto(url)
    wait_until_idle(page)
    page.wait_for_timeout(500)


def no_exception(page):
    exceptions = page.locator('[data-testid="stException"]')
    assert exceptions.count() == 0, exceptions.first.inner_text()


def cut_at_every_width(page) -> dict:
    """What is cut (CUT) or pushed (PUSHED) at each width, the closed expanders opened."""
    page.evaluate("() => document.querySelectorAll('[data-testid=\"stMain\"] details:not([open]) > summary')"
                  ".forEach(s => s.click())")   # what a closed expander holds is measured open
    page.wait_for_timeout(500)
    cut = {}
    for width, height in VIEWPORTS:
        page.set_viewport_size({"width": width, "height": height})
        page.wait_for_timeout(1500)  # Plotly and the equations refit to the new width
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


def test_a_guided_link_opens_its_state_and_reset_returns_to_the_defaults(server, page):
    from wviz.views.attention_transport import TRY_THIS

    first = TRY_THIS[0]
    open_page(page, f"{server}/attention_transport?alpha=1.8")
    page.get_by_text("Try this").click()
    page.get_by_role("link", name=first.label).click()
    open_page(page, page.url)
    no_exception(page)
    assert parse_qs(urlsplit(page.url).query)["tau"] == [f"{first.params['tau']:g}"], page.url
    assert "alpha" not in page.url  # every other setting at its default
    # the slider's chunk is drawn a moment after the run: expect waits for it
    expect(page.locator(".st-key-tau")).to_contain_text(f"{first.params['tau']:g}")
    assert page.get_by_text(first.watch[:40]).first.is_visible()   # in sight above the closed expander
    page.get_by_role("link", name="Reset to defaults").click()
    open_page(page, page.url)
    assert urlsplit(page.url).query == "", page.url
    expect(page.locator(".st-key-tau")).to_contain_text("1")


def presenting_with_the_sidebar_collapsed(page) -> bool:
    """Presentation mode on (its CSS in the page, the URL saying so) and the sidebar collapsed."""
    css = page.evaluate("() => Array.from(document.querySelectorAll('style'))"
                        ".some(s => s.textContent.includes('stToolbarActions'))")
    sidebar = page.evaluate("() => document.querySelector('[data-testid=\"stSidebar\"]').offsetWidth")
    return css and sidebar == 0 and parse_qs(urlsplit(page.url).query).get("presentation") == ["true"]


def open_sidebar_and_go_to(page, title):
    page.locator('[data-testid="stExpandSidebarButton"]').click()
    page.wait_for_timeout(500)
    page.locator('[data-testid="stSidebarNav"] a', has_text=title).first.click()
    page.wait_for_timeout(500)   # a page of the app's navigation: no new load, the URL changes in place
    wait_until_idle(page)
    page.wait_for_timeout(500)


@pytest.mark.parametrize("start", ["link", "toggle"])
def test_presentation_mode_stays_on_through_links_navigation_and_reset(server, page, start):
    """However it was turned on, presentation mode survives a Try link, the sidebar's navigation (Home included) and
    Reset, and each new page opens with the sidebar collapsed (the lecturer opened it to navigate)."""
    from wviz.views.attention_transport import TRY_THIS

    if start == "link":
        open_page(page, f"{server}/attention_transport?presentation=true")
    else:
        open_page(page, f"{server}/attention_transport")
        page.get_by_text("Present, share, export").click()
        page.get_by_text("Presentation mode").click()
        open_page(page, page.url)
    assert presenting_with_the_sidebar_collapsed(page)
    page.get_by_text("Try this").click()
    page.get_by_role("link", name=TRY_THIS[0].label).click()
    open_page(page, page.url)
    assert presenting_with_the_sidebar_collapsed(page), page.url
    assert parse_qs(urlsplit(page.url).query)["tau"] == [f"{TRY_THIS[0].params['tau']:g}"]
    for title in ("Home", "Transport plans"):
        open_sidebar_and_go_to(page, title)
        assert presenting_with_the_sidebar_collapsed(page), (title, page.url)
    page.locator('[data-testid="stExpandSidebarButton"]').click()
    page.get_by_role("link", name="Reset to defaults").click()
    open_page(page, page.url)
    assert presenting_with_the_sidebar_collapsed(page), page.url
    assert set(parse_qs(urlsplit(page.url).query)) == {"presentation"}


# (page and the query that shows its uploader, the example's download button, the uploader's label)
EXAMPLES = [
    ("transport_plans", "Example points CSV", "Upload points (CSV)"),
    ("transport_plans?problem=cost+matrix", "Example cost matrix CSV", "Upload cost matrix"),
    ("particles?preset=uploaded+CSV", "Example particles CSV", "Particles (CSV)"),
    ("wasserstein_self_attention?sequence=uploaded+CSV", "Example sequence (CSV)", "Sequence (CSV)"),
    ("uncertainty_inspector?ckpt=upload", "Example checkpoint", "Checkpoint file"),
    ("uncertainty_inspector?img_src=upload", "Example image", "Image (PNG/JPG)"),
]


def download(page, button) -> tuple[str, bytes]:
    with page.expect_download(timeout=60_000) as info:
        button.click()
    return info.value.suggested_filename, open(info.value.path(), "rb").read()


@pytest.mark.parametrize("path, example, uploader", EXAMPLES, ids=[f"{p.split('?')[0]}-{e}" for p, e, _ in EXAMPLES])
def test_every_example_file_goes_back_through_its_own_uploader(server, page, path, example, uploader):
    open_page(page, f"{server}/{path}")
    name, data = download(page, page.get_by_role("button", name=example))
    box = page.locator('[data-testid="stFileUploader"]').filter(has_text=uploader)
    box.locator('input[type="file"]').set_input_files(files=[{"name": name, "mimeType": "application/octet-stream",
                                                              "buffer": data}])
    page.wait_for_timeout(1000)
    wait_until_idle(page)
    no_exception(page)
    errors = page.locator('[data-testid="stAlertContentError"]')
    assert errors.count() == 0, errors.first.inner_text()
    assert page.get_by_text("was not used").count() == 0
    page.wait_for_selector(".js-plotly-plot", timeout=60_000)


def test_the_animations_decode_as_gif_and_mp4_with_many_frames(server, page):
    import tempfile

    import imageio.v3 as iio
    import imageio_ffmpeg

    open_page(page, f"{server}/particles")
    page.get_by_role("button", name="Animation for slides").click()
    for fmt in ("GIF", "MP4"):
        page.locator('[data-testid="stPopoverBody"]').get_by_text(fmt, exact=True).click()
        wait_until_idle(page)
        page.get_by_role("button", name=f"Make {fmt}").click()
        wait_until_idle(page)
        name, data = download(page, page.get_by_role("button", name=f"Download {fmt}"))
        assert name.endswith(f".{fmt.lower()}")
        if fmt == "GIF":
            assert iio.imread(data, extension=".gif", index=None).shape[0] > 1
        else:
            with tempfile.NamedTemporaryFile(suffix=".mp4") as f:
                f.write(data)
                f.flush()
                reader = imageio_ffmpeg.read_frames(f.name)
                next(reader)
                assert sum(1 for _ in reader) > 1
