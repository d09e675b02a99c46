"""State in the URL and the export controls, through AppTest. Widgets write the URL in the browser, so editing
and re-opening a link is tested in tests/e2e/test_sharing_and_export.py."""
import json
from urllib.parse import parse_qs, urlsplit

import numpy as np
from streamlit.testing.v1 import AppTest

from tests.app.conftest import ROOT, figures, link_params
from tests.app.test_gaussian_w2_page import covariances, heatmaps, reference_attention
from wviz import export
from wviz.views import gaussian_w2 as gv

PAGE = "gaussian_w2.py"
# the page's DEFAULT table, as rows
DEFAULT = [["t1", 0.0, 0.0, 0.5, 0.5, 0.0], ["t2", 1.0, 0.2, 0.3, 0.8, 0.5], ["t3", -0.8, 0.9, 0.6, 0.2, -0.3],
           ["t4", 0.2, -1.0, 0.2, 0.2, 0.0], ["t5", 1.5, 1.2, 1.0, 0.4, 0.7]]
TOKENS = [["a", 0.0, 0.0, 1.0, 1.0, 0.0], ["b", 1.0, 1.0, 0.5, 0.5, 0.2], ["c", -1.0, 0.5, 0.3, 0.9, -0.5]]


def test_a_link_with_table_and_sliders_reproduces_the_figures(open_page):
    at = open_page(PAGE, tokens=json.dumps(TOKENS), tau="0.1", cov_kind="diagonal")
    means = np.array([t[1:3] for t in TOKENS])
    sig = np.array([t[3:6] for t in TOKENS])
    np.testing.assert_allclose(heatmaps(at)[0], reference_attention(means, covariances(sig, True), 0.1), atol=1e-9)


def shown_link(at) -> dict:
    (code,) = at.sidebar.code
    return {k: v[-1] for k, v in parse_qs(urlsplit(code.value).query).items()}


def test_the_link_shown_is_the_url_after_the_table_wrote_to_it(open_page):
    """The table editor rewrites the URL after the link was first drawn, with no rerun to follow: the link shown
    must still be the final URL (one edit behind is what a lecturer would copy)."""
    given = json.dumps(TOKENS)  # with spaces: the editor rewrites it in its compact form
    at = open_page(PAGE, tokens=given, tau="0.1")
    link = shown_link(at)
    assert link == dict(at.query_params)
    assert link[gv.Keys.TAU] == "0.1" and link[gv.Keys.TOKENS] != given and json.loads(link[gv.Keys.TOKENS]) == TOKENS
    at = open_page(PAGE, tokens=json.dumps(DEFAULT), tau="0.1")  # the default table leaves the URL
    assert shown_link(at) == dict(at.query_params) == {gv.Keys.TAU: "0.1"}


def test_a_broken_table_in_the_link_falls_back_to_the_default(open_page):
    default = heatmaps(open_page(PAGE))[0]
    for bad in ("not json", json.dumps([[1, 2]]), json.dumps({"x": 1}), json.dumps([["a", "x", 0, 1, 1, 0]])):
        at = open_page(PAGE, tokens=bad)
        np.testing.assert_allclose(heatmaps(at)[0], default, atol=1e-12)


def test_presentation_mode_restyles_every_figure(open_page):
    at = open_page(PAGE, presentation="true")
    figs = figures(at)
    assert figs and all(f["layout"]["font"]["size"] >= export.TEXT_PX for f in figs)
    assert not all(f["layout"].get("font", {}).get("size", 0) >= export.TEXT_PX for f in figures(open_page(PAGE)))


def test_every_figure_has_six_exports_and_the_page_a_bundle(open_page):
    at = open_page(PAGE)
    labels = [b.proto.label for b in at.get("download_button")]
    n = len(figures(at))
    assert labels.count("Download lecture bundle") == 1
    for fmt in ("PNG", "SVG", "PDF", "HTML", "CSV", "JSON"):
        assert labels.count(fmt) == n


def test_without_a_browser_the_image_exports_say_why_they_are_off(open_page, monkeypatch):
    from wviz import export

    monkeypatch.setenv("BROWSER_PATH", "/nonexistent/chromium")
    export.browser_path.cache_clear()
    try:
        assert export.browser_path() is None
        at = open_page(PAGE)
    finally:
        export.browser_path.cache_clear()
    buttons = {b.proto.label: b for b in at.get("download_button") if b.proto.label in ("Download lecture bundle",
                                                                                        "PNG", "CSV")}
    assert buttons["Download lecture bundle"].proto.disabled and buttons["PNG"].proto.disabled
    assert not buttons["CSV"].proto.disabled
    assert export.NO_BROWSER in [c.value for c in at.sidebar.caption]


def test_the_page_a_try_link_opened_keeps_what_to_watch_in_sight(monkeypatch):
    """The link's sentence stays on the page it opened (above, outside the closed expander) until one of the
    link's settings changes; a page opened without the link's settings shows none."""
    from wviz.views.transport_plans import TRY_THIS, Keys

    monkeypatch.setenv("WVIZ_DEVICE", "cpu")
    item = TRY_THIS[2]   # two settings: solver and preset
    at = AppTest.from_file(str(ROOT / "pages" / "transport_plans.py"), default_timeout=120)
    for key, value in link_params(item).items():
        at.query_params[key] = value
    at.run()
    shown = [i.value for i in at.info if item.watch in i.value]
    assert shown == [f"**{item.label}**: {item.watch}"]
    at.query_params[Keys.SOLVER] = "sinkhorn"   # as the browser writes it when the radio moves (AppTest does not)
    at.sidebar.radio(key=Keys.SOLVER).set_value("sinkhorn").run()
    assert not [i for i in at.info if item.watch in i.value]
    plain = AppTest.from_file(str(ROOT / "pages" / "transport_plans.py"), default_timeout=120).run()
    assert not [i for i in plain.info if any(t.watch in i.value for t in TRY_THIS)]
