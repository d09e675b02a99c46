"""Helpers to drive pages with streamlit's AppTest and read the figures they drew."""
import base64
import json
import re
import time
from pathlib import Path
from urllib.parse import parse_qs

import numpy as np

import pytest
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[2]


def _decode(obj):
    """Plotly 6+ stores numpy arrays as {"dtype", "bdata" (base64), "shape"}: turn them back into arrays."""
    if isinstance(obj, dict):
        if "bdata" in obj and "dtype" in obj:
            arr = np.frombuffer(base64.b64decode(obj["bdata"]), dtype=obj["dtype"])
            shape = obj.get("shape")
            return arr.reshape([int(v) for v in str(shape).split(",")]) if shape else arr
        return {k: _decode(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_decode(v) for v in obj]
    return obj


def figures(at: AppTest) -> list[dict]:
    """Every Plotly figure the page drew, as its JSON dict (arrays decoded), in page order."""
    return [_decode(json.loads(el.proto.spec)) for el in at.get("plotly_chart")]


def figure_titled(at: AppTest, start: str) -> dict:
    """The one figure whose title starts with ``start``."""
    found = [f for f in figures(at) if f["layout"].get("title", {}).get("text", "").startswith(start)]
    assert len(found) == 1, [f["layout"].get("title", {}).get("text") for f in figures(at)]
    return found[0]


def shown_table(at: AppTest, index: int = 0):
    """The cells of the page's ``index``-th st.dataframe as the browser shows them (the display values of a styled
    table, wviz.figures.common.table_text; the values themselves for a plain one)."""
    import pyarrow as pa

    proto = at.dataframe[index].proto.arrow_data
    if proto.HasField("styler") and proto.styler.display_values:
        return pa.ipc.open_stream(proto.styler.display_values).read_all().to_pandas()
    return at.dataframe[index].value


def shown_text(element) -> str:
    """The text a user reads of a caption, an error or another markdown element: its markdown with ui.plain's escapes
    undone (the backslash before a punctuation mark, the invisible word joiners that break autolinks)."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", element.value).replace("\u2060", "")


def no_exception(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def settle(at: AppTest, timeout: float = 540) -> AppTest:
    """Rerun the page until no background job's progress bar is left (wviz.ui.wait_for), as the browser's polling
    fragment would, each rerun once the jobs asked for have ended (a rerun per second would take a core from them);
    within pytest's 600 s per test (an upload's whole evaluation takes minutes while the other workers of `make test`
    share the cores)."""
    from wviz.ui.background import join

    deadline = time.time() + timeout
    while at.get("progress") and time.time() < deadline:
        join(max(0.0, deadline - time.time()))
        at.run()
    assert not at.get("progress"), "a background job did not finish"
    return at


def open_link(name: str, item, monkeypatch, timeout: float = 300) -> AppTest:
    """Page ``name`` opened by the guided link ``item`` as the browser would (its query string), run once (not
    settled: background work a link starts goes on), with no exception and no error message."""
    monkeypatch.setenv("WVIZ_DEVICE", "cpu")
    at = AppTest.from_file(str(ROOT / "pages" / name), default_timeout=timeout)
    for k, v in link_params(item).items():
        at.query_params[k] = v
    at.run()
    no_exception(at)
    assert not at.error, [shown_text(e) for e in at.error]
    return at


def link_params(item) -> dict:
    """The query parameters of a guided link (wviz.guide.Try) as the browser sends them: parsed from the link the
    page draws (Try.query), a repeated key as a list."""
    query = parse_qs(item.query().lstrip("?"), keep_blank_values=True)
    return {k: v if isinstance(item.params[k], (list, tuple)) else v[0] for k, v in query.items()}


@pytest.fixture(scope="session", autouse=True)
def components_scanned_once():
    """Each AppTest scans every installed package's metadata for Streamlit components (about 1.4 s of a core, and
    a run makes hundreds of AppTests); what it finds (wviz's own component) is the same for all, so a worker scans
    once."""
    import functools

    from streamlit.components.v2 import manifest_scanner

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(manifest_scanner, "scan_component_manifests",
                   functools.cache(manifest_scanner.scan_component_manifests))
        yield


@pytest.fixture(autouse=True)
def jobs_end_with_the_test():
    """Background work a test leaves unfinished (a panel it did not wait for) is dropped, not run in the next
    test's time (wviz.ui.background.forget)."""
    yield
    from wviz.ui.background import forget

    forget()


@pytest.fixture
def open_page(monkeypatch):
    monkeypatch.setenv("WVIZ_DEVICE", "cpu")

    def _open(name: str, timeout: float = 120, **query_params: str) -> AppTest:
        """Run page ``name`` as a browser opening its URL with these query parameters would."""
        at = AppTest.from_file(str(ROOT / "pages" / name), default_timeout=timeout)
        for k, v in query_params.items():
            at.query_params[k] = v
        at.run()
        no_exception(at)
        return settle(at)

    return _open


def bundle_figures(at: AppTest) -> dict:
    """The figures the page's lecture bundle would hold (views not drawn built now), by key, as JSON dicts."""
    from wviz.ui import built

    return {k: _decode(json.loads(f.to_json())) for k, f in built(at.session_state["_wviz_lecture"]).figures.items()}


def check_views(at: AppTest, key: str, figure_keys: dict) -> None:
    """Each choice of the view selector ``key`` draws its figures (view -> figure keys) and only those, and the
    lecture bundle holds every view's figures whichever is drawn, each built by its own view: at the views'
    default settings a deferred figure has the title of the drawn one. A view's background work is waited for
    (settle). (The browser writes the choice to the URL: that is tested in tests/e2e.)"""
    everything = {k for keys in figure_keys.values() for k in keys}
    titles, bundles = {}, []
    for view, keys in figure_keys.items():
        settle(at.segmented_control(key=key).set_value(view).run())
        no_exception(at)
        drawn = [el.proto.id for el in at.get("plotly_chart")]
        for k in everything:
            assert any(d.endswith(f"-{k}") for d in drawn) == (k in keys), (view, k, drawn)
        bundle = bundle_figures(at)
        assert everything <= set(bundle), (view, set(bundle))
        titles.update({k: _title(bundle[k]) for k in keys})
        bundles.append((view, keys, bundle))
    for view, keys, bundle in bundles:
        for k in everything - set(keys):
            assert _title(bundle[k]) == titles[k], (view, k, _title(bundle[k]), titles[k])


def _title(fig: dict) -> str:
    return fig["layout"].get("title", {}).get("text", "")
