"""In a real browser, the path where settings leaked between pages: no setting of one page reaches the next one
through the sidebar's navigation, neither in its widgets nor in its URL (wviz.ui.state.own_page)."""
from urllib.parse import urlsplit

from wviz.views import particles as pv, real_transformer as rv, uncertainty_inspector as uv


def go_to(page, path: str, last_widget: str) -> None:
    """Open the page at ``path`` by the sidebar's navigation, until its widget keyed ``last_widget`` is drawn: the
    widgets above it have written their values to the URL by then."""
    page.locator(f'[data-testid="stSidebarNavLink"][href$="/{path}"]').click()
    page.wait_for_url(f"**/{path}*")
    page.locator(f".st-key-{last_widget}").wait_for(timeout=60_000)
    page.wait_for_timeout(300)


def test_the_inspectors_view_and_samples_do_not_travel_to_the_next_pages(server, page):
    """The Uncertainty inspector on another view (its samples S at 32), then the Real transformer and Particles:
    both open at their defaults, with no setting in their URL, and Particles' samples at its own 16. (The inspector
    waits for an upload, showing the bundled demo: its dataset panel, half a minute of a core, is not started.)"""
    page.goto(f"{server}/uncertainty_inspector?{uv.Keys.CKPT}=upload&{uv.Keys.VIEW}={uv.Labels.HEADS}")
    page.locator(f".st-key-{uv.Keys.VIEW}").wait_for(timeout=60_000)
    assert f"{uv.Keys.VIEW}=" in page.url, page.url
    for path, last in (("real_transformer", rv.Keys.VIEW), ("particles", pv.Keys.SAMPLES)):
        go_to(page, path, last)
        assert urlsplit(page.url).query == "", page.url
    samples = page.locator(f".st-key-{pv.Keys.SAMPLES} [data-testid='stSliderThumbValue']")
    assert samples.inner_text() == "16"
