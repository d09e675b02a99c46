"""Fixtures of the browser tests: one server and one browser per session, a fresh context per test."""
import pytest

from tests.e2e.harness import launch_browser, running_app


@pytest.fixture(scope="session")
def server():
    with running_app() as url:
        yield url


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = launch_browser(pw)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    yield pg
    context.close()
