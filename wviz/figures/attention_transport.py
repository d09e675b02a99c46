"""Figures of the "Attention as transport" page."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from wviz.figures.common import PALETTE, decade_ticks, to_numpy


MAX_KEY_LABELS = 24   # more labels than this do not fit a 800 px wide screen even upright


def key_ticks(labels: list[str]) -> tuple[dict, str]:
    """A category axis that labels every key (upright when there are many), or every k-th key when there are more
    than MAX_KEY_LABELS; the second value is the note saying so for the title ("" when every key is labelled)."""
    step = -(-len(labels) // MAX_KEY_LABELS)
    shown = list(labels)[::step]
    note = "" if step == 1 else f" (every {_ordinal(step)} key labelled)"
    return dict(tickmode="array", tickvals=shown, ticktext=shown, tickangle=-90 if len(shown) > 12 else 0,
                automargin=True), note


def _ordinal(k: int) -> str:
    return f"{k}{'nd' if k == 2 else 'rd' if k == 3 else 'th'}"


def weights_bars(weights: dict, key_labels: list[str], title: str | None = None) -> go.Figure:
    """Grouped bars: the weight each mechanism puts on each key (every key labelled on the axis, or every k-th
    one with a note in the title when there are too many to read). The legend sits under the figure, so that the
    bars keep the full width on a narrow screen."""
    fig = go.Figure()
    for i, (name, p) in enumerate(weights.items()):
        fig.add_bar(x=key_labels, y=to_numpy(p), name=name, marker_color=PALETTE[i % len(PALETTE)],
                    hovertemplate="%{x}: %{y:.4g}<extra>" + name + "</extra>")
    axis, note = key_ticks(key_labels)
    fig.update_layout(barmode="group", xaxis_title="key j", yaxis_title="weight p_j", yaxis_range=[0, 1.05],
                      xaxis=axis, height=380, margin=dict(t=50 if title or note else 30, b=40, r=20),
                      legend=dict(orientation="h", yref="container", y=0, yanchor="bottom", x=0))
    if title or note:
        fig.update_layout(title=(title or "Weights") + note)
    return fig


def weights_frames(frames, key_labels: list[str]) -> list[go.Figure]:
    """The weights bars at each temperature of a tau sweep (views.attention_transport.Weights, one per frame),
    each titled with its tau; the same axes in every frame so that an animation of them does not jump."""
    return [weights_bars(w.p, key_labels, f"Weights at tau = {w.tau:.3g}") for w in frames]


def side_by_side(w, key_labels: list[str], side: str) -> go.Figure:
    """One half of the side-by-side view: every chosen mechanism's weights at the tau of ``w``."""
    return weights_bars(w.p, key_labels, f"{side}: tau = {w.tau:.3g}")


def simplex_landscape(land, key_labels: list[str], title: str) -> go.Figure:
    """The objective over the 2-simplex as coloured points, the closed-form optimum and the numerical argmin."""
    pts, vals = to_numpy(land.points), to_numpy(land.values)
    finite = np.isfinite(vals)  # KL is +inf off the prior's support: leave those points blank
    fig = go.Figure()
    fig.add_trace(go.Scatterternary(
        a=pts[finite, 0], b=pts[finite, 1], c=pts[finite, 2], mode="markers", name="objective",
        marker=dict(color=vals[finite], colorscale="Viridis_r", size=12, symbol="triangle-up", showscale=True,
                    colorbar=dict(title="objective", len=0.8)),
        hovertemplate="p = (%{a:.3f}, %{b:.3f}, %{c:.3f})<br>objective %{marker.color:.4f}<extra></extra>"))
    for name, p, symbol, size in (("closed form p*", land.closed_form, "star", 16),
                                  ("numerical argmin", land.numerical, "circle-open", 26)):
        p = to_numpy(p)
        fig.add_trace(go.Scatterternary(a=[p[0]], b=[p[1]], c=[p[2]], mode="markers", name=name,
                                        marker=dict(symbol=symbol, size=size, color="#D55E00",
                                                    line=dict(width=3, color="black"))))
    fig.update_layout(title=title, height=500, margin=dict(t=100, b=30),   # room between the title and p(k1)
                      ternary=dict(aaxis_title=f"p({key_labels[0]})", baxis_title=f"p({key_labels[1]})",
                                   caxis_title=f"p({key_labels[2]})"),
                      legend=dict(orientation="h", y=-0.1))
    return fig


def tau_sweep_lines(taus, weights, key_labels: list[str], tau_now: float, title: str) -> go.Figure:
    """Weight of each key against tau (log axis labelled per decade), with the current tau marked."""
    taus, w = to_numpy(taus), to_numpy(weights)
    fig = go.Figure()
    for j, label in enumerate(key_labels):
        fig.add_scatter(x=taus, y=w[:, j], mode="lines", name=label, line=dict(color=PALETTE[j % len(PALETTE)]))
    fig.add_vline(x=tau_now, line_dash="dash", annotation_text=f"tau = {tau_now:.3g}")
    fig.update_layout(title=title, xaxis=decade_ticks(taus.min(), taus.max()), xaxis_title="tau",
                      yaxis_title="weight p_j", yaxis_range=[-0.02, 1.05], legend_title="key", height=380,
                      margin=dict(t=50, b=40))
    return fig


def attention_heatmap(matrix, title: str, block: tuple[int, int] = (1, 1)) -> go.Figure:
    """An n x m attention matrix (queries down, keys across); ``block`` says how much it was pooled."""
    z = to_numpy(matrix)
    note = "" if block == (1, 1) else f" (block means of {block[0]} x {block[1]})"
    # label each (pooled) cell with the index of the first query / key it covers
    y, x = np.arange(z.shape[0]) * block[0], np.arange(z.shape[1]) * block[1]
    fig = go.Figure(go.Heatmap(z=z, x=x, y=y, colorscale="Viridis", showscale=True, colorbar=dict(title="weight"),
                               hovertemplate="query i = %{y}, key j = %{x}: %{z:.3g}<extra></extra>"))
    fig.update_layout(title=title + note, xaxis_title="key j", yaxis_title="query i", yaxis_autorange="reversed",
                      height=520, margin=dict(t=50, b=40))
    return fig
