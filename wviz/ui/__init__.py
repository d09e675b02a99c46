"""The only streamlit helpers outside pages/: page set-up, shared widgets, guarded computation, figure output."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import streamlit as st
import torch

from wviz.device import describe, get_device

# Streamlit serves several sessions from one process: more torch threads than cores made a 14 ms loop take
# 3.2 s on a 2-core machine (shared/OT-NOTES.md, item 6).
TORCH_THREADS = 2


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
    """Title, one-paragraph intro and the sidebar badge saying where this page computes; returns the device."""
    _leave_legacy_pages_mode()
    torch.set_num_threads(min(TORCH_THREADS, torch.get_num_threads()))
    try:
        device = get_device()
    except ValueError as err:  # a bad WVIZ_DEVICE: say so and fall back to the CPU rather than die
        st.sidebar.error(str(err))
        device = torch.device("cpu")
    st.sidebar.markdown(f"**Computing on:** {describe(device)}")
    st.title(title)
    st.markdown(intro)
    return device


def log_slider(label: str, lo: float, hi: float, value: float, key: str, help: str, per_decade: int = 12,
               where=None) -> float:
    """A slider over a logarithmic grid from lo to hi (both powers of ten), bound to the URL; ``where`` is the
    container (default: the sidebar, where pages keep their controls)."""
    decades = round(np.log10(hi) - np.log10(lo))
    options = [float(f"{v:.3g}") for v in np.logspace(np.log10(lo), np.log10(hi), decades * per_decade + 1)]
    value = min(options, key=lambda o: abs(np.log(o) - np.log(value)))
    return (where or st.sidebar).select_slider(label, options=options, value=value, key=key, help=help,
                            format_func=lambda v: f"{v:.3g}", bind="query-params")


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


def show_figure(fig, key: str) -> None:
    """Draw a Plotly figure full width."""
    st.plotly_chart(fig, key=key, width="stretch")


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
