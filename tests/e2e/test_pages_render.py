"""Every page opens in a real browser and renders without an exception."""
import pytest

from tests.e2e.harness import page_paths, running_app, wait_until_idle


def assert_rendered(page, server, path):
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{server}/{path}")
    wait_until_idle(page)
    page.wait_for_selector("h1", timeout=30_000)
    assert page.get_by_text("Page not found").count() == 0
    exceptions = page.locator('[data-testid="stException"]')
    assert exceptions.count() == 0, exceptions.first.inner_text()
    assert not errors, errors
    if path in page_paths()[1:]:  # a math page draws at least one chart (a background job's may come later: its
        page.wait_for_selector(".js-plotly-plot", timeout=120_000)   # progress bar's polls leave idle moments)


@pytest.mark.parametrize("path", ["", "references"])
def test_the_pages_without_figures_render_without_exception(server, page, path):
    """The math pages are opened (and checked the same way) by test_lecture_hall at three widths."""
    assert_rendered(page, server, path)


def test_direct_link_on_a_fresh_server_goes_through_the_app_navigation(page):
    """The first request of a server names a page: it must still get app.py's navigation (sections, no
    unbuilt pages), not Streamlit's old pages/ folder mode."""
    path = page_paths()[-1]
    with running_app() as url:
        assert_rendered(page, url, path)
        nav = page.locator('[data-testid="stSidebarNav"]').inner_text()
        assert "Home" in nav and "Attention as optimisation" in nav


def test_a_link_to_the_real_transformers_old_figure4_view_opens_its_own_page(server, page):
    """Figure 4 of 002 was a view of the Real transformer; a link to it opens the page Heads solve the dual at the
    link's alpha, the link's other settings of the Real transformer dropped."""
    from wviz.views import heads_dual as hd, real_transformer as rv

    page.goto(f"{server}/real_transformer?{rv.Keys.VIEW}=Figure+4+of+002&dual_alpha=0.1&{rv.Keys.TAU}=2")
    page.wait_for_url(f"**/heads_dual?{hd.Keys.ALPHA}=0.1", timeout=60_000)
    wait_until_idle(page)
    assert page.locator("h1").first.inner_text() == "Heads solve the dual"
    slider = page.locator(f".st-key-{hd.Keys.ALPHA} [data-testid='stSliderThumbValue']")
    assert slider.inner_text() == "0.1"
