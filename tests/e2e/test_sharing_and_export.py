"""In a real browser: a slider redraws the chart and a copied link reproduces the page (the other links:
test_sharing_links.py; every export: test_exports.py)."""
import pytest

from tests.e2e.harness import SLIDERS, page_paths, plot_data
from tests.e2e.sharing import move_slider, open_page, server_messages, shown_link


@pytest.mark.parametrize("path", page_paths()[1:])
def test_a_slider_redraws_the_chart_and_the_link_reproduces_it(server, page, other_page, path):
    open_page(page, f"{server}/{path}")
    before = plot_data(page)
    move_slider(page, SLIDERS[path], presses=1)
    after = plot_data(page)
    assert after != before
    assert f"{SLIDERS[path]}=" in page.url, page.url
    link = shown_link(page)
    assert link.split("?")[1] == page.url.split("?")[1], (link, page.url)

    open_page(other_page, link)  # another user's browser
    # The same figures; the other page may show more: a background panel (the inspector's dataset figures) that
    # finished between the two loads is drawn after the others, once per server.
    reproduced = plot_data(other_page)
    assert reproduced[:len(after)] == after and len(reproduced) >= len(after)


def test_a_move_sends_the_new_link_once(server, page):
    """A fragment's run draws the share link once, at its end (state.link_at_end), not also after a figure."""
    received = server_messages(page)   # the link is in them as text
    open_page(page, f"{server}/attention_transport")
    received.clear()
    move_slider(page, "tau", presses=2)   # 1 -> 1.1 -> 1.21 (24 steps per decade)
    assert b"".join(received).count(b"/attention_transport?tau=1.21") == 1
    assert shown_link(page).endswith("/attention_transport?tau=1.21")
