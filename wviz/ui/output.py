"""Figures on the page: drawn with their export menu and recorded for the lecture, or, for the views a page does
not draw, left as builders for the lecture bundle."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Sequence

import plotly.graph_objects as go
import streamlit as st

from wviz import export
from wviz.ui import lecture, state
from wviz.ui.widgets import view_selector


def show_figure(fig: go.Figure, key: str) -> None:
    """Draw a Plotly figure full width (presentation style when that mode is on), with its export menu below,
    and record it for the lecture bundle."""
    if lecture.presenting():
        fig = export.presentation_style(fig)
    st.plotly_chart(fig, key=key, width="stretch")
    lecture.record(key, fig)
    _export_menu(fig, key)
    state.show_link()  # the widgets above this figure have settled their URL values by now


def _export_menu(fig: go.Figure, key: str) -> None:
    """Download buttons for one figure; each file is made only when its button is clicked."""
    name = lecture.slug(fig.layout.title.text or key) or key
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


@dataclass(frozen=True)
class View:
    """One secondary view of a page.

    draw     lays the view out: its controls, figures (show_figure under the keys below) and captions
    figures  the keys of the figures it draws
    build    those figures in that order, at the view's default settings, for the lecture bundle when the view
             is not drawn (called at most once per bundle, on click)
    """

    draw: Callable[[], None]
    figures: tuple[str, ...]
    build: Callable[[], Sequence[go.Figure]]


def figure_view(key: str, build: Callable[[], go.Figure]) -> View:
    """A view that is one figure, drawn under ``key``."""
    return View(lambda: show_figure(build(), key), (key,), lambda: [build()])


def views(choices: dict[str, View], help: str, key: str = "view", label: str = "View") -> str:
    """A page's secondary views, one drawn at a time: every chart on a page is redrawn by the browser after each
    slider move, and each one delays the first, so a page draws its main figures and the one view chosen here
    (bound to the URL). The views not drawn go into the lecture bundle. Returns the chosen view's name."""
    chosen = view_selector(label, list(choices), key, help)
    for name, view in choices.items():
        if name == chosen:
            view.draw()
            continue
        build = functools.cache(view.build)
        for i, fig_key in enumerate(view.figures):
            lecture.defer(fig_key, lambda i=i, build=build: build()[i])
    return chosen
