"""Figures of the "Gaussian W2 attention" page."""
from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from wviz.figures.common import PALETTE, to_numpy


def token_ellipses(means, ellipses: dict, labels: list[str], selected: int) -> go.Figure:
    """Each token as its mean and its 1- and 2-sigma ellipses; ``ellipses`` maps n_sigma -> (n, points, 2)."""
    means = to_numpy(means)
    fig = go.Figure()
    for i, label in enumerate(labels):
        color = PALETTE[i % len(PALETTE)]
        width = 3 if i == selected else 1.5
        for n_sigma, pts in sorted(ellipses.items()):
            e = to_numpy(pts[i])
            fig.add_scatter(x=e[:, 0], y=e[:, 1], mode="lines", line=dict(color=color, width=width,
                            dash="solid" if n_sigma == 1 else "dot"), legendgroup=label, showlegend=False,
                            hoverinfo="skip")
        fig.add_scatter(x=[means[i, 0]], y=[means[i, 1]], mode="markers+text", text=[label],
                        textposition="top right", name=label, legendgroup=label,
                        marker=dict(color=color, size=14 if i == selected else 9,
                                    symbol="star" if i == selected else "circle"))
    fig.update_layout(title="Tokens as Gaussians (solid: 1 sigma, dotted: 2 sigma; star: the query)",
                      height=480, yaxis_scaleanchor="x", margin=dict(t=50, b=40))
    return fig


def attention_pair(left, right, labels: list[str], titles: tuple[str, str]) -> go.Figure:
    """Two n x n attention matrices side by side on one colour scale (queries down, keys across)."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=titles, horizontal_spacing=0.08)
    for col, z in ((1, left), (2, right)):
        fig.add_trace(go.Heatmap(z=to_numpy(z), x=labels, y=labels, zmin=0, zmax=1, colorscale="Viridis",
                                 showscale=col == 2, colorbar=dict(title="weight"),
                                 hovertemplate="query %{y}, key %{x}: %{z:.3f}<extra></extra>"), row=1, col=col)
        fig.update_yaxes(autorange="reversed", row=1, col=col)
    fig.update_layout(height=420, margin=dict(t=60, b=40))
    return fig


def query_weights(weights: dict, labels: list[str], query: str) -> go.Figure:
    """The selected query's weights under each attention, as grouped bars."""
    fig = go.Figure()
    for i, (name, w) in enumerate(weights.items()):
        fig.add_bar(x=labels, y=to_numpy(w), name=name, marker_color=PALETTE[i % len(PALETTE)])
    fig.update_layout(title=f"Weights of query {query}", barmode="group", yaxis_range=[0, 1.02],
                      xaxis_title="key", yaxis_title="weight", height=360, margin=dict(t=50, b=40))
    return fig


def w2_parts(mean_part, cov_part, labels: list[str], query: str) -> go.Figure:
    """Each key's W2^2 to the query, stacked: ||m_q - m_k||^2 and the covariance (Bures) term."""
    fig = go.Figure()
    fig.add_bar(x=labels, y=to_numpy(mean_part), name="mean part ||m_q - m_k||^2", marker_color=PALETTE[0])
    fig.add_bar(x=labels, y=to_numpy(cov_part), name="covariance part (Bures)", marker_color=PALETTE[1])
    fig.update_layout(title=f"W2^2 from query {query} to each key", barmode="stack", xaxis_title="key",
                      yaxis_title="W2^2", height=360, margin=dict(t=50, b=40), legend=dict(orientation="h", y=-0.2))
    return fig


def covariance_sweep(scales, weights, labels: list[str], token: str, now: float = 1.0) -> go.Figure:
    """Weights of the query against a scale factor on one token's covariance (log axis)."""
    scales, w = to_numpy(scales), to_numpy(weights)
    fig = go.Figure()
    for j, label in enumerate(labels):
        fig.add_scatter(x=scales, y=w[:, j], mode="lines", name=label, line=dict(color=PALETTE[j % len(PALETTE)]))
    fig.add_vline(x=now, line_dash="dash", annotation_text="as drawn")
    fig.update_layout(title=f"How the query's weights move as the covariance of {token} grows",
                      xaxis_type="log", xaxis_title=f"scale factor on the covariance of {token}",
                      yaxis_title="weight", yaxis_range=[-0.02, 1.02], height=380, margin=dict(t=50, b=40))
    return fig
