"""In a real browser: a slider redraws the chart, a copied link reproduces the page, every export is a valid file."""
import io
import json
import re
import zipfile
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.e2e.harness import SLIDERS, page_paths, plot_data, wait_until_idle
from tests.file_checks import check

PAGE = "gaussian_w2"


def open_page(page, url):
    page.goto(url)
    # First the chart, then the end of the run: on a busy machine a cold page's run can start seconds after the
    # page loads, and take a minute, so an idle page is not yet a drawn one.
    page.wait_for_selector(".js-plotly-plot", timeout=120_000)
    wait_until_idle(page)
    page.wait_for_timeout(500)


def move_slider(page, key, presses=3):
    """Move the sidebar slider bound to URL key ``key`` by keyboard, as a user would, each press's rerun finished
    before the next.

    Not in quick succession: Streamlit 1.67's frontend now and then writes the last of quick presses into the URL
    and never sends its rerun (the browser's websocket frames recorded: 2 reruns sent for 3 presses, the URL a
    step ahead of the page 5 s later; 2 of about 140 moves, on a loaded machine). The server never hears of it, so
    the page and its share link stay on the previous value while the address bar moved on."""
    thumb = page.locator(f".st-key-{key}").get_by_role("slider")
    thumb.focus()
    for _ in range(presses):
        thumb.press("ArrowRight")
        wait_until_idle(page)


def server_messages(page) -> list[bytes]:
    """A list that fills with the server's websocket messages to ``page`` (protobuf bytes) as they arrive."""
    received = []
    page.on("websocket", lambda ws: ws.on("framereceived", lambda frame: received.append(
        frame if isinstance(frame, bytes) else frame.encode())))
    return received


@pytest.mark.parametrize("path", page_paths()[1:])
def test_a_slider_redraws_the_chart_and_the_link_reproduces_it(server, browser, path):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    open_page(page, f"{server}/{path}")
    before = plot_data(page)
    move_slider(page, SLIDERS[path])
    after = plot_data(page)
    assert after != before
    assert f"{SLIDERS[path]}=" in page.url, page.url
    link = shown_link(page)
    assert link.split("?")[1] == page.url.split("?")[1], (link, page.url)

    fresh = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()  # another user's browser
    open_page(fresh, link)
    # The same figures; the fresh page may show more: a background panel (the inspector's dataset figures) that
    # finished between the two loads is drawn after the others, once per server.
    reproduced = plot_data(fresh)
    assert reproduced[:len(after)] == after and len(reproduced) >= len(after)
    fresh.context.close()
    context.close()


def test_a_move_sends_the_new_link_once(server, page):
    """A fragment's run draws the share link once, at its end (state.link_at_end), not also after a figure."""
    received = server_messages(page)   # the link is in them as text
    open_page(page, f"{server}/attention_transport")
    received.clear()
    move_slider(page, "tau", presses=2)   # 1 -> 1.1 -> 1.21 (24 steps per decade)
    assert b"".join(received).count(b"/attention_transport?tau=1.21") == 1
    assert shown_link(page).endswith("/attention_transport?tau=1.21")


def shown_link(page) -> str:
    """The text of the sidebar's share link (opening its expander and its popover if they are closed)."""
    code = page.locator('[data-testid="stPopoverBody"] [data-testid="stCode"]')
    if not code.is_visible():
        share = page.locator('[data-testid="stSidebar"]').get_by_role("button", name="Share link")
        if not share.is_visible():
            page.get_by_text("Present, share, export").click()
        share.click()
    return code.inner_text().strip()


def test_a_table_edit_and_a_second_slider_travel_in_the_link(server, browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    open_page(page, f"{server}/{PAGE}")
    move_slider(page, "sx_0")
    page.locator('[data-testid="stDataFrame"]').first.click(position={"x": 300, "y": 90})  # token t2, column x
    page.keyboard.press("Enter")  # opens the cell editor
    editor = page.locator("input.gdg-input")
    editor.fill("0.7")
    editor.press("Enter")
    wait_until_idle(page)
    page.wait_for_timeout(1000)
    assert "sx_0=" in page.url and "tokens=" in page.url, page.url
    # The link shown is the URL after the edit (the editor writes the URL after the link was first drawn).
    link = shown_link(page)
    assert link.split("?")[1] == page.url.split("?")[1], (link, page.url)
    rows = json.loads(parse_qs(urlsplit(link).query)["tokens"][0])
    assert rows[1][:2] == ["t2", 0.7], rows
    after = plot_data(page)
    fresh = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    open_page(fresh, link)
    assert plot_data(fresh) == after
    fresh.context.close()
    context.close()


def test_an_edit_in_a_lazy_expander_holds_when_it_closes_and_opens(server, browser):
    """Transport plans draws its points' editor only while its expander is open (ui.table_from_url): an edit made
    there stays in the link and in the plan after the expander closes, and the editor shows it when it opens again."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    expander = "Edit the points and their masses"
    open_page(page, f"{server}/transport_plans")
    assert page.locator('[data-testid="stDataFrame"]').count() == 0          # closed: no editor drawn

    def toggle():
        page.get_by_text(expander).click()
        page.wait_for_timeout(500)
        wait_until_idle(page)

    def source_bar():
        return page.evaluate("() => { const t = document.querySelector('.js-plotly-plot').data"
                             ".find(t => t.name === 'a (source)'); return JSON.stringify(t.x || t.y) }")

    toggle()
    grid = page.locator('[data-testid="stDataFrame"]').first
    box = grid.bounding_box()
    grid.click(position={"x": box["width"] * 0.9, "y": 52})                  # row 1 (source 1), column mass
    page.keyboard.press("Enter")
    editor = page.locator("input.gdg-input")
    editor.fill("3")
    editor.press("Enter")
    wait_until_idle(page)
    page.wait_for_timeout(1000)
    rows = json.loads(parse_qs(urlsplit(page.url).query)["points_line_40_30_0"][0])
    assert rows[0][0] == "source" and rows[0][3] == 3, rows[0]
    edited = source_bar()
    toggle()                                                                  # closed
    assert page.locator('[data-testid="stDataFrame"]').count() == 0
    assert json.loads(parse_qs(urlsplit(page.url).query)["points_line_40_30_0"][0]) == rows
    assert source_bar() == edited
    toggle()                                                                  # open again: the editor holds the edit
    page.wait_for_timeout(1000)
    assert json.loads(parse_qs(urlsplit(page.url).query)["points_line_40_30_0"][0]) == rows
    assert source_bar() == edited
    context.close()


def download(page, button) -> bytes:
    # a lecture bundle renders every figure of the page twice through kaleido's chromium: seconds alone, but past
    # 60 s once (the attention page) in a full suite on 2 loaded cores; the tests check the content, not the time
    with page.expect_download(timeout=180_000) as info:
        button.click()
    return open(info.value.path(), "rb").read()


FORMATS = ("png", "svg", "pdf", "html", "csv", "json")


@pytest.mark.parametrize("path", page_paths()[1:])
def test_every_export_button_of_the_first_figure_gives_a_valid_file(server, page, path):
    """Every format, on every page: the file parses, and its data is the figure the browser shows."""
    open_page(page, f"{server}/{path}")
    shown = plot_data(page)[0]
    menu = page.locator('[data-testid="stMain"] [data-testid="stPopover"]').first   # the sidebar has its own
    panel = page.locator('[data-testid="stPopoverBody"]')
    for fmt in FORMATS:
        if not panel.is_visible():
            menu.locator("button").first.click()
        parsed = check(fmt, download(page, panel.get_by_role("button", name=fmt.upper(), exact=True)))
        if fmt == "json":
            assert [t["type"] for t in parsed["traces"]] == [t["type"] for t in shown]
        if fmt == "csv" and "type" in parsed:  # a diagram without traces exports its annotations
            assert set(parsed["type"]) <= ({t["type"] for t in shown} or {"annotation"})
        elif fmt == "csv":  # heatmaps only: their grids, one block of rows per trace
            assert {t["type"] for t in shown} <= {"heatmap", "contour"} and len(parsed) > 0


def test_the_lecture_bundle_has_every_figure_of_the_page(server, page):
    open_page(page, f"{server}/{PAGE}")
    page.get_by_text("Present, share, export").click()
    bundle = zipfile.ZipFile(io.BytesIO(download(page, page.get_by_role("button", name="Download lecture bundle"))))
    names = bundle.namelist()
    assert "README.md" in names and "params.json" in names
    assert "W_2^2" in bundle.read("README.md").decode()
    figures = [n[:-4] for n in names if n.endswith(".svg")]
    # the figures drawn (the first view) and the one of the view not chosen (the sweep), built on the click
    assert sorted(figures) == ["ellipses", "pair", "parts", "query_bars", "side_left", "side_right", "sweep"]
    assert len(plot_data(page)) == 4
    for name in figures:
        check("svg", bundle.read(f"{name}.svg"))
        check("png", bundle.read(f"{name}.png"))
        check("csv", bundle.read(f"{name}.csv"))


def test_a_view_chosen_in_the_browser_travels_in_the_link(server, browser):
    """A secondary view (ui.view_selector) is chosen by a click, written to the URL, and a copied link opens it."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    open_page(page, f"{server}/wasserstein_self_attention")
    titles = ("() => Array.from(document.querySelectorAll('.js-plotly-plot'))"
              ".map(gd => gd.layout.title.text.replace(/<\\/?b>/g, ''))")  # Streamlit bolds titles
    assert any(t.startswith("Wasserstein self-attention") for t in page.evaluate(titles))   # the pipeline first
    page.locator(".st-key-view").get_by_text("Outputs along the sequence", exact=True).click()
    wait_until_idle(page)
    shown = page.evaluate(titles)
    assert "Input and outputs along the sequence" in shown, shown
    assert not any(t.startswith("Wasserstein self-attention") for t in shown), shown
    assert parse_qs(urlsplit(page.url).query)["view"] == ["Outputs along the sequence"], page.url
    link = shown_link(page)
    assert link.split("?")[1] == page.url.split("?")[1], (link, page.url)
    fresh = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    open_page(fresh, link)
    assert fresh.evaluate(titles) == shown
    fresh.context.close()
    context.close()


def test_after_a_slider_move_the_bundle_has_the_new_values_once(server, page):
    """A slider move reruns only the page's fragment (ui.fragment): the lecture bundle must then hold that run's
    equations, each once, and the views not drawn (built on the click)."""
    open_page(page, f"{server}/attention_transport")
    move_slider(page, "tau", presses=2)   # 1 -> 1.1 -> 1.21 (24 steps per decade)
    assert parse_qs(urlsplit(page.url).query)["tau"] == ["1.21"], page.url
    page.get_by_text("Present, share, export").click()
    bundle = zipfile.ZipFile(io.BytesIO(download(page, page.get_by_role("button", name="Download lecture bundle"))))
    readme = bundle.read("README.md").decode()
    assert readme.count("p^\\star_{\\text{") == 3 and readme.count("\\tau = 1.21") == 1, readme
    assert not re.search(r"\\tau = 1(?![.\d])", readme) and readme.count("\\arg\\min") == 1  # old tau gone
    drawn = sorted(n[:-4] for n in bundle.namelist() if n.endswith(".svg"))
    assert drawn == ["bars", "columns", "land", "many", "rho_sweep", "side_left", "side_right", "sweep"]
    assert json.loads(bundle.read("params.json"))["tau"] == 1.21


def test_a_view_the_slider_does_not_change_is_not_sent_again_by_its_moves(server, page):
    """Side by side has its own temperatures (View.live False): a tau move sends the bars again, not its two
    figures, which stay on the page; choosing a view that tau changes replaces them, and choosing them again
    brings them back (ui.runs.below)."""
    received = server_messages(page)   # a figure's JSON is in them as text
    open_page(page, f"{server}/attention_transport?view=Side+by+side")
    before = plot_data(page)
    received.clear()
    move_slider(page, "tau", presses=2)
    after = plot_data(page)
    assert after[0] != before[0] and after[1:] == before[1:]   # the bars, then Left and Right
    sent = b"".join(received)
    assert b"weight p_j" in sent and b"Left: tau" not in sent and b"Right: tau" not in sent
    titles = ("() => Array.from(document.querySelectorAll('.js-plotly-plot'))"
              ".map(gd => ((gd.layout.title || {}).text || '').replace(/<\\/?b>/g, '').split(':')[0])")
    for choice, shown in (("Objective on the simplex (m = 3)", ["", "softmax"]),
                          ("Side by side", ["", "Left", "Right"])):
        page.locator(".st-key-view").get_by_text(choice, exact=True).click()
        wait_until_idle(page)
        assert page.evaluate(titles) == shown
