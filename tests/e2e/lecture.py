"""What the lecture hall's tests share: a page opened and drawn, and no exception on it."""
from tests.e2e.harness import wait_until_idle


def open_page(page, url):
    page.goto(url)
    wait_until_idle(page)
    page.wait_for_timeout(500)


def no_exception(page):
    exceptions = page.locator('[data-testid="stException"]')
    assert exceptions.count() == 0, exceptions.first.inner_text()
