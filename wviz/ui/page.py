"""A page's head: title, intro, where it computes, and its lecture panel."""
from __future__ import annotations

import streamlit as st
import torch

from wviz.device import describe, get_device
from wviz.ui import lecture
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
    return device


def page_setup(title: str, intro: str) -> torch.device:
    """Title, one-paragraph intro, the device badge and the lecture panel (presentation mode, share link, lecture
    bundle); returns the device the page computes on."""
    _leave_legacy_pages_mode()
    limit_threads()
    device = device_badge()
    lecture.start(title, intro)
    st.title(title)
    st.markdown(intro)
    return device
