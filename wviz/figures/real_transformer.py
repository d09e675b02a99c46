"""Figures of the "Real transformer" page: one head's attention under several normalisers, sparsity per head,
per-layer output distances, and the histograms of Figure 4 of 002 (relative deviation of lambda* from alpha z)."""
from __future__ import annotations

import math

import altair as alt
import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from wviz.figures.common import PALETTE, decade_ticks, to_numpy


def token_labels(tokens) -> list[str]:
    """'1 [CLS]', '2 the', ...: unique axis labels even when a word piece repeats (positions counted from 1, as
    layers and heads are)."""
    return [f"{i} {t}" for i, t in enumerate(tokens, 1)]


def _panel_titles(labels) -> list[str]:
    """'entmax (alpha = 1.5, tau = 1)' -> 'entmax<br>alpha = 1.5, tau = 1': name and parameters on two lines, so
    that panel titles side by side do not run into each other."""
    out = []
    for label in labels:
        name, _, params = label.partition(" (")
        out.append(f"{name}<br>{params.rstrip(')')}" if params else label)
    return out


# The attention maps sit two to a row: at 800 px a panel is about PANEL_PX wide, and a token label rotated upright
# needs LABEL_PX (its line height at 12 px, with a gap). Beyond PANEL_PX // LABEL_PX tokens the labels would
# overlap, so every k-th one is labelled and the figure says so.
MAP_COLS, PANEL_PX, LABEL_PX = 2, 330, 14


def label_step(n: int, room_px: float = PANEL_PX) -> int:
    """Label every token when n of them fit in room_px, else every k-th (the smallest k that fits)."""
    return max(1, math.ceil(n * LABEL_PX / room_px))


def _token_axis(labels: list[str], step: int, across: bool) -> dict:
    """An axis that labels every ``step``-th token (every token when step is 1); across (the x axis), long labels
    are rotated upright so that neighbours do not overlap."""
    shown = labels[::step]
    upright = across and max(len(t) for t in labels) > 3
    return dict(tickmode="array", tickvals=shown, ticktext=shown, tickangle=-90 if upright else 0, automargin=True)


def main_figure(one) -> go.Figure:
    """The page's main figure: one head under every normaliser, from a wviz.views.real_transformer.OneHead."""
    return attention_maps(one.maps, one.tokens, one.layer, one.head)


def attention_maps(maps: dict, tokens, layer: int, head: int) -> go.Figure:
    """The (T, T) weights of one head under each normaliser (``maps``: label -> matrix), two panels to a row on
    one colour scale from 0 to 1 (one shared colour bar); queries down, keys across, every token labelled while
    the labels fit (else every k-th, said in the subtitle)."""
    labels = token_labels(tokens)
    names = list(maps)
    n = len(labels)
    cols = min(MAP_COLS, len(names))
    rows = math.ceil(len(names) / cols)
    panel_h = min(560, max(260, LABEL_PX * n))
    step_x, step_y = label_step(n), label_step(n, panel_h)
    # between two rows: the upright key labels and the axis title (at presentation size, 20 px), the next titles
    gap = 0.6 * 20 * max(len(t) for t in labels[::step_x]) + 100
    height = rows * panel_h + (rows - 1) * gap + 170
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=_panel_titles(names), horizontal_spacing=0.1,
                        vertical_spacing=gap / height if rows > 1 else 0.1)
    for i, name in enumerate(names):
        r, col = i // cols + 1, i % cols + 1
        fig.add_trace(go.Heatmap(z=to_numpy(maps[name]), x=labels, y=labels, coloraxis="coloraxis", name=name,
                                 hovertemplate="query %{y}<br>key %{x}<br>weight %{z:.3f}<extra></extra>"),
                      row=r, col=col)
        fig.update_yaxes(autorange="reversed", **_token_axis(labels, step_y, False), showticklabels=col == 1,
                         title_text="query token" if col == 1 else None, row=r, col=col)
        fig.update_xaxes(**_token_axis(labels, step_x, True), title_text="key token", row=r, col=col)
    thinned = [f"one {what} token in {k} labelled" for k, what in ((step_y, "query"), (step_x, "key")) if k > 1]
    title = {"text": f"Layer {layer}, head {head}: attention per normaliser"}
    if thinned:
        title["subtitle_text"] = "; ".join(thinned) + " (hover for all)"
    fig.update_layout(title=title, coloraxis=dict(colorscale="Viridis", cmin=0, cmax=1, colorbar=dict(title="weight")),
                      height=round(height), margin=dict(t=130 if thinned else 100, b=40))
    return fig


def sparsity_per_head(sparsity: dict) -> go.Figure:
    """Fraction of exact zeros of each head (layers 1..L down, heads 1..H across), one panel per normaliser, three
    to a row on one colour scale (one shared colour bar)."""
    names = list(sparsity)
    cols = min(3, len(names))
    rows = math.ceil(len(names) / cols)
    panel, gap = 240, 150        # px; between rows: tick labels, the axis title, two-line panel titles (at 20 px)
    height = rows * panel + (rows - 1) * gap + 150
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=_panel_titles(names), horizontal_spacing=0.08,
                        vertical_spacing=gap / height if rows > 1 else 0.1)
    for i, name in enumerate(names):
        r, col = i // cols + 1, i % cols + 1
        s = to_numpy(sparsity[name])
        L, H = s.shape
        fig.add_trace(go.Heatmap(z=s, x=list(range(1, H + 1)), y=list(range(1, L + 1)), coloraxis="coloraxis",
                                 name=name, hovertemplate="layer %{y}, head %{x}: %{z:.1%} zeros<extra></extra>"),
                      row=r, col=col)
        fig.update_yaxes(autorange="reversed", title_text="layer" if col == 1 else None, dtick=1, row=r, col=col)
        fig.update_xaxes(title_text="head", dtick=2, row=r, col=col)
    fig.update_layout(title="Sparsity per head: fraction of weights exactly 0",
                      coloraxis=dict(colorscale="Cividis", cmin=0, cmax=1, colorbar=dict(title="zeros")),
                      height=height, margin=dict(t=120, b=50))
    return fig


def layer_distances(distances: dict) -> go.Figure:
    """||h'_l - h_l|| / ||h_l|| of each layer's output (layer l = 1..L), one line per normaliser."""
    fig = go.Figure()
    for i, (name, d) in enumerate(distances.items()):
        d = to_numpy(d)
        fig.add_scatter(x=list(range(1, len(d) + 1)), y=d, mode="lines+markers", name=name,
                        line=dict(color=PALETTE[i % len(PALETTE)]))
    fig.update_layout(title="How far each layer's output moves from the original model",
                      xaxis=dict(title="layer", dtick=1),
                      yaxis=dict(title="||h' - h|| / ||h||", rangemode="tozero"),
                      height=360, margin=dict(t=60, b=40), legend=dict(orientation="h", y=-0.25))
    return fig


def rho_sweep(sweep, rho_now: float) -> go.Figure:
    """From the model's softmax to Sinkformer attention (a wviz.views.real_transformer.RhoSweep): the sentence
    embedding's cosine to the model's own (top) and each layer's output distance (bottom) against Sinkhorn's rho on
    a log axis, the two ends drawn at its sides (rho = 0: softmax(S / gamma); rho = infinity: doubly stochastic)
    and the sidebar's rho marked."""
    rhos = to_numpy(sweep.rhos)
    lo, hi = rhos[0] / 10 ** 0.8, rhos[-1] * 10 ** 0.8
    (cos0, dist0), (cos_inf, dist_inf) = sweep.ends
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.1,
                        subplot_titles=("cosine of the sentence embedding to the model's own",
                                        "each layer's output: ||h' - h|| / ||h||"))
    fig.add_scatter(x=[lo, *rhos, hi], y=[cos0, *to_numpy(sweep.cosines), cos_inf], mode="lines+markers",
                    name="cosine", line=dict(color=PALETTE[0]), row=1, col=1,
                    hovertemplate="cosine %{y:.4f}<extra></extra>")
    distances, d0, d_inf = to_numpy(sweep.distances), to_numpy(dist0), to_numpy(dist_inf)
    for layer in range(distances.shape[1]):   # named from 1, as the page's layer selector counts them
        fig.add_scatter(x=[lo, *rhos, hi], y=[d0[layer], *distances[:, layer], d_inf[layer]], mode="lines",
                        name=f"layer {layer + 1}", line=dict(color=PALETTE[(layer + 1) % len(PALETTE)]), row=2, col=1,
                        hovertemplate=f"layer {layer + 1}: %{{y:.3g}}<extra></extra>")
    ticks = decade_ticks(rhos[0], rhos[-1])
    ticks.update(tickvals=[lo, *ticks["tickvals"], hi], ticktext=["0", *ticks["ticktext"], "∞"])
    for row in (1, 2):
        fig.add_vline(x=hi if np.isinf(rho_now) else rho_now, line_dash="dash", row=row, col=1)
        fig.update_xaxes(ticks, range=[np.log10(lo) - 0.2, np.log10(hi) + 0.2], row=row, col=1)
    fig.update_xaxes(title_text="rho (how firmly every key is held to one unit of attention)", row=2, col=1)
    fig.update_yaxes(rangemode="tozero", row=2, col=1)
    fig.update_layout(title=f"From softmax to Sinkformer (gamma = {sweep.gamma:g}, {sweep.n_iter} iterations)",
                      height=560, margin=dict(t=90, b=40),
                      legend=dict(orientation="h", y=-0.2))
    return fig


def deviation_histograms(per_layer, alpha: float, bins: int = 30) -> go.Figure:
    """Figure 4 of 002: per layer, the histogram of ||lambda* - alpha z|| / ||lambda*|| (averaged over heads)
    over all samples, with the mean as a red vertical line. Each panel's y range runs to 15 % above its tallest
    bar, so no bar is cut at the top."""
    dev = to_numpy(per_layer)
    L = dev.shape[0]
    cols = 3
    rows = math.ceil(L / cols)
    means = dev.mean(axis=1)
    fig = make_subplots(rows=rows, cols=cols,
                        subplot_titles=[f"layer {l}: mean {m:.3f}" for l, m in enumerate(means, 1)],
                        vertical_spacing=0.2, horizontal_spacing=0.08)
    edges = np.linspace(0.0, max(float(dev.max()), 1e-12), bins + 1)
    centres = (edges[:-1] + edges[1:]) / 2
    for layer in range(L):
        r, c = layer // cols + 1, layer % cols + 1
        counts, _ = np.histogram(dev[layer], bins=edges)
        fig.add_bar(x=centres, y=counts, width=edges[1] - edges[0], marker_color=PALETTE[0], name=f"layer {layer + 1}",
                    showlegend=False, hovertemplate="deviation %{x:.3f}: %{y} tokens<extra></extra>", row=r, col=c)
        fig.add_vline(x=float(means[layer]), line=dict(color="red", width=2), row=r, col=c)
        fig.update_xaxes(range=[0, edges[-1]], nticks=4, row=r, col=c)
        fig.update_yaxes(range=[0, 1.15 * max(int(counts.max()), 1)], row=r, col=c)
    fig.update_xaxes(title_text="relative deviation", row=rows)
    fig.update_yaxes(title_text="query tokens", col=1)
    fig.update_layout(title=dict(text=f"Figure 4 of 002 on MiniLM (alpha = {alpha:g})",
                                 subtitle_text="||lambda* - alpha z|| / ||lambda*||, averaged over the heads; red: "
                                               "the mean"),
                      height=280 * rows + 170, margin=dict(t=140, b=50), bargap=0)
    return fig


def deviation_per_head(per_head) -> go.Figure:
    """Mean relative deviation of every head (layers 1..L down, heads 1..H across): Appendix C / Figure 5 of 002 in
    short."""
    mean = to_numpy(per_head).mean(axis=-1)
    L, H = mean.shape
    fig = go.Figure(go.Heatmap(z=mean, x=list(range(1, H + 1)), y=list(range(1, L + 1)), colorscale="Cividis",
                               colorbar=dict(title="mean<br>deviation"),
                               hovertemplate="layer %{y}, head %{x}: mean deviation %{z:.3f}<extra></extra>"))
    fig.update_layout(title="Mean relative deviation per head (Appendix C of 002)", height=360,
                      xaxis=dict(title="head", dtick=1), yaxis=dict(title="layer", dtick=1, autorange="reversed"),
                      margin=dict(t=60, b=40))
    return fig


def linked_attention(maps: dict, tokens, layer: int, head: int) -> alt.VConcatChart:
    """An Altair (Vega-Lite) linked view, all in the browser: the heatmap of one head under one normaliser (a
    drop-down under the chart picks which); clicking a cell selects its query (a point selection on the 'query'
    field, the row outlined), and the bars below show that query's weights over the key tokens under every
    normaliser side by side. The selection starts on the first query ([CLS]). Narrow enough for a half screen;
    every token labelled while the labels fit (else Vega hides overlapping ones, and the title says so)."""
    labels = token_labels(tokens)
    names = list(maps)
    n = len(labels)
    table = pd.DataFrame({"normaliser": np.repeat(names, n * n), "query": np.tile(np.repeat(labels, n), len(names)),
                          "key": np.tile(labels, n * len(names)),
                          "weight": np.concatenate([to_numpy(maps[name]).ravel() for name in names])})
    side = min(340, max(180, 22 * n))
    fits = side / n >= LABEL_PX
    upright = max(len(t) for t in labels) > 3
    x_axis = alt.Axis(labelAngle=-90 if upright else 0, labelOverlap="greedy" if not fits else False)
    y_axis = alt.Axis(labelOverlap="greedy" if not fits else False)
    pick = alt.selection_point(name="query_row", fields=["query"], on="click", value=[{"query": labels[0]}],
                               toggle=False, clear=False, empty=False)
    shown = alt.param(name="heatmap_of", value=names[0], bind=alt.binding_select(options=names, name="heatmap: "))
    tip = [alt.Tooltip("normaliser:N"), alt.Tooltip("query:N"), alt.Tooltip("key:N"),
           alt.Tooltip("weight:Q", format=".3f")]
    heat = alt.Chart().transform_filter(alt.datum.normaliser == shown).mark_rect().encode(
        x=alt.X("key:N", sort=labels, title="key token", axis=x_axis),
        y=alt.Y("query:N", sort=labels, title="query token", axis=y_axis),
        color=alt.Color("weight:Q", title="weight", scale=alt.Scale(domain=[0, 1], scheme="viridis"),
                        legend=alt.Legend(orient="right", gradientLength=min(side, 200))),
        stroke=alt.condition(pick, alt.value("#D55E00"), alt.value(None)), strokeWidth=alt.value(2), tooltip=tip,
    ).add_params(pick, shown).properties(width=side, height=side,
                                         title="Click a row to choose its query" + ("" if fits else
                                                                                    " (some labels hidden)"))
    bars = alt.Chart().transform_filter(pick).mark_bar().encode(
        x=alt.X("key:N", sort=labels, title="key token", axis=x_axis),
        xOffset=alt.XOffset("normaliser:N", sort=names),
        y=alt.Y("weight:Q", title="weight", scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("normaliser:N", sort=names, scale=alt.Scale(range=PALETTE[:len(names)]),
                        legend=alt.Legend(orient="bottom", columns=1, title=None, labelLimit=400)),
        tooltip=tip,
    ).properties(width=side, height=200, title="The chosen query's weights, every normaliser")
    return alt.vconcat(heat, bars, data=table).properties(
        title=f"Layer {layer}, head {head}").resolve_scale(color="independent")
