"""Figures out of the app and into a lecture: images (PNG, SVG, PDF), interactive HTML, the data behind a figure
(CSV, JSON), a per-page zip bundle, and the presentation style.

Images go through kaleido, which drives the installed Chromium (Debian's ``chromium``). One kaleido browser per
process stays open, so only the first image pays for starting it; an image that takes too long is stopped with a
message and the browser restarted.
"""
from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import functools
import io
import json
import os
import re
import threading
import time
import zipfile
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from wviz.figures.common import DIVERGING_SCALE, PALETTE, PICTURE_SCALE, SCALE_ZERO
from wviz.references import REFERENCES

IMAGE_FORMATS = ("png", "svg", "pdf")
MIME = {"png": "image/png", "svg": "image/svg+xml", "pdf": "application/pdf", "html": "text/html",
        "csv": "text/csv", "json": "application/json", "zip": "application/zip"}
NO_BROWSER = ("PNG, SVG and PDF export needs a Chromium browser (kaleido draws the figure in it), and none was "
              "found. Install Debian's chromium (`sudo apt-get install chromium`, or `make chromium`), or set "
              "BROWSER_PATH to a Chrome/Chromium executable. HTML, CSV and JSON export work without it.")


class ExportError(RuntimeError):
    """An image that cannot be made here (no browser, or one that stopped answering); the message says what to do."""


@functools.lru_cache(maxsize=1)
def browser_path() -> str | None:
    """The Chromium kaleido would use (BROWSER_PATH first, then the usual names), or None if there is none.
    Looked up once per process (pages ask once per figure)."""
    try:   # kaleido's browser driver: without it no image can be drawn, as without a browser
        from choreographer.browsers.chromium import Chromium
    except ImportError:
        return None
    path = Chromium.find_browser(skip_local=False)
    return path if path and os.access(path, os.X_OK) else None


# One image: about 0.15 s in an open browser, 2 s with starting chromium, 3.1 s the slowest of 5058 beside browser
# tests (BENCHMARKS.md); one past this is a browser that stopped answering, and is tried again in a new one.
RENDER_TIMEOUT_S = 30.0
# A lecture bundle's images: the browser waits 180 s for the file (Streamlit's deferred download) and then shows
# only an error, so the figures left when this is spent go into the bundle as CSV alone.
BUNDLE_BUDGET_S = 120.0

_lock = threading.Lock()  # one image at a time: one browser, one tab, shared by every session of the process
_loop: asyncio.AbstractEventLoop | None = None  # the thread that drives the browser (choreographer is asyncio)
_browser = None  # a kaleido.Kaleido opened in _loop, or None until the next image


def _in_loop(coro, timeout: float):
    """Run ``coro`` in the browser's loop (started by then) and wait at most ``timeout`` s; cancel it past that."""
    assert _loop is not None
    future = asyncio.run_coroutine_threadsafe(coro, _loop)
    try:
        return future.result(timeout)
    except concurrent.futures.TimeoutError:
        future.cancel()
        raise


async def _open():
    import kaleido

    # No MathJax, as on the page (Streamlit's Plotly has none): kaleido would load it from a CDN on each reload of
    # its tab, outside its own render timeout, and wait on it offline (BENCHMARKS.md).
    browser = kaleido.Kaleido(mathjax=False)
    await browser.open()
    return browser


def _close() -> None:
    global _browser
    browser, _browser = _browser, None
    if browser is not None:
        with contextlib.suppress(Exception):
            _in_loop(browser.close(), 10)


def _unless_closed(loop: asyncio.AbstractEventLoop, context: dict) -> None:
    """Report the loop's stray exceptions, except those of kaleido's tasks left running in a browser _close()
    shut down (the caller had its ExportError)."""
    from choreographer.channels import ChannelClosedError

    if not isinstance(context.get("exception"), ChannelClosedError):
        loop.default_exception_handler(context)


def _render(fig: go.Figure, fmt: str, scale: float, timeout: float) -> bytes:
    from choreographer.browsers.chromium import ChromeNotFoundError

    global _loop, _browser
    with _lock:
        if browser_path() is None:
            raise ExportError(NO_BROWSER)
        if _loop is None:
            _loop = asyncio.new_event_loop()
            _loop.set_exception_handler(_unless_closed)
            threading.Thread(target=_loop.run_forever, name="wviz-kaleido", daemon=True).start()
            atexit.register(_close)
        for _ in range(2):   # a browser that stopped answering is closed, and the image drawn once more in a new one
            try:
                if _browser is None:
                    _browser = _in_loop(_open(), timeout)
                return _in_loop(_browser.calc_fig(fig, opts=dict(format=fmt, scale=scale)), timeout)
            except concurrent.futures.TimeoutError:
                _close()
            except ChromeNotFoundError:
                raise ExportError(NO_BROWSER) from None
        raise ExportError(f"Drawing the figure as {fmt.upper()} took over {timeout:.0f} s twice, in two browsers, and "
                          "was stopped; try again.")


def to_image(fig: go.Figure, fmt: str, scale: float = 2.0, timeout: float = RENDER_TIMEOUT_S) -> bytes:
    """The figure as PNG (``scale`` x its pixel size, crisp on a projector), SVG or PDF bytes; ExportError if there
    is no browser, or if drawing it takes over ``timeout`` s."""
    if fmt not in IMAGE_FORMATS:
        raise ValueError(f"image format must be one of {', '.join(IMAGE_FORMATS)}, not {fmt!r}")
    return _render(fig, fmt, scale, timeout)


def to_html(fig: go.Figure) -> str:
    """A standalone interactive page: plotly.js is embedded, so it opens offline in a lecture hall."""
    return fig.to_html(include_plotlyjs=True, full_html=True)


def _plain(value):
    """Plotly keeps arrays as numpy (or typed-array dicts in JSON); turn them into lists of numbers/strings."""
    if value is None:
        return None
    arr = np.asarray(value)
    return arr.tolist()


# The coordinates a trace plots, by trace kind: cartesian x/y(/z), ternary a/b/c, polar r/theta, 3-D x/y/z.
_COORDINATES = ("x", "y", "z", "a", "b", "c", "r", "theta")


def _trace_rows(trace, frame: str | None) -> list[dict]:
    """One row per plotted value: its coordinates (and its text, when the trace labels its points) with the
    trace's name and type."""
    base = {"trace": trace.name or trace.type, "type": trace.type}
    if frame is not None:
        base = {"frame": frame, **base}
    columns = {k: np.ravel(v) for k in _COORDINATES if (v := getattr(trace, k, None)) is not None}
    if not columns:
        return []
    n = max(len(v) for v in columns.values())
    text = getattr(trace, "text", None)
    if text is not None and not isinstance(text, str) and len(np.ravel(text)) == n:
        columns["text"] = np.ravel(text)
    return [{**base, **{k: v[i] if i < len(v) else None for k, v in columns.items()}} for i in range(n)]


def _grid_rows(trace, frame: str | None) -> pd.DataFrame:
    """A heatmap or contour as its grid: one row per y, one column per x label, the values in the cells."""
    z = np.asarray(trace.z)
    xs = list(np.asarray(trace.x)) if trace.x is not None else list(range(z.shape[1]))
    ys = list(np.asarray(trace.y)) if trace.y is not None else list(range(z.shape[0]))
    table = pd.DataFrame(z, columns=[str(x) for x in xs])
    table.insert(0, "y", ys)
    table.insert(0, "trace", trace.name or trace.type)
    if frame is not None:
        table.insert(0, "frame", frame)
    return table


def _is_grid(trace) -> bool:
    z = getattr(trace, "z", None)
    return z is not None and np.ndim(z) == 2


def _annotation_rows(fig: go.Figure) -> list[dict]:
    """A diagram drawn with annotations only (no traces): its boxes' positions and text are its data."""
    return [{"trace": "annotation", "type": "annotation", "x": a.x, "y": a.y, "text": a.text}
            for a in fig.layout.annotations if a.text]


def _traces(fig: go.Figure):
    """(trace, frame name or None) for every trace, animation frames included."""
    yield from ((t, None) for t in fig.data)
    for frame in fig.frames or ():
        yield from ((t, str(frame.name)) for t in frame.data)


def figure_table(fig: go.Figure) -> pd.DataFrame:
    """Every value a figure plots. A figure of heatmaps alone gives their grids (a row per y, a column per x:
    compact, and the shape the figure shows); any other figure gives one row per plotted value, animation frames
    named in a 'frame' column, a heatmap among other traces one row per cell; a figure without traces gives its
    annotations (position and text)."""
    traces = list(_traces(fig))
    if traces and all(_is_grid(t) for t, _ in traces):
        return pd.concat([_grid_rows(t, frame) for t, frame in traces], ignore_index=True)
    rows = []
    for trace, frame in traces:
        rows += _cell_rows(trace, frame) if _is_grid(trace) else _trace_rows(trace, frame)
    if not fig.data:
        rows += _annotation_rows(fig)
    table = pd.DataFrame(rows, columns=None if rows else ["trace", "type", "x", "y"])
    first = [c for c in ("frame", "trace", "type", "x", "y", "z") if c in table]
    return table[first + [c for c in table if c not in first]]


def _cell_rows(trace, frame: str | None) -> list[dict]:
    grid = _grid_rows(trace, frame)
    long = grid.melt(id_vars=[c for c in ("frame", "trace", "y") if c in grid], var_name="x", value_name="z")
    return long.assign(type=trace.type).to_dict("records")


def to_csv(fig: go.Figure) -> str:
    """figure_table as CSV, numbers to 6 significant digits (what a plot can show; it keeps big grids small)."""
    return figure_table(fig).to_csv(index=False, float_format="%.6g")


def to_json(fig: go.Figure) -> str:
    """The figure's title and, per trace, its name, type and data arrays (x, y, z, text); a figure without traces
    gives its annotations (x, y, text) instead."""
    def traces(data):
        return [{"name": t.name, "type": t.type,
                 **{k: _plain(getattr(t, k, None)) for k in ("x", "y", "z", "text") if getattr(t, k, None) is not None}}
                for t in data]

    out = {"title": fig.layout.title.text, "traces": traces(fig.data)}
    if fig.frames:
        out["frames"] = [{"name": f.name, "traces": traces(f.data)} for f in fig.frames]
    if not fig.data:
        out["annotations"] = [{k: r[k] for k in ("x", "y", "text")} for r in _annotation_rows(fig)]
    return json.dumps(out, default=lambda v: v.item() if hasattr(v, "item") else str(v))


# Presentation style: no text under 18 px and no line under 3 px, whatever size a figure set for itself.
TEXT_PX, TITLE_PX, LINE_PX = 18, 22, 4


def presentation_style(fig: go.Figure) -> go.Figure:
    """Lecture-hall version of a figure: every text (titles, ticks, axis titles, legend, annotations, colour bars,
    labels on the marks) at least TEXT_PX, lines LINE_PX wide, the Okabe-Ito colour cycle and Cividis for
    heatmaps' scales (all safe for the common colour-vision deficiencies), a grey picture's (PICTURE_SCALE) and a
    signed map's (DIVERGING_SCALE) excepted. Returns a styled copy."""
    fig = go.Figure(fig)
    text, title = dict(size=TEXT_PX), dict(size=TITLE_PX)
    fig.update_layout(font_size=TEXT_PX, title_font_size=TITLE_PX + 2, title_subtitle_font=text, colorway=PALETTE,
                      legend_font=text, legend_title_font=text, hoverlabel_font=text)
    # Room for the title's lines at 24 px, not 17 (else they run into the subplots' titles), and for tick labels,
    # colour bars and legends at 18 px, not 12: given, not pushed by Plotly after a first draw (which draws the whole
    # figure again). The figure grows by what its top and bottom margins grow, so the plot keeps its height.
    m = fig.layout.margin
    scale = {"t": 1.4 if fig.layout.title.text else 1, "l": 1.3, "r": 1.3, "b": 1.3}
    grown = {side: round(k * getattr(m, side)) for side, k in scale.items() if getattr(m, side) is not None}
    if fig.layout.height is not None:
        fig.update_layout(height=fig.layout.height + sum(grown[s] - getattr(m, s) for s in "tb" if s in grown))
    fig.update_layout(margin=grown)
    for axes in (fig.update_xaxes, fig.update_yaxes):
        axes(tickfont=text, title_font=title)
    axis = dict(tickfont=text, title_font=title)
    fig.update_ternaries(aaxis=axis, baxis=axis, caxis=axis)
    fig.update_coloraxes(colorbar_tickfont=text, colorbar_title_font=text)
    fig.update_annotations(font_size=TEXT_PX)
    fig.update_shapes(line_width=LINE_PX - 1, selector=lambda s: s.type in ("line", "path"))
    for trace in fig.data:
        if "colorbar" in trace:
            trace.update(colorbar=dict(tickfont=text, title_font=text))
        if "textfont" in trace:
            trace.update(textfont_size=TEXT_PX)
    fig.update_traces(line_width=LINE_PX, selector=lambda t: t.type in ("scatter", "scatterternary") and t.mode
                      and "lines" in t.mode and t.line.width != 0)   # width 0: an outline meant to be invisible
    fig.update_traces(colorscale="Cividis", selector=lambda t: t.type in ("heatmap", "contour"))
    # and the colour axes that heatmaps share (the Real transformer's, the inspector's); a grey picture keeps its grey
    # and a signed map its diverging scale
    kept = [go.layout.Coloraxis(colorscale=s).colorscale for s in (PICTURE_SCALE, DIVERGING_SCALE)]
    fig.update_coloraxes(colorscale="Cividis", selector=lambda axis: axis.colorscale not in kept)
    cividis_zero = go.layout.Coloraxis(colorscale="Cividis").colorscale[0][1]
    fig.update_shapes(fillcolor=cividis_zero, selector=dict(name=SCALE_ZERO))   # a sparse map's 0 under its points
    return fig


def presentation_altair(chart):
    """Lecture-hall version of an Altair (Vega-Lite) chart, as :func:`presentation_style` for Plotly: axis, legend,
    header and title text at least TEXT_PX, the Okabe-Ito cycle for categories and Cividis for every continuous
    colour scheme (the chart's own schemes included). Returns a styled copy."""
    spec = chart.to_dict()
    text, title = dict(labelFontSize=TEXT_PX, titleFontSize=TITLE_PX), dict(fontSize=TITLE_PX + 2)
    config = spec.setdefault("config", {})
    for part in ("axis", "legend", "header"):
        config[part] = {**config.get(part, {}), **text}
    config["title"] = {**config.get("title", {}), **title, "subtitleFontSize": TEXT_PX}
    config["text"] = {**config.get("text", {}), "fontSize": TEXT_PX}
    config["range"] = {**config.get("range", {}), "category": PALETTE, "heatmap": {"scheme": "cividis"},
                       "ramp": {"scheme": "cividis"}}
    return type(chart).from_dict(_cividis(spec))


def _cividis(spec):
    """The spec with every continuous colour scheme named in it replaced by Cividis."""
    if isinstance(spec, dict):
        return {k: "cividis" if k == "scheme" and isinstance(v, str) else _cividis(v) for k, v in spec.items()}
    if isinstance(spec, list):
        return [_cividis(v) for v in spec]
    return spec


@dataclass
class Lecture:
    """What a page showed in one run: its figures (by key), equations and parameters, for the lecture bundle."""

    title: str
    intro: str = ""
    figures: dict[str, go.Figure] = field(default_factory=dict)
    equations: list[str] = field(default_factory=list)
    params: dict = field(default_factory=dict)


_CITE = re.compile(r"\[([^\]]+)\]\(references#ref-([\w.-]+)\)")   # a page's link to the References page


def _offline(text: str) -> tuple[str, list[str]]:
    """A page's markdown with its links to the References page turned into plain text (a bundle has no References
    page to link to), and the keys it cites, in order."""
    keys = list(dict.fromkeys(key for _, key in _CITE.findall(text)))
    return _CITE.sub(r"\1", text), keys


def _described(fig: go.Figure) -> str:
    """A figure in a few words: its title, or (a page's main figure goes untitled, its page says what it is) what
    its axes and traces show: 'weight p_j over key j: softmax, sparsemax'."""
    if fig.layout.title.text:
        return fig.layout.title.text
    y, x = fig.layout.yaxis.title.text, fig.layout.xaxis.title.text
    names = ", ".join(dict.fromkeys(t.name for t in fig.data if t.name))
    what = f"{y} over {x}" if x and y else (y or x or "a figure")
    return f"{what}: {names}" if names else what


def _readme(lecture: Lecture, not_drawn: dict[str, str]) -> str:
    intro, cited = _offline(lecture.intro)
    lines = [f"# {lecture.title}", "", intro, "", "## Equations", ""]
    lines += [f"$$ {eq} $$\n" for eq in lecture.equations] or ["(none)", ""]
    lines += ["## Parameters", ""] + [f"- `{k}` = {v!r}" for k, v in sorted(lecture.params.items())]
    lines += ["", "## Figures", "", "Each figure as `<name>.svg` (vector, for slides), `<name>.png` (2x pixels) "
              "and `<name>.csv` (the plotted values).", ""]
    lines += [f"- `{key}`: {_described(fig)}" for key, fig in lecture.figures.items()]
    if not_drawn:
        lines += ["", "Not drawn as images (their CSV is here):", ""]
        lines += [f"- `{key}`: {why}" for key, why in not_drawn.items()]
    refs = [REFERENCES[key] for key in cited if key in REFERENCES]
    if refs:
        lines += ["", "## References", ""]
        lines += [f"- {r.short}: {r.citation}" + (f" <{r.url}>" if r.url else "") for r in refs]
    lines += ["", "Made with wviz (attention as optimal transport).", ""]
    return "\n".join(lines)


def lecture_bundle(lecture: Lecture, budget_s: float = BUNDLE_BUDGET_S) -> bytes:
    """A zip: every figure as SVG + PNG + CSV, params.json and a README.md with the equations and parameters.
    A figure whose images cannot be drawn (ExportError), or that comes after ``budget_s`` of drawing, keeps its
    CSV, and the README says why."""
    buf = io.BytesIO()
    not_drawn = {}
    deadline = time.monotonic() + budget_s
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("params.json", json.dumps(lecture.params, indent=2, sort_keys=True, default=str))
        for key, fig in lecture.figures.items():
            zf.writestr(f"{key}.csv", to_csv(fig))
            if time.monotonic() >= deadline:
                not_drawn[key] = (f"the bundle's {budget_s:.0f} s for images ran out (the export browser was slow); "
                                  "download the figure from its own export buttons")
                continue
            try:
                images = {fmt: to_image(fig, fmt) for fmt in ("svg", "png")}
            except ExportError as err:
                not_drawn[key] = str(err)
                continue
            for fmt, data in images.items():
                zf.writestr(f"{key}.{fmt}", data)
        zf.writestr("README.md", _readme(lecture, not_drawn))
    return buf.getvalue()
