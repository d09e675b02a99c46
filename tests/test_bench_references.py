"""bench_latency's per-page reference (bench/main_figure_app.py) draws each page's main figure with the page's own
views and figures functions: a renamed function or a changed signature must fail here, not in a 40-minute run."""
import pytest
from streamlit.testing.v1 import AppTest

from tests.app.conftest import ROOT, figures
from tests.e2e.harness import SLIDERS


@pytest.mark.parametrize("stem", sorted(SLIDERS))
def test_the_reference_app_draws_the_pages_main_figure(stem, monkeypatch):
    monkeypatch.setenv("WVIZ_DEVICE", "cpu")
    at = AppTest.from_file(str(ROOT / "bench" / "main_figure_app.py"), default_timeout=300)
    at.query_params["page"] = stem
    at.run()
    assert not at.exception, at.exception[0].value
    (fig,) = figures(at)
    assert fig["data"], stem
    assert SLIDERS[stem] in at.session_state
