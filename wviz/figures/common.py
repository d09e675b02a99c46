"""Small pieces shared by the figure builders."""
from __future__ import annotations

import html
import math

import numpy as np
import plotly.graph_objects as go
import torch

# Okabe-Ito: distinguishable with the common colour-vision deficiencies.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]
# A grey picture's scale (0 black, 1 white): its pixels, which presentation mode keeps grey where it draws every
# other heatmap in Cividis (export.presentation_style)
PICTURE_SCALE = "gray"
# A signed quantity's scale centred at 0 (the inspector's ΔMI), which presentation mode keeps too: Cividis has no
# middle, and ColorBrewer's red-blue is safe for the common colour-vision deficiencies
DIVERGING_SCALE = "RdBu_r"
# The name of a shape filled with a colour scale's 0 (a sparse map drawn as points on it): presentation mode fills it
# with Cividis's 0 as it recolours the scale
SCALE_ZERO = "the colour scale's 0"
# Margins: a figure gives its margins (l, r, t, b) the room its tick labels, axis titles, legend and colour bar take
# at 800 px and at 1024 px in presentation mode (export.presentation_style scales l, r, b by 1.3), in its page's
# opening view and in its other views alike: Streamlit's theme sets l = r = 0 and leaves the rest to Plotly's
# automargin, which would push them after a first draw and draw the whole figure again (ARCHITECTURE.md;
# tests/e2e/test_lecture_hall*.py and tests/e2e/views.py fail on a pushed margin). The figure modules' numbers are
# the room Plotly's pushes measured.
# A legend under the chart, at the bottom of the figure: its bottom margin holds the x axis's labels and title and
# the legend (a legend placed at a fraction of the plot's height below it ran into the axis title when the margin,
# sized for the narrowest width, left a short plot)
BOTTOM_LEGEND = dict(orientation="h", yref="container", yanchor="bottom", y=0, x=0)


def plotly_text(text: object) -> str:
    """``text`` from outside wviz (a tokenizer's token, a model's, a file's or a class's name, a name typed in a
    table or read from a CSV header) as a Plotly figure must get it to draw it literally. Plotly reads a subset of
    HTML in every text it draws (titles, axis and tick labels, legends, hovers, annotations: ``<b>``, ``<br>``,
    ``<s>`` strikes through, ``<a href>`` draws a link) and decodes entities, so ``<``, ``>`` and ``&`` go in as
    entities, which it draws as those characters. In a hover or text template it also reads ``%{...}`` as a
    placeholder (a class named ``%{y}`` would show a number): a word joiner (U+2060, drawn as nothing) after the
    ``%`` keeps it text. Escape the outside part before wviz adds its own markup.

    >>> from wviz.figures.common import plotly_text
    >>> plotly_text("<s>")
    '&lt;s&gt;'
    >>> plotly_text('a&b <a href="x">y</a>')
    'a&amp;b &lt;a href="x"&gt;y&lt;/a&gt;'
    >>> plotly_text("%{y}")
    '%\u2060{y}'
    """
    return html.escape(str(text), quote=False).replace("%{", "%\u2060{")


def to_numpy(x) -> np.ndarray:
    """A tensor on any device (or an array) as a float64 numpy array."""
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", torch.float64).numpy()
    return np.asarray(x, dtype=np.float64)


def number_text(x, digits: int = 4, chars: int | None = None) -> str:
    """x as a table, a metric or a caption shows it: ``digits`` significant digits, with a power of ten when x is
    below 1e-4 or from 10^digits on in size ("6.2e-244", not "0.000000..."; "1.235e4"), whole numbers of an int
    type in full, NaN as "–". ``chars``: the most significant digits (at most ``digits``) that fit in that many
    characters, for a metric in a narrow column. The one number format of every page's tables and metrics."""
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return str(int(x))
    x = float(x)
    if math.isnan(x):
        return "–"
    for d in range(digits, 0, -1):
        mantissa, e, power = f"{x:.{d}g}".partition("e")
        text = mantissa + (f"e{int(power)}" if e else "")
        if chars is None or len(text) <= chars:
            break
    return "0" if text == "-0" else text


def number_tex(x, digits: int = 3) -> str:
    """x for a display equation, as :func:`number_text` writes it but with its power of ten in LaTeX: 6.24 \\times
    10^{-244}, not 6.24e-244 (which LaTeX reads as 6.24 e minus 244)."""
    mantissa, e, power = number_text(x, digits).partition("e")
    return mantissa if not e else rf"{mantissa} \times 10^{{{power}}}"


def vector_tex(v, keep: int = 4) -> str:
    """'(1.06, 0.5, -0.92)' for an equation: a vector's entries by :func:`number_tex`, at most ``keep`` of them
    (the first keep - 1, an ellipsis and the last, then its length) so that the line fits a narrow screen."""
    text = [number_tex(e) for e in to_numpy(v).tolist()]
    if len(text) <= keep:
        return "(" + ", ".join(text) + ")"
    return "(" + ", ".join(text[:keep - 1] + [r"\ldots", text[-1]]) + rf") \in \mathbb{{R}}^{{{len(text)}}}"


def table_text(table):
    """A pandas table for st.dataframe with every number column shown by :func:`number_text` (a Styler: the cells
    keep their numbers, so a column still sorts by value). A column with a missing value (NaN) becomes its text,
    '–' where the value is missing: st.dataframe writes "None" in a missing cell whatever the Styler says."""
    numbers = [c for c in table.columns if table[c].dtype.kind in "fiu"]
    gaps = [c for c in numbers if table[c].isna().any()]
    shown = table.assign(**{c: table[c].map(number_text) for c in gaps}) if gaps else table
    return shown.style.format(number_text, subset=[c for c in numbers if c not in gaps])


def vector_text(v) -> str:
    """'1.06, 0.5, -0.92': a vector's entries to 3 significant digits (:func:`number_text`), for captions."""
    return ", ".join(number_text(x, 3) for x in to_numpy(v).tolist())


MAX_DECADE_LABELS = 13   # a log axis spanning more decades labels every 2nd (3rd...) one


def decade_text(k: int, m: int = 1) -> str:
    """m 10^k as read aloud: plain digits from 0.001 to 5000, else with a power of ten ("2·10<sup>-5</sup>")."""
    if -3 <= k <= 3:
        return f"{m * 10.0 ** k:g}"
    return f"10<sup>{k}</sup>" if m == 1 else f"{m}·10<sup>{k}</sup>"


def decade_ticks(lo: float, hi: float, labels: int = MAX_DECADE_LABELS) -> dict:
    """A log axis from lo to hi (> 0) labelled in full at each power of ten (every k-th when more than ``labels``
    decades: fewer for a short axis, whose labels would touch at the presentation mode's font size), and at 1, 2
    and 5 times each power when fewer than two powers of ten lie in the range; never Plotly's bare leading digits
    ("5, 2, 1, 5, 2, 0.1")."""
    lo, hi = max(float(lo), 1e-300), max(float(hi), 1e-300)
    first, last = int(np.floor(np.log10(lo) + 1e-9)), int(np.ceil(np.log10(hi) - 1e-9))
    inside = sum(lo <= 10.0 ** k <= hi for k in range(first, last + 1))
    if inside < 2:
        ticks = [(k, m) for k in range(first, last + 1) for m in (1, 2, 5)]
    else:
        step = -(-(last - first + 1) // labels)
        ticks = [(k, 1) for k in range(first, last + 1) if k % step == 0] or [(first, 1)]
    return dict(type="log", tickmode="array", tickvals=[m * 10.0 ** k for k, m in ticks],
                ticktext=[decade_text(k, m) for k, m in ticks])


def same_scale(figures: list) -> list:
    """Copies of figures that are drawn side by side, on one scale: every heatmap from the smallest to the largest
    value of all of them (the two plans of a pair, not each its own maximum) and every axis whose range is set
    spanning the ranges of all (the same position on either side means the same place)."""
    out = [go.Figure(f) for f in figures]
    heatmaps = [t for f in out for t in f.data if t.type == "heatmap"]
    if heatmaps:
        lows = [t.zmin if t.zmin is not None else np.nanmin(to_numpy(t.z)) for t in heatmaps]
        highs = [t.zmax if t.zmax is not None else np.nanmax(to_numpy(t.z)) for t in heatmaps]
        for t in heatmaps:
            t.update(zmin=float(min(lows)), zmax=float(max(highs)), zauto=False)
    names = {k for f in out for k in f.layout.to_plotly_json() if k.startswith(("xaxis", "yaxis"))}
    for name in names:
        ranges = [f.layout[name].range for f in out]
        if all(r is not None for r in ranges):
            lo, hi = min(min(r) for r in ranges), max(max(r) for r in ranges)
            for f in out:
                f.layout[name].range = [hi, lo] if f.layout[name].range[0] > f.layout[name].range[1] else [lo, hi]
    return out


def stacked_rows(rows: int, panel: float, gap: float) -> tuple[float, float]:
    """make_subplots' vertical_spacing that leaves ``gap`` px between rows of panels ``panel`` px tall, and the
    height of the plot area that takes (the figure's height less its top and bottom margins): Plotly counts the
    spacing in fractions of the plot area, margins left out."""
    area = rows * panel + (rows - 1) * gap
    return (gap / area if rows > 1 else 0.0), area


def index_ticks(n: int, most: int = 10) -> dict:
    """Tick settings for an axis of positions 1..n (tokens, keys, sources, targets: counted from 1 as the papers'
    i and j): every one up to ``most``, else 1 and the multiples of a round step (1, 10, 20, ...)."""
    step = next(s for s in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000) if n / s <= most or s == 5000)
    ticks = list(range(1, n + 1, step)) if step <= 2 else [1, *range(step, n + 1, step)]
    return dict(tickmode="array", tickvals=ticks, ticktext=[str(t) for t in ticks])
