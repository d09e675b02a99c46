"""A page's head: title, intro, its guided experiments, where it computes, reset, and its lecture panel."""
from __future__ import annotations

import html
from collections.abc import Sequence
from urllib.parse import parse_qs

import streamlit as st
import torch

from wviz import ot, references
from wviz.device import describe, get_device
from wviz.guide import Try
from wviz.ui import lecture, state, style
from wviz.ui.process import limit_threads



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


def device_badge() -> torch.device:
    """The sidebar line saying where wviz computes; a bad WVIZ_DEVICE is shown and the CPU used instead."""
    try:
        device = get_device()
    except ValueError as err:
        st.sidebar.error(str(err))
        device = torch.device("cpu")
    st.sidebar.markdown(f"**Computing on:** {describe(device)}")
    if device.type == "cuda":
        st.sidebar.caption(f"Sinkhorn problems of at most {ot.CPU_ROUTE_SIZE:,} entries are solved on the CPU, "
                           "where they are faster than on the GPU; each result says where it was computed.")
    return device


def where_solved(solved_on: str, device: torch.device) -> str:
    """Where a result was computed, for a caption: the page's device, or the CPU for a transport problem small
    enough that wviz.ot solved it there although the page computes on the GPU (OTResult.solved_on)."""
    if solved_on == "cpu" and device.type == "cuda":
        return "the CPU (a transport problem this small is faster there than on the GPU)"
    return str(device)


def cite(key: str, text: str | None = None) -> str:
    """Markdown: a link to the full citation of ``key`` (wviz.references) on the References page."""
    return references.link_text(key, text)


def _link(label: str, query: str, hint: str = "") -> str:
    """HTML: a link to this page with ``query``, in this tab (``hint`` shows on hover). Loading it starts a fresh
    session, so the page opens exactly in the state the URL states (a Markdown link would open a new tab)."""
    return (f'<a href="{html.escape(query)}" target="_self" title="{html.escape(hint)}">'
            f'{html.escape(label)}</a>')


def _reset_link() -> None:
    """Reset to defaults: the page loaded again with no settings in its URL (presentation mode kept)."""
    query = f"?{style.PRESENTATION_PARAM}=true" if style.presenting() else "?"
    hint = "Every setting of this page back to its default (presentation mode stays as it is)"
    st.sidebar.html(f'<div>&#x21bb; {_link("Reset to defaults", query, hint)}</div>')


def _opened_by(item: Try) -> bool:
    """Whether the page's URL holds every setting of ``item``'s link, as the link writes it."""
    wanted = parse_qs(item.query().lstrip("?"), keep_blank_values=True)
    return all(st.query_params.get_all(key) == values for key, values in wanted.items())


def guided(items: Sequence[Try]) -> None:
    """The page's guided experiments: each a link that opens the page in a stated state, and what to watch. On the
    page a link opened, what to watch stays in sight above (the expander closes as the page loads), until a setting
    of the link is changed."""
    if not items:
        return
    for item in items:
        if _opened_by(item):
            st.info(f"**{item.label}**: {item.watch}", icon=":material/lightbulb:")
    with st.expander("Try this", icon=":material/lightbulb:"):
        st.markdown("\n".join(f"- {_link(t.label, style.keep_presenting(t.query()))}: {t.watch}" for t in items),
                    unsafe_allow_html=True)
        st.caption("Each link opens this page with those settings and every other one at its default.")


def page_setup(title: str, intro: str, try_this: Sequence[Try] = (), keys: type | None = None) -> torch.device:
    """Title, one-paragraph intro, the guided experiments, the device badge, Reset to defaults and the lecture
    panel (presentation mode, share link, lecture bundle); returns the device the page computes on. ``keys``, the
    page's views' Keys, are its own settings: no other page's setting reaches it (state.own_page)."""
    _leave_legacy_pages_mode()
    state.own_page(keys)
    limit_threads()
    style.apply(title)
    device = device_badge()
    _reset_link()
    lecture.start(title, intro)
    st.title(title)
    st.markdown(intro)
    guided(try_this)
    return device
