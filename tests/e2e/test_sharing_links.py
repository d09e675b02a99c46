"""In a real browser: a table edit, a second slider, a lazy expander's edits and a chosen view travel in the link, and
a view a slider does not change is not sent again by its moves."""
import json
from urllib.parse import parse_qs, urlsplit

from tests.e2e.harness import plot_data, wait_until_idle
from tests.e2e.sharing import PAGE, move_slider, open_page, server_messages, shown_link


def test_a_table_edit_and_a_second_slider_travel_in_the_link(server, page, other_page):
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
    open_page(other_page, link)  # another user's browser
    assert plot_data(other_page) == after


def test_an_edit_in_a_lazy_expander_holds_when_it_closes_and_opens(server, page):
    """Transport plans draws its points' editor only while its expander is open (ui.table_from_url): an edit made
    there stays in the link and in the plan after the expander closes, and the editor shows it when it opens again."""
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


def test_a_view_chosen_in_the_browser_travels_in_the_link(server, page, other_page):
    """A secondary view (ui.view_selector) is chosen by a click, written to the URL, and a copied link opens it."""
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
    open_page(other_page, link)  # another user's browser
    assert other_page.evaluate(titles) == shown


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
