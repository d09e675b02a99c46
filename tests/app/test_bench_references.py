"""bench_latency's per-page reference (bench/main_figure_app.py) draws each page's main figure as the page draws it:
the same traces and title as the page at its defaults, through the page's own views and figures functions
(wviz.views.<stem>.at_defaults, wviz.figures.<stem>.main_figure). A renamed function, a changed signature or a
page default that at_defaults no longer follows fails here, not in a 40-minute run."""
import json

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from tests.app.conftest import ROOT, _decode, settle
from wviz.registry import PAGES


def main_figure(at: AppTest, key: str) -> dict:
    """The figure drawn under ``key``, as its JSON dict."""
    (fig,) = [_decode(json.loads(el.proto.spec)) for el in at.get("plotly_chart") if el.proto.id.endswith(f"-{key}")]
    return fig


def same(a, b) -> bool:
    """Equal JSON values, arrays compared as arrays."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)
    return a == b


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_the_reference_app_draws_the_pages_main_figure(page, monkeypatch):
    monkeypatch.setenv("WVIZ_DEVICE", "cpu")
    ref = AppTest.from_file(str(ROOT / "bench" / "main_figure_app.py"), default_timeout=300)
    ref.query_params["page"] = page.stem
    ref.run()
    assert not ref.exception, ref.exception[0].value
    assert len(ref.get("plotly_chart")) == 1
    assert page.slider in ref.session_state
    mine = main_figure(ref, page.figure)

    at = settle(AppTest.from_file(str(ROOT / "pages" / f"{page.stem}.py"), default_timeout=300).run())
    assert not at.exception, at.exception[0].value
    theirs = main_figure(at, page.figure)
    assert mine["data"] and same(mine["data"], theirs["data"])
    assert mine["layout"].get("title") == theirs["layout"].get("title")
