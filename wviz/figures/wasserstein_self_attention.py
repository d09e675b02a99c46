"""Figures of the "Wasserstein self-attention" page."""
from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from wviz.figures.common import BOTTOM_LEGEND, PALETTE, stacked_rows, to_numpy

# Position labels an axis shows in full, readable at 800 px in presentation mode (18 px text); beyond, one in k, and
# the title says so.
X_TICKS, Y_TICKS = 12, 8


def position_ticks(n: int, most: int) -> tuple[dict, int]:
    """Tick settings labelling positions 1..n (counted from 1, as the note's i and j): all of them up to ``most``,
    else one in k (returned)."""
    step = -(-n // most)
    return dict(tickmode="array", tickvals=list(range(1, n + 1, step)), tickangle=0), step


def main_figure(a) -> go.Figure:
    """The page's main figure: the note's attention beside dot-product attention, from a
    wviz.views.wasserstein_self_attention.Attention."""
    return attention_matrices(a.ours, a.dot)


def attention_matrices(ours, dot) -> go.Figure:
    """The page's main figure: W, A = f(W) of a WSAResult ``ours`` and the attention of ``dot`` (softmax(QK^T /
    sqrt(d))), stacked."""
    return matrices({"W: distance": (ours.W, "W<sub>ij</sub>"), "A = f(W)": (ours.A, "A<sub>ij</sub>"),
                     "softmax(QKᵀ/√d)": (dot.A, "A<sub>ij</sub>")}, "Distances and weights")


def matrices(panels: dict, title: str) -> go.Figure:
    """Several n x n matrices stacked (name -> (matrix, colour bar title)), rows the queries i and columns the keys
    j, each with its own colour scale and a colour bar beside it. Stacked, not side by side: three panels and
    their colour bars in a row leave some 120 px per panel at 800 px, too little for its labels."""
    rows = len(panels)
    panel, gap = 225, 120   # px; between rows: tick labels, the axis title and the next panel's title (at 20 px)
    spacing, area = stacked_rows(rows, panel, gap)
    margin = dict(t=100, b=75, l=75, r=110)
    fig = make_subplots(rows=rows, cols=1, subplot_titles=list(panels), vertical_spacing=spacing)
    n = len(to_numpy(next(iter(panels.values()))[0]))
    xticks, xstep = position_ticks(n, X_TICKS)
    yticks, ystep = position_ticks(n, Y_TICKS)
    for row, (z, scale) in enumerate(panels.values(), 1):
        lo, hi = fig.layout[f"yaxis{'' if row == 1 else row}"].domain   # the colour bar beside its own panel
        positions = list(range(1, n + 1))   # counted from 1, as the note's i and j
        fig.add_trace(go.Heatmap(z=to_numpy(z), x=positions, y=positions, colorscale="Viridis",
                                 colorbar=dict(title=dict(text=scale, side="right"), y=(lo + hi) / 2, len=hi - lo,
                                               thickness=14),
                                 hovertemplate="query %{y}, key %{x}: %{z:.3g}<extra></extra>"), row=row, col=1)
        fig.update_xaxes(title_text="key j", **xticks, row=row, col=1)
        fig.update_yaxes(title_text="query i", autorange="reversed", **yticks, row=row, col=1)
    thinned = [f"one {axis} in {step}" for axis, step in (("key", xstep), ("query", ystep)) if step > 1]
    note = f"<br>labelled: {', '.join(thinned)}" if thinned else ""
    fig.update_layout(title=title + note, height=area + margin["t"] + margin["b"], margin=margin)
    return fig


def sequences(X, outputs: dict, channels: int = 3) -> go.Figure:
    """The first ``channels`` channels of the input X and of each output Y along the sequence."""
    X = to_numpy(X)
    channels = min(channels, X.shape[-1])
    fig = make_subplots(rows=channels, cols=1, shared_xaxes=True, vertical_spacing=0.07,
                        subplot_titles=[f"channel {c + 1}" for c in range(channels)])   # c1, c2, ... as in the CSV
    series = {"input X": X, **{name: to_numpy(Y) for name, Y in outputs.items()}}
    for c in range(channels):
        for i, (name, Z) in enumerate(series.items()):
            if c < Z.shape[-1]:
                fig.add_scatter(x=np.arange(1, len(Z) + 1), y=Z[:, c], mode="lines", name=name, legendgroup=name,
                                showlegend=c == 0,
                                line=dict(color=PALETTE[i % len(PALETTE)], width=2 if i == 0 else 1.5,
                                          dash="dot" if i == 0 else "solid"), row=c + 1, col=1)
    fig.update_xaxes(title_text="position i", row=channels, col=1)
    fig.update_yaxes(title_text="value")
    # the legend at the figure's bottom, under the x title: placed at a fraction of the plot's height below it, it
    # ran into "position i" at 1024 px in presentation mode
    fig.update_layout(title="Input and outputs along the sequence", height=170 * channels + 200,
                      margin=dict(t=60, b=110, l=70), legend=BOTTOM_LEGEND)
    return fig


def flow_diagram(representation: str, weight_map: str) -> go.Figure:
    """The note's pipeline: X -> Q, K, V -> distributions -> W(q_i, k_j) -> A = f(W) -> Y = A V.

    Three columns, the chain turning back along the bottom row: each box has a third of the width, which holds its
    text at 480 px (a projector's 1024 px less the sidebar); six boxes in a row did not and overlapped."""
    boxes = [
        (0.08, 0.62, "X<br>(n x d)"),
        (0.4, 0.9, "Q = X W_Q"), (0.4, 0.62, "K = X W_K"), (0.4, 0.34, "V = X W_V"),
        (0.82, 0.78, f"q_i, k_j as<br>distributions<br>({representation})"),
        (0.82, 0.3, "W_ij =<br>W(q_i, k_j)<br>Wasserstein"),
        (0.52, 0.07, f"A_ij = f(W_ij)<br>({weight_map})"),
        (0.12, 0.07, "Y = A V"),
    ]
    arrows = [(0, 1), (0, 2), (0, 3), (1, 4), (2, 4), (4, 5), (5, 6), (6, 7), (3, 7)]
    fig = go.Figure()
    for i, j in arrows:
        (x0, y0, t0), (x1, y1, t1) = boxes[i], boxes[j]
        fig.add_annotation(x=x1, y=y1, ax=x0, ay=y0, xref="x", yref="y", axref="x", ayref="y", text="",
                           showarrow=True, arrowhead=3, arrowsize=1.2, arrowwidth=1.5, arrowcolor="#777",
                           standoff=_to_edge(t1, x0 - x1, y0 - y1), startstandoff=_to_edge(t0, x1 - x0, y1 - y0))
    for k, (x, y, text) in enumerate(boxes):
        fig.add_annotation(x=x, y=y, text=text, showarrow=False, font=dict(size=13),
                           bgcolor="#FFFFFF", bordercolor=PALETTE[k % len(PALETTE)], borderwidth=2, borderpad=6)
    fig.update_xaxes(visible=False, range=[-0.02, 1.02])
    fig.update_yaxes(visible=False, range=[0, 1])
    fig.update_layout(title="Wasserstein self-attention: small distance, large weight",
                      height=440, margin=dict(t=50, b=10, l=10, r=10), plot_bgcolor="rgba(0,0,0,0)")
    return fig


def _to_edge(text: str, dx: float, dy: float, width: float = 700, height: float = 380) -> float:
    """Pixels from a box's centre to its border towards (dx, dy) (axis units of a width x height plot), so that
    an arrow ends at the box and its head shows; the box's size is estimated from its text (13 px font)."""
    lines = text.split("<br>")
    half_w, half_h = 3.7 * max(map(len, lines)) + 9, 8.5 * len(lines) + 9
    px, py = abs(dx) * width, abs(dy) * height
    return min(half_w / px if px else math.inf, half_h / py if py else math.inf) * math.hypot(px, py) + 2
