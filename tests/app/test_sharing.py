"""State in the URL and the export controls, through AppTest. Widgets write the URL in the browser, so editing
and re-opening a link is tested in tests/e2e/test_sharing_and_export.py."""
import json

import numpy as np

from tests.app.conftest import figures
from tests.app.test_gaussian_page import covariances, heatmaps, reference_attention

PAGE = "gaussian_w2.py"
TOKENS = [["a", 0.0, 0.0, 1.0, 1.0, 0.0], ["b", 1.0, 1.0, 0.5, 0.5, 0.2], ["c", -1.0, 0.5, 0.3, 0.9, -0.5]]


def test_a_link_with_table_and_sliders_reproduces_the_figures(open_page):
    at = open_page(PAGE, tokens=json.dumps(TOKENS), tau="0.1", cov_kind="diagonal")
    means = np.array([t[1:3] for t in TOKENS])
    sig = np.array([t[3:6] for t in TOKENS])
    np.testing.assert_allclose(heatmaps(at)[0], reference_attention(means, covariances(sig, True), 0.1), atol=1e-9)


def test_a_broken_table_in_the_link_falls_back_to_the_default(open_page):
    default = heatmaps(open_page(PAGE))[0]
    for bad in ("not json", json.dumps([[1, 2]]), json.dumps({"x": 1}), json.dumps([["a", "x", 0, 1, 1, 0]])):
        at = open_page(PAGE, tokens=bad)
        np.testing.assert_allclose(heatmaps(at)[0], default, atol=1e-12)


def test_presentation_mode_restyles_every_figure(open_page):
    at = open_page(PAGE, presentation="true")
    figs = figures(at)
    assert figs and all(f["layout"]["font"]["size"] == 20 for f in figs)
    assert all(f["layout"].get("font", {}).get("size") != 20 for f in figures(open_page(PAGE)))


def test_every_figure_has_six_exports_and_the_page_a_bundle(open_page):
    at = open_page(PAGE)
    labels = [b.proto.label for b in at.get("download_button")]
    n = len(figures(at))
    assert labels.count("Download lecture bundle") == 1
    for fmt in ("PNG", "SVG", "PDF", "HTML", "CSV", "JSON"):
        assert labels.count(fmt) == n
