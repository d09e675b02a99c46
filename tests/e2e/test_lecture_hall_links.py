"""The lecture hall, in a real browser: a guided link opens its state and Reset returns to the defaults, presentation
mode stays on through links, navigation and Reset, every example file goes back through its own uploader, and the
animations decode with many frames."""
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import expect

from tests.e2e.harness import wait_until_idle
from tests.e2e.lecture import no_exception, open_page
from tests.file_checks import mp4_frames


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
    import imageio.v3 as iio

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
            assert mp4_frames(data)[0] > 1
