"""Figures out of the app and into a lecture: images (PNG, SVG, PDF), interactive HTML, the data behind a figure
(CSV, JSON), a per-page zip bundle, and the presentation style.

Images go through kaleido, which drives the installed Chromium (Debian's ``chromium``). One kaleido server per
process keeps that browser open, so only the first image pays for starting it.
"""
from __future__ import annotations

import atexit
import functools
import io
import json
import os
import threading
import zipfile
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from wviz.figures.common import PALETTE

IMAGE_FORMATS = ("png", "svg", "pdf")
MIME = {"png": "image/png", "svg": "image/svg+xml", "pdf": "application/pdf", "html": "text/html",
        "csv": "text/csv", "json": "application/json", "zip": "application/zip"}
NO_BROWSER = ("PNG, SVG and PDF export needs a Chromium browser (kaleido draws the figure in it), and none was "
              "found. Install Debian's chromium (`sudo apt-get install chromium`, or `make chromium`), or set "
              "BROWSER_PATH to a Chrome/Chromium executable. HTML, CSV and JSON export work without it.")


class ExportError(RuntimeError):
    """An export that cannot be made here (no browser); the message says what to install."""


@functools.lru_cache(maxsize=1)
def browser_path() -> str | None:
    """The Chromium kaleido would use (BROWSER_PATH first, then the usual names), or None if there is none.
    Looked up once per process (pages ask once per figure)."""
    from choreographer.browsers.chromium import Chromium

    path = Chromium.find_browser(skip_local=False)
    return path if path and os.access(path, os.X_OK) else None


_server_lock = threading.Lock()
_server_started = False


def _render(fig: go.Figure, fmt: str, scale: float) -> bytes:
    import kaleido
    from choreographer.browsers.chromium import ChromeNotFoundError

    global _server_started
    # One request at a time: kaleido's sync server is a process-wide singleton shared by every session.
    with _server_lock:
        try:
            if not _server_started:
                if browser_path() is None:
                    raise ExportError(NO_BROWSER)
                kaleido.start_sync_server(silence_warnings=True)
                atexit.register(kaleido.stop_sync_server, silence_warnings=True)
                _server_started = True
            return kaleido.calc_fig_sync(fig, opts=dict(format=fmt, scale=scale))
        except ChromeNotFoundError:
            raise ExportError(NO_BROWSER) from None


def to_image(fig: go.Figure, fmt: str, scale: float = 2.0) -> bytes:
    """The figure as PNG (``scale`` x its pixel size, crisp on a projector), SVG or PDF bytes."""
    if fmt not in IMAGE_FORMATS:
        raise ValueError(f"image format must be one of {', '.join(IMAGE_FORMATS)}, not {fmt!r}")
    return _render(fig, fmt, scale)


def to_html(fig: go.Figure) -> str:
    """A standalone interactive page: plotly.js is embedded, so it opens offline in a lecture hall."""
    return fig.to_html(include_plotlyjs=True, full_html=True)


def _plain(value):
    """Plotly keeps arrays as numpy (or typed-array dicts in JSON); turn them into lists of numbers/strings."""
    if value is None:
        return None
    arr = np.asarray(value)
    return arr.tolist()


def _trace_rows(trace, frame: str | None) -> list[dict]:
    """One row per plotted value: x, y (and z) with the trace's name and type."""
    base = {"trace": trace.name or trace.type, "type": trace.type}
    if frame is not None:
        base = {"frame": frame, **base}
    z = getattr(trace, "z", None)
    if z is not None and np.ndim(z) == 2:  # a heatmap / contour: one row per cell, with its axis labels
        z = np.asarray(z)
        xs = np.asarray(trace.x) if trace.x is not None else np.arange(z.shape[1])
        ys = np.asarray(trace.y) if trace.y is not None else np.arange(z.shape[0])
        return [{**base, "x": xs[c], "y": ys[r], "z": z[r, c]} for r in range(z.shape[0]) for c in range(z.shape[1])]
    columns = {k: np.ravel(v) for k in ("x", "y", "z") if (v := getattr(trace, k, None)) is not None}
    if not columns:
        return []
    n = max(len(v) for v in columns.values())
    return [{**base, **{k: v[i] if i < len(v) else None for k, v in columns.items()}} for i in range(n)]


def _annotation_rows(fig: go.Figure) -> list[dict]:
    """A diagram drawn with annotations only (no traces): its boxes' positions and text are its data."""
    return [{"trace": "annotation", "type": "annotation", "x": a.x, "y": a.y, "text": a.text}
            for a in fig.layout.annotations if a.text]


def figure_table(fig: go.Figure) -> pd.DataFrame:
    """Every value a figure plots, one row each (animation frames included, named in a 'frame' column); a figure
    without traces gives its annotations (position and text)."""
    rows = [r for t in fig.data for r in _trace_rows(t, None)]
    for frame in fig.frames or ():
        rows += [r for t in frame.data for r in _trace_rows(t, str(frame.name))]
    if not fig.data:
        rows += _annotation_rows(fig)
    return pd.DataFrame(rows, columns=None if rows else ["trace", "type", "x", "y"])


def to_csv(fig: go.Figure) -> str:
    return figure_table(fig).to_csv(index=False)


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


def presentation_style(fig: go.Figure) -> go.Figure:
    """Lecture-hall version of a figure: larger text and lines, the Okabe-Ito colour cycle and Cividis for
    continuous scales (both safe for the common colour-vision deficiencies). Returns a styled copy."""
    fig = go.Figure(fig)
    fig.update_layout(font_size=20, title_font_size=24, colorway=PALETTE,
                      legend_font_size=18, hoverlabel_font_size=18)
    fig.update_annotations(font_size=20)
    fig.update_traces(line_width=4, selector=lambda t: t.type == "scatter" and t.mode and "lines" in t.mode)
    fig.update_traces(colorscale="Cividis", selector=lambda t: t.type in ("heatmap", "contour"))
    return fig


@dataclass
class Lecture:
    """What a page showed in one run: its figures (by key), equations and parameters, for the lecture bundle."""

    title: str
    intro: str = ""
    figures: dict[str, go.Figure] = field(default_factory=dict)
    equations: list[str] = field(default_factory=list)
    params: dict = field(default_factory=dict)


def _readme(lecture: Lecture) -> str:
    lines = [f"# {lecture.title}", "", lecture.intro, "", "## Equations", ""]
    lines += [f"$$ {eq} $$\n" for eq in lecture.equations] or ["(none)", ""]
    lines += ["## Parameters", ""] + [f"- `{k}` = {v!r}" for k, v in sorted(lecture.params.items())]
    lines += ["", "## Figures", "", "Each figure as `<name>.svg` (vector, for slides), `<name>.png` (2x pixels) "
              "and `<name>.csv` (the plotted values).", ""]
    lines += [f"- `{key}`: {fig.layout.title.text or ''}" for key, fig in lecture.figures.items()]
    lines += ["", "Made with wviz (attention as optimal transport).", ""]
    return "\n".join(lines)


def lecture_bundle(lecture: Lecture) -> bytes:
    """A zip: every figure as SVG + PNG + CSV, params.json and a README.md with the equations and parameters."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("README.md", _readme(lecture))
        zf.writestr("params.json", json.dumps(lecture.params, indent=2, sort_keys=True, default=str))
        for key, fig in lecture.figures.items():
            zf.writestr(f"{key}.svg", to_image(fig, "svg"))
            zf.writestr(f"{key}.png", to_image(fig, "png"))
            zf.writestr(f"{key}.csv", to_csv(fig))
    return buf.getvalue()
