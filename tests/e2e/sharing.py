"""What the sharing and export tests share: a page opened and drawn, a slider moved by keyboard, the
server's messages, the link the page shows, a download."""
from tests.e2e.harness import SETTLED, wait_until_idle


PAGE = "gaussian_w2"


def open_page(page, url):
    page.goto(url)
    # First the chart, then the end of the run: on a busy machine a cold page's run can start seconds after the
    # page loads, and take a minute, so an idle page is not yet a drawn one.
    page.wait_for_selector(".js-plotly-plot", timeout=120_000)
    wait_until_idle(page)
    # and the background work it started (the inspector's dataset panel on a server's first visit), whose end reruns
    # the page: in one full suite a move made while it ran left the URL moved and the share link, the server's
    # state, not (a race between the two reruns that the tests of a move are not about)
    page.wait_for_function(SETTLED, timeout=180_000, polling=500)
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


def shown_link(page) -> str:
    """The text of the sidebar's share link (opening its expander and its popover if they are closed).

    Up to three clicks: once in a full suite on 2 loaded cores (CI, stop 62) the popover's body did not show within
    30 s of the click that should have opened it; a user would click again, and so does this."""
    code = page.locator('[data-testid="stPopoverBody"] [data-testid="stCode"]')
    sidebar = page.locator('[data-testid="stSidebar"]')
    panel = sidebar.locator("details", has_text="Present, share, export")
    share = sidebar.get_by_role("button", name="Share link")
    seen = []
    for _ in range(3):
        if code.is_visible():
            return code.inner_text().strip()
        if panel.get_attribute("open") is None:
            panel.locator("summary").click()
        share.wait_for(state="visible", timeout=10_000)
        share.click()
        try:
            code.wait_for(state="visible", timeout=15_000)
        except Exception:
            seen.append(f"panel open: {panel.get_attribute('open') is not None}, popover bodies: "
                        f"{page.locator('[data-testid=stPopoverBody]').count()}")
            page.keyboard.press("Escape")
    if code.is_visible():
        return code.inner_text().strip()
    raise AssertionError(f"the share link never showed after three clicks: {seen}")


def download(page, button) -> bytes:
    # a lecture bundle renders every figure of the page twice through kaleido's chromium: seconds alone, but past
    # 60 s once (the attention page) in a full suite on 2 loaded cores; the tests check the content, not the time
    try:
        with page.expect_download(timeout=180_000) as info:
            button.click()
    except Exception as err:   # what the button says: Streamlit's error under it (e.g. the 180 s its request waits)
        shown = page.locator('[data-testid="stDownloadButtonError"]').all_inner_texts()
        raise AssertionError(f"no download; the page shows {shown or 'no error'}") from err
    return open(info.value.path(), "rb").read()


FORMATS = ("png", "svg", "pdf", "html", "csv", "json")
