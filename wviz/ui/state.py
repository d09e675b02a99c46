"""Page state in the URL: the share link, tables mirrored in query parameters, the settings of a run."""
from __future__ import annotations

import contextlib
import json
import re
from contextvars import ContextVar
from urllib.parse import urlencode

import pandas as pd
import streamlit as st
from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

from wviz.ui.style import PRESENTATION_PARAM

_LINK = "_wviz_link"  # session key: (placeholder of the share link, the link it shows)
_PAGE = "_wviz_page"  # session key: (the page of the session's last full run, the URL parameters it owns)
SESSION_WIDE = (PRESENTATION_PARAM,)  # the settings that stay on across pages, in the session and in the URL
_AT_END: ContextVar[bool] = ContextVar("wviz_link_at_end", default=False)  # inside link_at_end()


def link_slot() -> None:
    """Reserve the place where the share link is drawn (the sidebar's lecture panel) and draw it there."""
    st.session_state[_LINK] = (st.empty(), None)
    show_link()


def show_link(force: bool = False) -> None:
    """Draw the share link from the URL as it stands now, into the placeholder of link_slot.

    The URL changes after the link is first drawn within the same run (table_editor writes its table, Streamlit
    corrects a bound widget's value) and no rerun follows, so the link is redrawn after each table and each
    figure: the widgets above them have settled by then, and the link shown is the URL at the end of the run.
    Inside link_at_end() only a forced call draws.
    """
    placeholder, shown = st.session_state.get(_LINK, (None, None))
    if placeholder is None or (_AT_END.get() and not force):
        return
    query = urlencode(st.query_params.to_dict())
    link = f"{st.context.url or ''}{'?' + query if query else ''}"
    if force or link != shown:  # redraw only on a change: one message per new URL, not one per figure
        placeholder.code(link, language=None, wrap_lines=True)
        st.session_state[_LINK] = (placeholder, link)


@contextlib.contextmanager
def link_at_end():
    """Within: show_link() draws nothing; at the end (unless an exception ends it), the link is drawn once, even
    unchanged (a fragment's run: Streamlit removes what the fragment's last run drew and this run did not)."""
    token = _AT_END.set(True)
    try:
        yield
    finally:
        _AT_END.reset(token)
    show_link(force=True)


def settings() -> dict:
    """The page's settings: every widget value under a plain key (keys starting with _ are wviz's own)."""
    return {k: v for k, v in st.session_state.items()
            if isinstance(k, str) and not k.startswith("_") and isinstance(v, (bool, int, float, str, list, tuple))}


def own_page(keys: type | None) -> None:
    """A page's settings are its own. On the first run after the session switched pages (the sidebar's navigation,
    Home's list, st.switch_page), every setting the last page left in the session goes, and so does every URL
    parameter that is not this page's (one of its ``keys``, its views' Keys: :func:`own_params`) or that the last
    page named too; presentation mode stays (SESSION_WIDE). Call it before the page's first widget.

    Streamlit keeps one session_state for every page and names a bound widget's URL parameter by its key, so a key
    that two pages use ('view', 'tau', 'samples') would hand one page's value to the other; the URL names of a
    shared link cannot change. The browser's navigation brings no query; a switch that does (st.switch_page's
    query_params; AppTest's, after which Streamlit 1.67 reads back what it had filtered) keeps this page's own
    parameters only. A session's first run keeps its URL as it is (a link opens in the state it states), and the
    browser's Back or Forward every parameter of this page's, its URL being the page's own as it was."""
    ctx = get_script_run_ctx()
    page, own = (ctx.page_script_hash if ctx is not None else ""), own_params(keys)
    last, last_own = st.session_state.get(_PAGE, (None, None))
    st.session_state[_PAGE] = page, own
    if last is None or last == page:
        return
    left = [k for k in st.session_state if isinstance(k, str) and k not in SESSION_WIDE
            and (not k.startswith("_") or k.startswith(_START))]   # widget values, and tables' starting tables
    for key in left:
        del st.session_state[key]
    back = ctx is not None and ctx.is_history_navigation
    dropped = [k for k in st.query_params if k not in SESSION_WIDE
               and (not own.fullmatch(k) or last_own.fullmatch(k) and not back)]
    for key in dropped:
        del st.query_params[key]
    if dropped:
        _seed_from_url()


def own_params(keys: type | None) -> re.Pattern:
    """The URL parameters a page's Keys name: each constant; a template's ``{}`` any text (``prior_table_{}``); a
    Side by side key (``SIDE_*``) its two sliders, ``<key>_left`` and ``<key>_right``. None names none."""
    names = [(n, re.escape(v).replace(r"\{\}", ".+")) for n, v in vars(keys or object).items()
             if not n.startswith("_") and isinstance(v, str)]
    return re.compile("|".join(f"{v}_(?:left|right)" if n.startswith("SIDE_") else v for n, v in names) or "(?!)")


def table_editor(default: pd.DataFrame, key: str, where=None, **kwargs) -> pd.DataFrame:
    """st.data_editor whose table is mirrored in the URL (query parameter ``key``, JSON rows), so a shared link
    reproduces edits. The editor's starting table is fixed per session: changing it would reset the edits."""
    start_key = _start_key(key)
    if start_key not in st.session_state:
        st.session_state[start_key] = _table_from_url(default, key)
    table = (where or st).data_editor(st.session_state[start_key], key=key, **kwargs)
    rows = json.dumps(table.astype(object).where(table.notna(), None).values.tolist(), default=str,
                      separators=(",", ":"))
    if table.equals(default):
        st.query_params.pop(key, None)
    elif st.query_params.get(key) != rows:
        st.query_params[key] = rows
    show_link()
    return table


def table_from_url(default: pd.DataFrame, key: str) -> pd.DataFrame:
    """The table of ``table_editor(default, key)`` while its editor is not drawn (in a closed lazy expander): the
    edits the URL holds, or the default; the editor starts from it when it is drawn again."""
    table = st.session_state[_start_key(key)] = _table_from_url(default, key)
    return table


_START = "_start_"


def _start_key(key: str) -> str:
    """Where the session keeps the table that the editor ``key`` starts from (table_editor, table_from_url)."""
    return f"{_START}{key}"


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


def renamed_params(renamed: dict[str, str]) -> None:
    """Old links keep working: each URL parameter renamed since a link was shared (old -> new) moves to its new
    name before the page's widgets read the URL; a link that gives both keeps the new one. Call it before the
    widgets."""
    moved = False
    for old, new in renamed.items():
        if old in st.query_params:
            values = st.query_params.get_all(old)
            del st.query_params[old]
            if new not in st.query_params:
                st.query_params[new] = values
                moved = True
    if moved:
        _seed_from_url()


def _seed_from_url() -> None:
    """The URL parameters as st.query_params holds them now are those the page's widgets start from: a bound widget
    takes its first value from the URL as the page was opened (Streamlit keeps a copy of those parameters for
    seeding), not from st.query_params, so that copy is rewritten after a change."""
    ctx = get_script_run_ctx()
    if ctx is not None:
        query = urlencode([(k, v) for k in st.query_params for v in st.query_params.get_all(k)])
        with ctx.session_state.query_params() as qp:
            qp.set_initial_query_params(query)
