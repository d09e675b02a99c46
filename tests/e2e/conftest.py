"""Fixtures of the browser tests: one server, one browser and two kept tabs per session (per worker).

A tab is reused from test to test, each test starting from a blank page, rather than a fresh context per test: a new
context compiles Streamlit's and Plotly's JavaScript again, about 8 s of a core per page opened where a kept tab
opens one in about 4.5 (BENCHMARKS.md, "The test command"). A page opened in a kept tab starts a new Streamlit
session, as in a fresh one; what Streamlit keeps in the browser (the sidebar's collapsed state in localStorage, its
XSRF cookie) is cleared after each test."""
import pytest

from tests.e2e.harness import launch_browser, log_tail, running_app

VIEWPORT = {"width": 1400, "height": 1000}


@pytest.fixture(scope="session")
def server():
    with running_app() as url:
        yield url


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test that used the server shows the server's last lines (its exceptions go there, not to the
    browser)."""
    report = yield
    url = item.funcargs.get("server") if hasattr(item, "funcargs") else None
    if report.failed and url:
        report.sections.append(("server log, last 60 lines", log_tail(url)))
    return report


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = launch_browser(pw)
        yield b
        b.close()


class KeptTab:
    """A tab of its own browser context, lent to one test at a time and opened again if a test closed or crashed
    it."""

    def __init__(self, browser):
        self.browser, self.tab = browser, None

    def lend(self):
        if self.tab is None or self.tab.is_closed():
            self.tab = self.browser.new_context(viewport=VIEWPORT).new_page()
        added = []  # (event, handler) of every listener the test adds, removed after it
        tab, on = self.tab, type(self.tab).on

        def recording_on(event, handler):
            added.append((event, handler))
            on(tab, event, handler)

        tab.on = recording_on
        try:
            yield tab
        finally:
            del tab.on
            for event, handler in added:
                tab.remove_listener(event, handler)
            self._reset(tab)

    def _reset(self, tab):
        """Back to a blank page at the default size, with no cookie or browser storage, the test's other pages
        closed; a tab that cannot be reset is dropped and the next test gets a new one."""
        try:
            for other in tab.context.pages:
                if other is not tab:
                    other.close()
            if tab.url.startswith("http"):  # the storage of the origin the test ended on: the app's
                tab.evaluate("() => { localStorage.clear(); sessionStorage.clear(); }")
            tab.context.clear_cookies()
            tab.set_viewport_size(VIEWPORT)
            tab.goto("about:blank")
        except Exception:  # a crashed or closed tab: replaced, and the test's own failure stands
            self.close()

    def close(self):
        if self.tab is not None and not self.tab.is_closed():
            self.tab.context.close()
        self.tab = None


@pytest.fixture(scope="session")
def _tabs(browser):
    tabs = KeptTab(browser), KeptTab(browser)
    yield tabs
    for t in tabs:
        t.close()


@pytest.fixture
def page(_tabs):
    """A blank tab at 1400 x 1000 (kept across tests)."""
    yield from _tabs[0].lend()


@pytest.fixture
def other_page(_tabs):
    """A blank tab of another browser context: another user's browser, which a shared link opens (kept across
    tests)."""
    yield from _tabs[1].lend()
