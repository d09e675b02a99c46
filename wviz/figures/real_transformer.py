"""Figures of the "Real transformer" page: one head's attention under several normalisers, sparsity per head,
per-layer output distances, and the histograms of Figure 4 of 002 (relative deviation of lambda* from alpha z)."""
from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from wviz.figures.common import PALETTE, to_numpy


def token_labels(tokens) -> list[str]:
    """'0 [CLS]', '1 the', ...: unique axis labels even when a word piece repeats."""
    return [f"{i} {t}" for i, t in enumerate(tokens)]


def _panel_titles(labels) -> list[str]:
    """'entmax (alpha = 1.5, tau = 1)' -> 'entmax<br>alpha = 1.5, tau = 1': name and parameters on two lines, so
    that four panel titles side by side do not run into each other."""
    out = []
    for label in labels:
        name, _, params = label.partition(" (")
        out.append(f"{name}<br>{params.rstrip(')')}" if params else label)
    return out


def attention_maps(maps: dict, tokens, layer: int, head: int) -> go.Figure:
    """The (T, T) weights of one head under each normaliser (``maps``: label -> matrix), side by side on one
    colour scale from 0 to 1; queries down, keys across."""
    labels = token_labels(tokens)
    names = list(maps)
    fig = make_subplots(rows=1, cols=len(names), subplot_titles=_panel_titles(names),
                        horizontal_spacing=0.12 / max(1, len(names)))
    for col, name in enumerate(names, 1):
        fig.add_trace(go.Heatmap(z=to_numpy(maps[name]), x=labels, y=labels, zmin=0, zmax=1, colorscale="Viridis",
                                 showscale=col == len(names), colorbar=dict(title="weight"), name=name,
                                 hovertemplate="query %{y}<br>key %{x}<br>weight %{z:.3f}<extra></extra>"),
                      row=1, col=col)
        fig.update_yaxes(autorange="reversed", showticklabels=col == 1, row=1, col=col)
        fig.update_xaxes(tickangle=-60, row=1, col=col)
    side = max(420, min(720, 22 * len(labels) + 200))
    fig.update_layout(title=f"Layer {layer}, head {head}: attention under each normaliser (rows: queries)",
                      height=side, margin=dict(t=110, b=60))
    fig.update_annotations(font_size=13)
    return fig


def sparsity_per_head(sparsity: dict) -> go.Figure:
    """Fraction of exact zeros of each head (layers down, heads across), one panel per normaliser."""
    names = list(sparsity)
    fig = make_subplots(rows=1, cols=len(names), subplot_titles=_panel_titles(names), horizontal_spacing=0.06)
    for col, name in enumerate(names, 1):
        s = to_numpy(sparsity[name])
        L, H = s.shape
        fig.add_trace(go.Heatmap(z=s, x=list(range(H)), y=list(range(L)), zmin=0, zmax=1, colorscale="Cividis",
                                 showscale=col == len(names), colorbar=dict(title="zeros"), name=name,
                                 hovertemplate="layer %{y}, head %{x}: %{z:.1%} zeros<extra></extra>"),
                      row=1, col=col)
        fig.update_yaxes(autorange="reversed", title_text="layer" if col == 1 else None, dtick=1, row=1, col=col)
        fig.update_xaxes(title_text="head", dtick=2, row=1, col=col)
    fig.update_layout(title="Sparsity per head: fraction of attention weights that are exactly 0",
                      height=350, margin=dict(t=100, b=50))
    fig.update_annotations(font_size=13)
    return fig


def layer_distances(distances: dict) -> go.Figure:
    """||h'_l - h_l|| / ||h_l|| of each layer's output, one line per normaliser."""
    fig = go.Figure()
    for i, (name, d) in enumerate(distances.items()):
        d = to_numpy(d)
        fig.add_scatter(x=list(range(len(d))), y=d, mode="lines+markers", name=name,
                        line=dict(color=PALETTE[i % len(PALETTE)]))
    fig.update_layout(title="How far each layer's output moves from the original model",
                      xaxis=dict(title="layer", dtick=1),
                      yaxis=dict(title="relative distance ||h' - h|| / ||h||", rangemode="tozero"),
                      height=360, margin=dict(t=60, b=40), legend=dict(orientation="h", y=-0.25))
    return fig


def deviation_histograms(per_layer, alpha: float, bins: int = 30) -> go.Figure:
    """Figure 4 of 002: per layer, the histogram of ||lambda* - alpha z|| / ||lambda*|| (averaged over heads)
    over all samples, with the mean as a red vertical line."""
    dev = to_numpy(per_layer)
    L = dev.shape[0]
    cols = 3
    rows = math.ceil(L / cols)
    means = dev.mean(axis=1)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[f"layer {l}: mean {m:.3f}" for l, m in enumerate(means)],
                        vertical_spacing=0.16, horizontal_spacing=0.06)
    edges = np.linspace(0.0, max(float(dev.max()), 1e-12), bins + 1)
    for layer in range(L):
        r, c = layer // cols + 1, layer % cols + 1
        counts, _ = np.histogram(dev[layer], bins=edges)
        centres = (edges[:-1] + edges[1:]) / 2
        fig.add_bar(x=centres, y=counts, width=edges[1] - edges[0], marker_color=PALETTE[0], name=f"layer {layer}",
                    showlegend=False, hovertemplate="deviation %{x:.3f}: %{y} tokens<extra></extra>", row=r, col=c)
        fig.add_vline(x=float(means[layer]), line=dict(color="red", width=2), row=r, col=c)
        fig.update_xaxes(range=[0, edges[-1]], row=r, col=c)
    fig.update_xaxes(title_text="deviation", row=rows)
    fig.update_yaxes(title_text="query tokens", col=1)
    fig.update_layout(title=f"Figure 4 of 002 on MiniLM (alpha = {alpha:g}): ||lambda* - alpha z|| / ||lambda*||",
                      height=260 * rows + 120, margin=dict(t=90, b=50), bargap=0)
    return fig


def deviation_per_head(per_head) -> go.Figure:
    """Mean relative deviation of every head (layers down, heads across): Appendix C / Figure 5 of 002 in short."""
    mean = to_numpy(per_head).mean(axis=-1)
    L, H = mean.shape
    fig = go.Figure(go.Heatmap(z=mean, x=list(range(H)), y=list(range(L)), colorscale="Cividis",
                               colorbar=dict(title="mean"),
                               hovertemplate="layer %{y}, head %{x}: mean deviation %{z:.3f}<extra></extra>"))
    fig.update_layout(title="Mean relative deviation per head (Appendix C of 002)", height=330,
                      xaxis=dict(title="head", dtick=1), yaxis=dict(title="layer", dtick=1, autorange="reversed"),
                      margin=dict(t=60, b=40))
    return fig
