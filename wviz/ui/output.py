"""Figures on the page: drawn with their export menu and recorded for the lecture, or, for the views a page does
not draw, left as builders for the lecture bundle."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from collections.abc import Callable, Sequence

import plotly.graph_objects as go
import streamlit as st

from wviz import animation as animation_lib
from wviz import export
from wviz.figures.common import same_scale
from wviz.ui import lecture, state, style
from wviz.ui.runs import below, guarded
from wviz.ui.widgets import log_slider, view_selector


def show_figure(fig: go.Figure, key: str) -> None:
    """Draw a Plotly figure full width (presentation style when that mode is on), with its export menu below,
    and record it for the lecture bundle."""
    if style.presenting():
        fig = export.presentation_style(fig)
    st.plotly_chart(fig, key=key, width="stretch")
    lecture.record(key, fig)
    _export_menu(fig, key)
    state.show_link()  # the widgets above this figure have settled their URL values by now


@st.cache_resource(max_entries=128, show_spinner=False)
def _shared(key: str, of: tuple, _build: Callable[[], go.Figure]) -> go.Figure:
    return _build()


def shared_figure(key: str, of: tuple, build: Callable[[], go.Figure]) -> go.Figure:
    """``build()``, the figure ``key`` drawn from ``of``, made once per server and shared by every session.

    ``of`` names everything the figure is drawn from (weights ids, an image's digest, the controls' values): two
    states that differ in any of it must differ in ``of``. For figures of runs the page caches: building a Plotly
    figure is Python holding the GIL while the server answers a first visit's file requests (its cost: BENCHMARKS.md,
    "First load"). A figure is never changed once built (show_figure and the exports style copies).
    """
    return _shared(key, of, build)


def show_chart(chart, key: str, **kwargs) -> None:
    """Draw an Altair (Vega-Lite) chart, in presentation style when that mode is on (:func:`show_figure` for
    Plotly). Its interactions run in the browser; the lecture bundle holds the Plotly figures."""
    st.altair_chart(export.presentation_altair(chart) if style.presenting() else chart, key=key, **kwargs)


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
    live     whether the page's main slider changes it; a view it does not change is drawn below the slider's
             fragment, so that a move does not send it again (runs.below)
    """

    draw: Callable[[], None]
    figures: tuple[str, ...]
    build: Callable[[], Sequence[go.Figure]]
    live: bool = True


def figure_view(key: str, build: Callable[[], go.Figure], live: bool = True, caption: str | None = None,
                of: tuple | None = None) -> View:
    """A view that is one figure, drawn under ``key`` with ``caption`` below it; live=False when the page's main
    slider does not change it; ``of``: the figure is a shared_figure drawn from it."""
    def draw() -> None:
        show_figure(build() if of is None else shared_figure(key, of, build), key)
        if caption:
            st.caption(caption)

    return View(draw, (key,), lambda: [build()], live)


def side_by_side(label: str, key: str, lo: float, hi: float, defaults: tuple[float, float],
                 build: Callable[[str, float], go.Figure], help: str, caption: str) -> View:
    """The "Side by side" view: the page's figure at two values of its main parameter next to each other, on one
    scale (figures.common.same_scale: one colour scale for both heatmaps, the same axis ranges). Each value has its
    own log slider ``label (left|right)`` over lo..hi (keys ``key_left``, ``key_right``, bound to the URL; ``help``
    may name ``{side}``); ``build(side, value)`` makes that side's figure, drawn under side_left / side_right and
    guarded on its own (a bad value shows its message, the other side stays). The page's main slider does not
    change it, so its moves do not send it again (View.live)."""
    sides = ("left", "right")

    def draw() -> None:
        columns, built = st.columns(2), []
        for column, side, default in zip(columns, sides, defaults):
            value = log_slider(f"{label} ({side})", lo, hi, default, key=f"{key}_{side}", where=column,
                               help=help.format(side=side))
            with column:
                built.append(guarded(f"{key}/{side}", functools.partial(build, side, value)))
        drawn = iter(same_scale([fig for fig in built if fig is not None]))
        for column, side, fig in zip(columns, sides, built):
            if fig is not None:
                with column:
                    show_figure(next(drawn), key=f"side_{side}")
        st.caption(caption)

    return View(draw, tuple(f"side_{side}" for side in sides),
                lambda: same_scale([build(side, value) for side, value in zip(sides, defaults)]), live=False)


def views(choices: dict[str, View], help: str, key: str = "view", label: str = "View") -> str:
    """A page's secondary views, one drawn at a time: every chart on a page is redrawn by the browser after each
    slider move, and each one delays the first, so a page draws its main figures and the one view chosen here
    (bound to the URL). The views not drawn go into the lecture bundle. Returns the chosen view's name."""
    chosen = view_selector(label, list(choices), key, help)
    for name, view in choices.items():
        if name == chosen:
            if view.live:
                below(None)   # and a view the last full run drew below goes
                view.draw()
            elif not below(name, view.draw):
                view.draw()
            continue
        build = functools.cache(view.build)
        for i, fig_key in enumerate(view.figures):
            lecture.defer(fig_key, functools.partial(_nth_figure, build, i))
    return chosen


def _nth_figure(build: Callable[[], Sequence[go.Figure]], i: int) -> go.Figure:
    return build()[i]


def example_file(label: str, data: bytes | str, file_name: str, help: str) -> None:
    """A download of an example for the upload above it: a file the page's own parser accepts, to start from."""
    mime = {"csv": "text/csv", "png": "image/png"}.get(file_name.rsplit(".", 1)[-1], "application/octet-stream")
    st.download_button(label, data=data, file_name=file_name, mime=mime, on_click="ignore", help=help,
                       icon=":material/description:", key=f"_example_{file_name}")


def animation(key: str, title: str, frames: Callable[[], Sequence[go.Figure]], fps: float = 4) -> None:
    """GIF and MP4 of ``frames()`` (the page's figures at successive values), made on click with a progress bar,
    then offered for download. A made animation is kept until the page's settings change."""
    store = f"_wviz_animation_{key}"
    with st.popover("Animation for slides", icon=":material/movie:", key=f"_animation_{key}"):
        if export.browser_path() is None:
            st.warning(export.NO_BROWSER)
            return
        st.caption(f"{title}: each frame is the figure above at one step, {fps:g} frames per second.")
        fmt = st.radio("Format", animation_lib.FORMATS, horizontal=True, key=f"_animation_{key}_fmt",
                       format_func=str.upper, help="GIF loops in any slide program; MP4 (H.264) is smaller.")
        settings = state.settings()
        if st.button(f"Make {fmt.upper()}", key=f"_animation_{key}_make", icon=":material/play_circle:",
                     help="Draws every frame (a few seconds each second of animation)."):
            bar = st.progress(0.0, text="Drawing frames...")
            try:
                figures = frames()
                if style.presenting():   # a slide made for the hall reads like the page in the hall
                    figures = [export.presentation_style(f) for f in figures]
                drawn = animation_lib.render(figures, lambda f: bar.progress(f, text=f"Drawing frames... {f:.0%}"))
                bar.progress(1.0, text=f"Encoding {len(drawn)} frames as {fmt.upper()}...")
                st.session_state[store] = (settings, fmt, animation_lib.encode(drawn, fmt, fps))
            except (ValueError, export.ExportError) as err:
                st.error(f"No animation: {style.plain(err)}")
            bar.empty()
        made = st.session_state.get(store)
        if made is not None and made[0] == settings and made[1] == fmt:
            st.download_button(f"Download {fmt.upper()}", data=made[2], file_name=f"{lecture.slug(title)}.{fmt}",
                               mime={"gif": "image/gif", "mp4": "video/mp4"}[fmt], on_click="ignore",
                               icon=":material/download:", key=f"_animation_{key}_download",
                               help="The animation just made, at the settings on the page.")
