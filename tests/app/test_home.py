"""The landing page links every built page and says where wviz computes."""
import re

from streamlit.testing.v1 import AppTest

from tests.app.conftest import ROOT, no_exception


def test_landing_page_links_every_registered_page(monkeypatch):
    monkeypatch.setenv("WVIZ_DEVICE", "cpu")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    no_exception(at)
    registered = re.findall(r'url_path="([\w-]+)"', (ROOT / "app.py").read_text())
    assert registered, "app.py registers no page"
    linked = [link.proto.page for link in at.get("page_link")]
    assert sorted(linked) == sorted(registered)
    assert any("Computing on:** CPU" in m.value for m in at.sidebar.markdown)


def test_a_bad_device_setting_is_reported_not_fatal(monkeypatch):
    monkeypatch.setenv("WVIZ_DEVICE", "tpu")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    no_exception(at)
    assert "auto, cpu, cuda" in at.sidebar.error[0].value
