"""The only streamlit helpers outside pages/: page set-up, shared widgets, guarded computation, figure output."""
from __future__ import annotations

import dataclasses
import gc
import importlib
import json
import pkgutil
import queue
import re
import threading
from collections import OrderedDict
from concurrent.futures import Future
from typing import Any, Callable, Hashable
from urllib.parse import urlencode

import numpy as np
import pandas as pd
import streamlit as st
import torch

from wviz import export
from wviz.device import describe, get_device

# Streamlit serves several sessions from one process: more torch threads than cores made a 14 ms loop take
# 3.2 s on a 2-core machine (shared/OT-NOTES.md, item 6).
TORCH_THREADS = 2


def freeze_imports() -> None:
    """Import every wviz module (and with them torch, plotly, pandas, POT), then hide all those long-lived objects
    from the garbage collector: once per server process.

    Streamlit runs a full gc.collect() after every script and fragment run (runner.postScriptGC), holding the GIL
    while it walks every tracked object: about 250,000 once torch is loaded, 130-160 ms on a 2-core machine, during
    which the server sends nothing. gc.freeze() moves them to a generation the collector skips; what a run
    allocates is still collected after it (bench/floor_app.py does the same, so that the latency benchmark's
    floor is not slowed by what this spares the pages).
    """
    if gc.get_freeze_count():
        return
    import wviz

    for module in pkgutil.walk_packages(wviz.__path__, "wviz."):
        importlib.import_module(module.name)
    gc.collect()  # garbage made by the imports goes now, not frozen with them
    gc.freeze()


def _leave_legacy_pages_mode() -> None:
    """Go through app.py's st.navigation even when a page was opened by a direct link.

    On a server's first request Streamlit does not know yet that app.py calls st.navigation; because a pages/
    folder exists it runs a page named in the URL directly, in its old multipage mode (no sections, every file
    listed). Turning that mode off and rerunning sends the request through app.py.
    """
    from streamlit.runtime.pages_manager import PagesManager

    if PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False
        st.rerun()


def page_setup(title: str, intro: str) -> torch.device:
    """Title, one-paragraph intro, the sidebar badge saying where this page computes, and the lecture tools
    (presentation mode, share link, lecture bundle); returns the device."""
    _leave_legacy_pages_mode()
    torch.set_num_threads(min(TORCH_THREADS, torch.get_num_threads()))
    try:
        device = get_device()
    except ValueError as err:  # a bad WVIZ_DEVICE: say so and fall back to the CPU rather than die
        st.sidebar.error(str(err))
        device = torch.device("cpu")
    st.sidebar.markdown(f"**Computing on:** {describe(device)}")
    lecture = st.session_state["_wviz_lecture"] = export.Lecture(title, intro)
    _lecture_tools(lecture)
    st.title(title)
    st.markdown(intro)
    return device


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def _lecture_tools(lecture: export.Lecture) -> None:
    """Sidebar expander: presentation mode, a link that reproduces the page, the page's lecture bundle."""
    with st.sidebar.expander("Present, share, export", icon=":material/co_present:"):
        st.toggle("Presentation mode", key="presentation", bind="query-params",
                  help="Larger text and lines, colour-blind-safe colours (Okabe-Ito, Cividis), for a projector.")
        if st.session_state.get("presentation"):
            st.html("<style>.stMainBlockContainer { font-size: 1.3rem; }</style>")
        st.caption("Link to this page with every setting (uploaded files are not part of it):")
        st.session_state["_wviz_link"] = (st.empty(), None)
        _show_link()
        no_browser = export.browser_path() is None
        # Built on click, after this run has drawn every figure into ``lecture`` (the callable closes over it) and
        # left a builder there for each view it did not draw (bundle_figure).
        st.download_button("Download lecture bundle", data=lambda: export.lecture_bundle(built(lecture)),
                           file_name=f"wviz_{_slug(lecture.title)}.zip", mime=export.MIME["zip"], on_click="ignore",
                           icon=":material/folder_zip:", key="_wviz_bundle", disabled=no_browser,
                           help="A zip with every figure of this page as SVG, PNG and CSV, the parameters as JSON and "
                                "a README with the equations.")
        if no_browser:
            st.caption(export.NO_BROWSER)


def fragment(func: Callable[[], None]) -> Callable[[], None]:
    """st.fragment for a page's results: a widget drawn inside ``func`` (even into a sidebar container made
    outside it) reruns ``func`` alone, not the page, so a slider move redraws only the figures it drives.

    The share link changes with that widget, and a fragment may redraw a container made outside it only if it
    wrote there during the last full run: so it draws the link at its start on every run, and again at its end
    (moves in quick succession left it one move behind in CI, after three key presses; the URL has settled by
    then).
    """
    span = []  # where this fragment's equations sit in the lecture's list, from its last run

    @st.fragment
    def run() -> None:
        equations = _lecture().equations
        start, end = span or (len(equations), len(equations))
        after = equations[end:]  # a rerun replaces this fragment's equations, keeping those of the page after it
        del equations[start:]
        try:
            _show_link(force=True)
            func()
            _show_link(force=True)
        finally:
            span[:] = [start, len(equations)]
            equations.extend(after)

    return run


def _show_link(force: bool = False) -> None:
    """Draw the share link from the URL as it stands now, into the placeholder page_setup made.

    The URL changes after page_setup within the same run (table_editor writes its table, Streamlit corrects a
    bound widget's value) and no rerun follows, so the link is redrawn after each table and after each figure
    (the widgets above it have settled by then): the pages call nothing at their end, and the link shown is the
    URL after the last table or figure of the run.
    """
    placeholder, shown = st.session_state.get("_wviz_link", (None, None))
    if placeholder is None:
        return
    query = urlencode(st.query_params.to_dict())
    link = f"{st.context.url or ''}{'?' + query if query else ''}"
    if force or link != shown:  # redraw only on a change: one message per new URL, not one per figure
        placeholder.code(link, language=None, wrap_lines=True)
        st.session_state["_wviz_link"] = (placeholder, link)


def equation(latex: str) -> None:
    """Show an equation and record it for the lecture bundle's README."""
    st.latex(latex)
    _lecture().equations.append(latex)


def _lecture() -> export.Lecture:
    return st.session_state.setdefault("_wviz_lecture", export.Lecture("wviz"))


def log_slider(label: str, lo: float, hi: float, value: float, key: str, help: str, per_decade: int = 12,
               where=None) -> float:
    """A slider over a logarithmic grid from lo to hi (both powers of ten), bound to the URL; ``where`` is the
    container (default: the sidebar, where pages keep their controls)."""
    decades = round(np.log10(hi) - np.log10(lo))
    options = [float(f"{v:.3g}") for v in np.logspace(np.log10(lo), np.log10(hi), decades * per_decade + 1)]
    value = min(options, key=lambda o: abs(np.log(o) - np.log(value)))
    return (where or st.sidebar).select_slider(label, options=options, value=value, key=key, help=help,
                            format_func=lambda v: f"{v:.3g}", bind="query-params")


@dataclasses.dataclass
class _Job:
    future: Future = dataclasses.field(default_factory=Future)
    done: float = 0.0  # the fraction finished, as compute last reported it


_JOBS: OrderedDict[Hashable, _Job] = OrderedDict()
_JOBS_LOCK = threading.Lock()
_QUEUE: queue.SimpleQueue = queue.SimpleQueue()  # (future, compute, progress), run in order by one worker


def _work() -> None:
    while True:
        future, compute, progress = _QUEUE.get()
        if future.set_running_or_notify_cancel():  # False: cancelled while it waited
            try:
                future.set_result(compute(progress))
            except BaseException as err:  # noqa: BLE001  (handed to whoever asks for the result)
                future.set_exception(err)


# A daemon thread, not a ThreadPoolExecutor: the server must stop when told to, even in the middle of a job
# (an executor's worker is joined at exit, and the e2e harness gives a stopping server 10 s).
threading.Thread(target=_work, name="wviz-background", daemon=True).start()


def background(key: Hashable, compute: Callable[[Callable[[int, int], None]], Any],
               max_entries: int = 8) -> tuple[Any, float]:
    """``compute(progress)`` run once per ``key`` for the whole server, in one worker thread; returns (its result,
    1.0) once it has finished, (None, the fraction done) before that (compute reports progress(done, total)).

    A session runs its reruns one at a time, fragments included: a computation of many seconds inside the script
    would hold every slider of the page until it ended (bench_load: the Real transformer page's first move waited
    more than 30 s behind Figure 4). Here the script only asks, draws a progress bar while the answer is not
    there, and polls (see wait_for). compute's exception is raised on every call for that key. The last
    ``max_entries`` keys asked for are kept; a job evicted before it started is cancelled.
    """
    with _JOBS_LOCK:
        job = _JOBS.get(key)
        if job is None:
            job = _JOBS[key] = _Job()

            def progress(done: int, total: int) -> None:
                job.done = done / total

            _QUEUE.put((job.future, compute, progress))
            while len(_JOBS) > max_entries:
                _, old = _JOBS.popitem(last=False)
                old.future.cancel()  # no effect once running: it finishes and is dropped
        _JOBS.move_to_end(key)
    if not job.future.done():
        return None, job.done
    return job.future.result(), 1.0


def wait_for(key: Hashable, text: str, every: float = 1.0) -> None:
    """While ``background(key, ...)`` has no result: a progress bar, redrawn every ``every`` seconds by a fragment
    (the page's other controls answer in between); once the result is there, one full rerun draws it in place."""
    @st.fragment(run_every=every)
    def poll() -> None:
        with _JOBS_LOCK:
            job = _JOBS.get(key)
        if job is None or job.future.done():
            st.rerun()
        st.progress(job.done, text=text)

    poll()


def guarded(key: str, compute: Callable[[], Any]) -> Any:
    """Run ``compute``; on a ValueError show it with st.error and return the last good result (or None).

    Bad input never crashes a page and never turns into NaN: the page keeps showing its last good state.
    """
    store = st.session_state.setdefault("_wviz_last_good", {})
    try:
        result = compute()
    except ValueError as err:
        st.error(f"{err}")
        if key in store:
            st.caption("Showing the last valid result while the input above is fixed.")
        return store.get(key)
    store[key] = result
    return result


def _params() -> dict:
    """The page's settings: every widget value under a plain key (keys starting with _ are wviz's own)."""
    out = {}
    for k, v in st.session_state.items():
        if isinstance(k, str) and not k.startswith("_") and isinstance(v, (bool, int, float, str, list, tuple)):
            out[k] = v
    return out


def show_figure(fig, key: str) -> None:
    """Draw a Plotly figure full width (presentation style when that mode is on), with its export menu below,
    and record it for the lecture bundle."""
    if st.session_state.get("presentation"):
        fig = export.presentation_style(fig)
    st.plotly_chart(fig, key=key, width="stretch")
    lecture = _lecture()
    lecture.figures[key] = fig
    lecture.params = _params()
    _export_menu(fig, key)
    _show_link()  # the widgets above this figure have settled their URL values by now


def view_selector(label: str, views: list[str], key: str, help: str) -> str:
    """Which one of a page's secondary views to draw, bound to the URL.

    Every chart on a page is redrawn by the browser after each slider move, and each one delays the first
    (bench/bench_latency.py measured 3.6-6.6x Streamlit's floor with every view drawn at once): a page draws its
    main figure and one chosen view; the views not drawn stay in the lecture bundle (bundle_figure).
    """
    return st.segmented_control(label, views, default=views[0], required=True, key=key, bind="query-params",
                                help=help)


def bundle_figure(key: str, build: Callable[[], Any]) -> None:
    """Record a figure this run does not draw (a view not chosen): the lecture bundle builds it on click.

    ``build`` makes the Plotly figure from values fixed in this run; a ValueError leaves the figure out.
    """
    presentation = bool(st.session_state.get("presentation"))
    _lecture().figures[key] = (lambda: export.presentation_style(build())) if presentation else build


def built(lecture: export.Lecture) -> export.Lecture:
    """The lecture with every figure left as a builder (bundle_figure) built now; one whose input is invalid
    (ValueError) is left out."""
    figures = {}
    for key, fig in lecture.figures.items():
        try:
            figures[key] = fig() if callable(fig) else fig
        except ValueError:
            continue
    return dataclasses.replace(lecture, figures=figures)


def _export_menu(fig, key: str) -> None:
    """Download buttons for one figure; each file is made only when its button is clicked."""
    name = _slug(fig.layout.title.text or key) or key
    with st.popover("Export", icon=":material/download:", key=f"_export_{key}"):
        have_browser = export.browser_path() is not None
        if not have_browser:
            st.warning(export.NO_BROWSER)
        for fmt in (*export.IMAGE_FORMATS, "html", "csv", "json"):
            make = {"html": lambda: export.to_html(fig), "csv": lambda: export.to_csv(fig),
                    "json": lambda: export.to_json(fig)}.get(fmt, lambda fmt=fmt: export.to_image(fig, fmt))
            st.download_button(fmt.upper(), data=make, file_name=f"{name}.{fmt}", mime=export.MIME[fmt],
                               on_click="ignore", key=f"_export_{key}_{fmt}",
                               disabled=fmt in export.IMAGE_FORMATS and not have_browser,
                               help=f"This figure as {fmt.upper()}.")


def table_editor(default: pd.DataFrame, key: str, where=None, **kwargs) -> pd.DataFrame:
    """st.data_editor whose table is mirrored in the URL (query parameter ``key``, JSON rows), so a shared link
    reproduces edits. The editor's starting table is fixed per session: changing it would reset the edits."""
    start_key = f"_start_{key}"
    if start_key not in st.session_state:
        st.session_state[start_key] = _table_from_url(default, key)
    table = (where or st).data_editor(st.session_state[start_key], key=key, **kwargs)
    rows = json.dumps(table.astype(object).where(table.notna(), None).values.tolist(), default=str,
                      separators=(",", ":"))
    if table.equals(default):
        st.query_params.pop(key, None)
    elif st.query_params.get(key) != rows:
        st.query_params[key] = rows
    _show_link()
    return table


def _table_from_url(default: pd.DataFrame, key: str) -> pd.DataFrame:
    """The table in the URL if it has the default's columns (up to 256 rows), else the default."""
    try:
        rows = json.loads(st.query_params.get(key, "null"))
        if not isinstance(rows, list) or not 0 < len(rows) <= 256 or \
                any(not isinstance(r, list) or len(r) != len(default.columns) for r in rows):
            return default
        table = pd.DataFrame(rows, columns=default.columns)
        return table.astype(default.dtypes.to_dict())
    except (ValueError, TypeError):
        return default


def parse_numbers(text: str, what: str = "value") -> list[float]:
    """'1, 2.5 -3' -> [1.0, 2.5, -3.0]; a clear ValueError naming the piece that is not a number."""
    pieces = [t for t in text.replace(",", " ").replace(";", " ").split() if t]
    if not pieces:
        raise ValueError(f"type at least one {what}, separated by commas or spaces")
    out = []
    for i, t in enumerate(pieces, 1):
        try:
            out.append(float(t))
        except ValueError:
            raise ValueError(f"{what} {i} ({t!r}) is not a number") from None
    return out
