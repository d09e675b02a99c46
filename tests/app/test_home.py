"""The landing page links every page of the registry and says where wviz computes."""
from streamlit.testing.v1 import AppTest

from tests.app.conftest import ROOT, no_exception
from wviz.registry import PAGES


def test_landing_page_links_every_registered_page(monkeypatch):
    monkeypatch.setenv("WVIZ_DEVICE", "cpu")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    no_exception(at)
    linked = [link.proto.page for link in at.get("page_link")]
    assert linked == [page.stem for page in PAGES] + ["references"]
    assert any("Computing on:** CPU" in m.value for m in at.sidebar.markdown)


def test_a_bad_device_setting_is_reported_not_fatal(monkeypatch):
    monkeypatch.setenv("WVIZ_DEVICE", "tpu")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    no_exception(at)
    assert "auto, cpu, cuda" in at.sidebar.error[0].value


def test_the_switch_out_of_streamlits_legacy_pages_mode_is_still_there():
    """wviz.ui.page sends a direct link on a fresh server through app.py's navigation by turning off Streamlit's
    private PagesManager.uses_pages_directory (there is no public switch while a pages/ folder exists). A Streamlit
    upgrade that renames it fails here, in the fast tests; tests/e2e/test_pages_render.py checks the behaviour."""
    from streamlit.runtime.pages_manager import PagesManager

    assert "uses_pages_directory" in PagesManager.__annotations__
    assert PagesManager.uses_pages_directory in (None, True, False)
