"""Widgets the pages share, each bound to the URL so that a link reproduces it."""
from __future__ import annotations

import numpy as np
import streamlit as st

from wviz.grids import log_values


def log_slider(label: str, lo: float, hi: float, value: float, key: str, help: str, per_decade: int = 12,
               where=None) -> float:
    """A slider over a logarithmic grid from lo to hi (both powers of ten); ``where`` is the container (default:
    the sidebar, where pages keep their controls)."""
    options = log_values(lo, hi, per_decade)
    st.session_state[_grid_key(key)] = tuple(options)
    value = min(options, key=lambda o: abs(np.log(o) - np.log(value)))
    return (where or st.sidebar).select_slider(label, options=options, value=value, key=key, help=help,
                                               format_func=lambda v: f"{v:.3g}", bind="query-params")


def _grid_key(key: str) -> str:
    return f"_log_grid_{key}"


def log_grid(key: str) -> tuple[float, ...]:
    """The options of the log_slider keyed ``key``, drawn earlier in this run (a live figure maps the slider's
    position to them: wviz.ui.drag)."""
    return st.session_state[_grid_key(key)]


def view_selector(label: str, views: list[str], key: str, help: str) -> str:
    """Which one of a page's secondary views to draw (a segmented control)."""
    return st.segmented_control(label, views, default=views[0], required=True, key=key, bind="query-params",
                                help=help)
