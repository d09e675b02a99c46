"""In a real browser: every export button of a page's first figure gives a valid file, and the lecture bundle holds
every figure of the page, at the values of the last slider move."""
import io
import json
import re
import zipfile
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.e2e.harness import page_paths, plot_data
from tests.e2e.sharing import FORMATS, PAGE, download, move_slider, open_page
from tests.file_checks import check


@pytest.mark.parametrize("path", page_paths()[1:])
def test_every_export_button_of_the_first_figure_gives_a_valid_file(server, page, path):
    """Every format, on every page: the file parses, and its data is the figure the browser shows."""
    open_page(page, f"{server}/{path}")
    shown = plot_data(page)[0]
    menu = page.locator('[data-testid="stMain"] [data-testid="stPopover"]').first   # the sidebar has its own
    panel = page.locator('[data-testid="stPopoverBody"]')
    for fmt in FORMATS:
        if not panel.is_visible():
            menu.locator("button").first.click()
        parsed = check(fmt, download(page, panel.get_by_role("button", name=fmt.upper(), exact=True)))
        if fmt == "json":
            assert [t["type"] for t in parsed["traces"]] == [t["type"] for t in shown]
        if fmt == "csv" and "type" in parsed:  # a diagram without traces exports its annotations
            assert set(parsed["type"]) <= ({t["type"] for t in shown} or {"annotation"})
        elif fmt == "csv":  # heatmaps only: their grids, one block of rows per trace
            assert {t["type"] for t in shown} <= {"heatmap", "contour"} and len(parsed) > 0


def test_the_lecture_bundle_has_every_figure_of_the_page(server, page):
    open_page(page, f"{server}/{PAGE}")
    page.get_by_text("Present, share, export").click()
    bundle = zipfile.ZipFile(io.BytesIO(download(page, page.get_by_role("button", name="Download lecture bundle"))))
    names = bundle.namelist()
    assert "README.md" in names and "params.json" in names
    assert "W_2^2" in bundle.read("README.md").decode()
    figures = [n[:-4] for n in names if n.endswith(".svg")]
    # the figures drawn (the first view) and the one of the view not chosen (the sweep), built on the click
    assert sorted(figures) == ["ellipses", "pair", "parts", "query_bars", "side_left", "side_right", "sweep"]
    assert len(plot_data(page)) == 4
    for name in figures:
        check("svg", bundle.read(f"{name}.svg"))
        check("png", bundle.read(f"{name}.png"))
        check("csv", bundle.read(f"{name}.csv"))


def test_after_a_slider_move_the_bundle_has_the_new_values_once(server, page):
    """A slider move reruns only the page's fragment (ui.fragment): the lecture bundle must then hold that run's
    equations, each once, and the views not drawn (built on the click)."""
    open_page(page, f"{server}/attention_transport")
    move_slider(page, "tau", presses=2)   # 1 -> 1.1 -> 1.21 (24 steps per decade)
    assert parse_qs(urlsplit(page.url).query)["tau"] == ["1.21"], page.url
    page.get_by_text("Present, share, export").click()
    bundle = zipfile.ZipFile(io.BytesIO(download(page, page.get_by_role("button", name="Download lecture bundle"))))
    readme = bundle.read("README.md").decode()
    assert readme.count("p^\\star_{\\text{") == 3 and readme.count("\\tau = 1.21") == 1, readme
    assert not re.search(r"\\tau = 1(?![.\d])", readme) and readme.count("\\arg\\min") == 1  # old tau gone
    drawn = sorted(n[:-4] for n in bundle.namelist() if n.endswith(".svg"))
    assert drawn == ["bars", "columns", "land", "many", "rho_sweep", "side_left", "side_right", "sweep"]
    assert json.loads(bundle.read("params.json"))["tau"] == 1.21
