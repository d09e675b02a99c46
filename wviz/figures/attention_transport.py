"""Figures of the "Attention as transport" page."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from wviz.figures.common import PALETTE, to_numpy


def weights_bars(weights: dict, key_labels: list[str]) -> go.Figure:
    """Grouped bars: the weight each mechanism puts on each key."""
    fig = go.Figure()
    for i, (name, p) in enumerate(weights.items()):
        fig.add_bar(x=key_labels, y=to_numpy(p), name=name, marker_color=PALETTE[i % len(PALETTE)])
    fig.update_layout(barmode="group", xaxis_title="key j", yaxis_title="weight p_j", yaxis_range=[0, 1.02],
                      legend_title="mechanism", margin=dict(t=30, b=40), height=360)
    return fig


def simplex_landscape(land, key_labels: list[str], title: str) -> go.Figure:
    """The objective over the 2-simplex as coloured points, the closed-form optimum and the numerical argmin."""
    pts, vals = to_numpy(land.points), to_numpy(land.values)
    finite = np.isfinite(vals)  # KL is +inf off the prior's support: leave those points blank
    fig = go.Figure()
    fig.add_trace(go.Scatterternary(
        a=pts[finite, 0], b=pts[finite, 1], c=pts[finite, 2], mode="markers", name="objective",
        marker=dict(color=vals[finite], colorscale="Viridis_r", size=6, symbol="triangle-up",
                    colorbar=dict(title="objective", len=0.8)),
        hovertemplate="p = (%{a:.3f}, %{b:.3f}, %{c:.3f})<br>objective %{marker.color:.4f}<extra></extra>"))
    for name, p, symbol, size in (("closed form p*", land.closed_form, "star", 16),
                                  ("numerical argmin", land.numerical, "circle-open", 26)):
        p = to_numpy(p)
        fig.add_trace(go.Scatterternary(a=[p[0]], b=[p[1]], c=[p[2]], mode="markers", name=name,
                                        marker=dict(symbol=symbol, size=size, color="#D55E00",
                                                    line=dict(width=3, color="black"))))
    fig.update_layout(title=title, height=460, margin=dict(t=60, b=30),
                      ternary=dict(aaxis_title=key_labels[0], baxis_title=key_labels[1],
                                   caxis_title=key_labels[2]),
                      legend=dict(orientation="h", y=-0.08))
    return fig


def tau_sweep_lines(taus, weights, key_labels: list[str], tau_now: float, title: str) -> go.Figure:
    """Weight of each key against tau (log axis), with the current tau marked."""
    taus, w = to_numpy(taus), to_numpy(weights)
    fig = go.Figure()
    for j, label in enumerate(key_labels):
        fig.add_scatter(x=taus, y=w[:, j], mode="lines", name=label, line=dict(color=PALETTE[j % len(PALETTE)]))
    fig.add_vline(x=tau_now, line_dash="dash", annotation_text=f"tau = {tau_now:.3g}")
    fig.update_layout(title=title, xaxis_type="log", xaxis_title="tau", yaxis_title="weight p_j",
                      yaxis_range=[-0.02, 1.02], height=380, margin=dict(t=50, b=40))
    return fig


def attention_heatmap(matrix, title: str, block: tuple[int, int] = (1, 1)) -> go.Figure:
    """An n x m attention matrix (queries down, keys across); ``block`` says how much it was pooled."""
    z = to_numpy(matrix)
    note = "" if block == (1, 1) else f" (block means of {block[0]} x {block[1]})"
    # label each (pooled) cell with the index of the first query / key it covers
    y, x = np.arange(z.shape[0]) * block[0], np.arange(z.shape[1]) * block[1]
    fig = go.Figure(go.Heatmap(z=z, x=x, y=y, colorscale="Viridis", colorbar=dict(title="weight"),
                               hovertemplate="query %{y}, key %{x}: %{z:.3g}<extra></extra>"))
    fig.update_layout(title=title + note, xaxis_title="key", yaxis_title="query", yaxis_autorange="reversed",
                      height=520, margin=dict(t=50, b=40))
    return fig
