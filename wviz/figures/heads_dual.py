"""Figures of the "Heads solve the dual" page: Sec. 8 / Figure 4 of 002, the relative deviation
||lambda* - alpha z|| / ||lambda*|| of the attention's approximation (16) from the maximiser of the dual (9), per head
and per query token of one sentence (live), and over the bundled corpus (Figure 4's histograms per layer, Appendix
C's mean per head)."""
from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from wviz.figures.common import PALETTE, plotly_text, to_numpy
from wviz.figures.real_transformer import label_step, token_labels

PLOT_PX = 400   # the tokens' heatmap's width beside the sidebar at 800 px: room for its labels at presentation size

# The heatmaps' colour scale runs from 0 to at least this deviation, so that a move of alpha changes the colours (a
# scale fitted to each figure would draw every alpha alike); beyond it the scale grows with the data.
SCALE_MAX = 0.25


def _scale(values: np.ndarray) -> dict:
    return dict(zmin=0.0, zmax=max(SCALE_MAX, float(values.max())), colorscale="Cividis")


def _per_head(mean: np.ndarray, title: dict) -> go.Figure:
    """A deviation per head (layers 1..L down, heads 1..H across) on the page's colour scale; ``title`` the
    layout's (a subtitle gets its room above the plot)."""
    L, H = mean.shape
    room, height = (100, 380) if "subtitle_text" in title else (60, 360)
    fig = go.Figure(go.Heatmap(z=mean, x=list(range(1, H + 1)), y=list(range(1, L + 1)), **_scale(mean),
                               colorbar=dict(title="mean<br>deviation"),
                               hovertemplate="layer %{y}, head %{x}: mean deviation %{z:.4f}<extra></extra>"))
    fig.update_layout(title=title, height=height, xaxis=dict(title="head", dtick=1),
                      yaxis=dict(title="layer", dtick=1, autorange="reversed"), margin=dict(t=room, b=75, l=70, r=105))
    return fig


def main_figure(s) -> go.Figure:
    """The page's main figure, the one its alpha slider redraws: each head's mean deviation over the sentence's
    query tokens, from a wviz.views.heads_dual.SentenceDuals."""
    return _per_head(to_numpy(s.per_head), dict(text=f"This sentence, each head (alpha = {s.alpha:.3g})",
                                                subtitle_text="||lambda* - alpha z|| / ||lambda*||, mean over the "
                                                              "query tokens"))


def tokens_figure(s) -> go.Figure:
    """Each query token's deviation averaged over the heads, per layer (the samples Figure 4 histograms)."""
    mean = to_numpy(s.per_token)
    labels = token_labels(s.tokens)
    step = label_step(len(labels), PLOT_PX)
    # the upright token labels get a margin of their own, sized for presentation mode's 18 px text (0.6 em a
    # character), so that Plotly never pushes it and draws the figure twice
    below = 0.6 * 20 * max(len(t) for t in labels[::step]) + 50
    fig = go.Figure(go.Heatmap(z=mean, x=labels, y=list(range(1, mean.shape[0] + 1)), **_scale(mean),
                               colorbar=dict(title="mean<br>deviation"),
                               hovertemplate="layer %{y}, query %{x}: deviation %{z:.4f}<extra></extra>"))
    fig.update_layout(title=dict(text=f"This sentence, each query token (alpha = {s.alpha:.3g})",
                                 subtitle_text="averaged over the heads of each layer"
                                               + (f"; every {step}th token labelled" if step > 1 else "")),
                      height=300 + below, xaxis=dict(title="query token", tickmode="array", tickvals=labels[::step],
                                                     ticktext=labels[::step], tickangle=-90),
                      yaxis=dict(title="layer", dtick=1, autorange="reversed"),
                      margin=dict(t=100, b=below, l=70, r=105))
    return fig


def deviation_histograms(per_layer, alpha: float, bins: int = 30, model: str = "MiniLM") -> go.Figure:
    """Figure 4 of 002 on ``model`` (its name, drawn as written: an uploaded folder's name is no markup): per
    layer, the histogram of ||lambda* - alpha z|| / ||lambda*|| (averaged over heads) over all samples, with the
    mean as a red vertical line. Each panel's y range runs to 15 % above its tallest bar, so no bar is cut at the
    top."""
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
    bars, lines, axes = [], [], {}
    for layer in range(L):  # one layout update for every panel: Plotly validates each per-subplot call anew
        n = "" if layer == 0 else str(layer + 1)
        counts, _ = np.histogram(dev[layer], bins=edges)
        bars.append(go.Bar(x=centres, y=counts, width=edges[1] - edges[0], marker_color=PALETTE[0], xaxis=f"x{n}",
                           yaxis=f"y{n}", name=f"layer {layer + 1}", showlegend=False,
                           hovertemplate="deviation %{x:.3f}: %{y} tokens<extra></extra>"))
        lines.append(dict(type="line", xref=f"x{n}", yref=f"y{n} domain", x0=float(means[layer]),
                          x1=float(means[layer]), y0=0, y1=1, line=dict(color="red", width=2)))
        axes[f"xaxis{n}"] = dict(range=[0, edges[-1]], nticks=4)
        axes[f"yaxis{n}"] = dict(range=[0, 1.15 * max(int(counts.max()), 1)])
    fig.add_traces(bars)
    fig.update_layout(shapes=lines, **axes)
    fig.update_xaxes(title_text="relative deviation", row=rows)
    fig.update_yaxes(title_text="query tokens", col=1)
    fig.update_layout(title=dict(text=f"Figure 4 of 002 on {plotly_text(model)} (alpha = {alpha:g})",
                                 subtitle_text="||lambda* - alpha z|| / ||lambda*||, averaged over the heads; red: "
                                               "the mean"),
                      height=280 * rows + 170, margin=dict(t=140, b=70, l=75, r=20), bargap=0)
    return fig


def deviation_per_head(per_head) -> go.Figure:
    """Mean relative deviation of every head over the corpus: Appendix C / Figure 5 of 002 in short, on the live
    heatmaps' colour scale (one colour, one deviation, on the whole page)."""
    return _per_head(to_numpy(per_head).mean(axis=-1), dict(text="Mean relative deviation per head (Appendix C of "
                                                                  "002)"))
