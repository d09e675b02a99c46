"""The lecture of the page being drawn: its figures, equations and settings, and the sidebar panel (presentation
mode, share link, lecture bundle) that hands them out."""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

import streamlit as st

from wviz import export
from wviz.ui import state, style

_KEY = "_wviz_lecture"


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def current() -> export.Lecture:
    """The lecture this run records into (page_setup starts a new one every full run)."""
    return st.session_state.setdefault(_KEY, export.Lecture("wviz"))


def start(title: str, intro: str) -> None:
    """A new lecture for this run, and the sidebar panel that offers it."""
    lecture = st.session_state[_KEY] = export.Lecture(title, intro)
    with st.sidebar.expander("Present, share, export", icon=":material/co_present:"):
        # The toggle shows the session's mode, which it changes (style.toggled): on a page reached by the navigation
        # it is a new widget, which would start off (style.presenting)
        st.session_state[style.PRESENTATION_PARAM] = style.presenting()
        st.toggle("Presentation mode", key=style.PRESENTATION_PARAM, bind="query-params", on_change=style.toggled,
                  help="For a projector: sidebar collapsed, toolbar hidden, all text at least 18 px, thicker lines, "
                       "colour-blind-safe colours (Okabe-Ito, Cividis). It travels in the share link.")
        # In a popover: its content is drawn when opened, so a first visit does not load and run the code block's
        # highlighter on the browser's main thread (BENCHMARKS.md, "First load").
        with st.popover("Share link", icon=":material/link:", width="stretch",
                        help="A link to this page with every setting, to copy."):
            st.caption("Link to this page with every setting (uploaded files are not part of it):")
            state.link_slot()
        no_browser = export.browser_path() is None
        # Built on click, after this run has drawn every figure into ``lecture`` (the callable closes over it) and
        # left a builder there for each figure it did not draw (defer).
        st.download_button("Download lecture bundle", data=lambda: export.lecture_bundle(built(lecture)),
                           file_name=f"wviz_{slug(title)}.zip", mime=export.MIME["zip"], on_click="ignore",
                           icon=":material/folder_zip:", key="_wviz_bundle", disabled=no_browser,
                           help="A zip with every figure of this page as SVG, PNG and CSV, the parameters as JSON and "
                                "a README with the equations.")
        if no_browser:
            st.caption(export.NO_BROWSER)


def equation(latex: str) -> None:
    """Show an equation and record it for the lecture bundle's README."""
    st.latex(latex)
    current().equations.append(latex)


def record(key: str, fig) -> None:
    """A figure this run drew, with the settings that made it."""
    lecture = current()
    lecture.figures[key] = fig
    lecture.params = state.settings()


def defer(key: str, build: Callable[[], Any]) -> None:
    """A figure this run does not draw (a view not chosen): ``build`` makes it when the bundle is built, from
    values fixed in this run; a ValueError leaves it out."""
    current().figures[key] = (lambda: export.presentation_style(build())) if style.presenting() else build


def built(lecture: export.Lecture) -> export.Lecture:
    """The lecture with every deferred figure built now; one whose input is invalid (ValueError) is left out."""
    figures = {}
    for key, fig in lecture.figures.items():
        try:
            figures[key] = fig() if callable(fig) else fig
        except ValueError:
            continue
    return dataclasses.replace(lecture, figures=figures)
