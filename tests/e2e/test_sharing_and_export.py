"""In a real browser: a slider redraws the chart, a copied link reproduces the page, every export is a valid file."""
import io
import json
import xml.etree.ElementTree as ET
import zipfile

import pandas as pd
from PIL import Image

import pytest

from tests.e2e.harness import SLIDERS, page_paths, plot_data, wait_until_idle

PAGE = "gaussian_w2"


def open_page(page, url):
    page.goto(url)
    wait_until_idle(page)
    page.wait_for_selector(".js-plotly-plot", timeout=30_000)
    page.wait_for_timeout(500)


def move_slider(page, key, presses=3):
    """Move the sidebar slider bound to URL key ``key`` by keyboard, as a user would, and wait for the rerun."""
    thumb = page.locator(f".st-key-{key}").get_by_role("slider")
    thumb.focus()
    for _ in range(presses):
        thumb.press("ArrowRight")
    wait_until_idle(page)
    page.wait_for_timeout(1000)


def test_every_page_has_a_slider_for_the_browser_tests():
    assert set(page_paths()[1:]) <= set(SLIDERS), "add the new page's main slider to SLIDERS in harness.py"


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
    page.get_by_text("Present, share, export").click()
    link = page.locator('[data-testid="stSidebar"] [data-testid="stCode"]').inner_text().strip()
    assert link.split("?")[1] == page.url.split("?")[1], (link, page.url)

    fresh = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()  # another user's browser
    open_page(fresh, link)
    assert plot_data(fresh) == after
    fresh.context.close()
    context.close()


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
    after = plot_data(page)
    fresh = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    open_page(fresh, page.url)
    assert plot_data(fresh) == after
    fresh.context.close()
    context.close()


def download(page, button):
    with page.expect_download(timeout=60_000) as info:
        button.click()
    return open(info.value.path(), "rb").read()


def check(fmt: str, data: bytes) -> None:
    """The file is what its name says: magic bytes, and it parses."""
    if fmt == "png":
        assert Image.open(io.BytesIO(data)).format == "PNG"
    elif fmt == "svg":
        assert ET.fromstring(data).tag.endswith("svg")
    elif fmt == "pdf":
        assert data.startswith(b"%PDF-") and data.rstrip().endswith(b"%%EOF")
    elif fmt == "html":
        text = data.decode()
        assert text.lstrip().lower().startswith("<!doctype html>") and "Plotly.newPlot" in text
    elif fmt == "csv":
        assert len(pd.read_csv(io.BytesIO(data))) > 0
    elif fmt == "json":
        assert json.loads(data)["traces"]


def test_every_export_button_gives_a_valid_file(server, page):
    open_page(page, f"{server}/{PAGE}")
    first_menu = page.locator('[data-testid="stPopover"]').first
    for fmt in ("png", "svg", "pdf", "html", "csv", "json"):
        first_menu.locator("button").first.click()
        panel = page.locator('[data-testid="stPopoverBody"]')
        check(fmt, download(page, panel.get_by_role("button", name=fmt.upper(), exact=True)))
        page.keyboard.press("Escape")
        page.wait_for_timeout(300)

    page.get_by_text("Present, share, export").click()
    bundle = zipfile.ZipFile(io.BytesIO(download(page, page.get_by_role("button", name="Download lecture bundle"))))
    names = bundle.namelist()
    assert "README.md" in names and "params.json" in names
    assert "W_2^2" in bundle.read("README.md").decode()
    figures = [n[:-4] for n in names if n.endswith(".svg")]
    assert len(figures) == len(plot_data(page))
    for name in figures:
        check("svg", bundle.read(f"{name}.svg"))
        check("png", bundle.read(f"{name}.png"))
        check("csv", bundle.read(f"{name}.csv"))
