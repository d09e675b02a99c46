"""Figures of the "Wasserstein self-attention" page."""
from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from wviz.figures.common import PALETTE, to_numpy


def matrices(panels: dict, title: str) -> go.Figure:
    """Several n x n matrices side by side (name -> matrix), each with its own colour scale."""
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=list(panels), horizontal_spacing=0.06)
    for col, z in enumerate(panels.values(), 1):
        z = to_numpy(z)
        fig.add_trace(go.Heatmap(z=z, colorscale="Viridis", showscale=False,
                                 hovertemplate="i %{y}, j %{x}: %{z:.3g}<extra></extra>"), row=1, col=col)
        fig.update_yaxes(autorange="reversed", row=1, col=col)
    fig.update_layout(title=title, height=380, margin=dict(t=70, b=40))
    return fig


def sequences(X, outputs: dict, channels: int = 3) -> go.Figure:
    """The first ``channels`` channels of the input X and of each output Y along the sequence."""
    X = to_numpy(X)
    channels = min(channels, X.shape[-1])
    fig = make_subplots(rows=channels, cols=1, shared_xaxes=True, vertical_spacing=0.04,
                        subplot_titles=[f"channel {c}" for c in range(channels)])
    series = {"input X": X, **{name: to_numpy(Y) for name, Y in outputs.items()}}
    for c in range(channels):
        for i, (name, Z) in enumerate(series.items()):
            if c < Z.shape[-1]:
                fig.add_scatter(y=Z[:, c], mode="lines", name=name, legendgroup=name, showlegend=c == 0,
                                line=dict(color=PALETTE[i % len(PALETTE)], width=2 if i == 0 else 1.5,
                                          dash="dot" if i == 0 else "solid"), row=c + 1, col=1)
    fig.update_xaxes(title_text="position i", row=channels, col=1)
    fig.update_layout(title="Input and outputs along the sequence", height=160 * channels + 120,
                      margin=dict(t=60, b=40), legend=dict(orientation="h", y=-0.12))
    return fig


def flow_diagram(representation: str, weight_map: str) -> go.Figure:
    """The note's pipeline: X -> Q, K, V -> distributions -> W(q_i, k_j) -> A = f(W) -> Y = A V."""
    boxes = [
        (0.05, 0.5, "X<br>(n x d)"),
        (0.22, 0.8, "Q = X W_Q"), (0.22, 0.5, "K = X W_K"), (0.22, 0.15, "V = X W_V"),
        (0.42, 0.65, f"q_i, k_j as<br>distributions<br>({representation})"),
        (0.6, 0.65, "W_ij = W(q_i, k_j)<br>Wasserstein"),
        (0.78, 0.65, f"A_ij = f(W_ij)<br>({weight_map})"),
        (0.93, 0.4, "Y = A V"),
    ]
    arrows = [(0, 1), (0, 2), (0, 3), (1, 4), (2, 4), (4, 5), (5, 6), (6, 7), (3, 7)]
    fig = go.Figure()
    for i, j in arrows:
        (x0, y0, _), (x1, y1, _) = boxes[i], boxes[j]
        fig.add_annotation(x=x1, y=y1, ax=x0, ay=y0, xref="x", yref="y", axref="x", ayref="y", text="",
                           showarrow=True, arrowhead=3, arrowsize=1.2, arrowwidth=1.5, arrowcolor="#777",
                           standoff=42, startstandoff=38)
    for k, (x, y, text) in enumerate(boxes):
        fig.add_annotation(x=x, y=y, text=text, showarrow=False, font=dict(size=13),
                           bgcolor="#FFFFFF", bordercolor=PALETTE[k % len(PALETTE)], borderwidth=2, borderpad=6)
    fig.update_xaxes(visible=False, range=[-0.02, 1.02])
    fig.update_yaxes(visible=False, range=[0, 1])
    fig.update_layout(title="Wasserstein self-attention (the 000 note): small distance, large weight",
                      height=300, margin=dict(t=50, b=10, l=10, r=10), plot_bgcolor="rgba(0,0,0,0)")
    return fig
