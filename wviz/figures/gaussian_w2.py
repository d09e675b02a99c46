"""Figures of the "Gaussian W2 attention" page: Plotly figures, and one Altair (Vega-Lite) chart whose query
selection runs in the browser.

The tokens' names are typed into the page's table (or come with its URL): the Plotly figures draw each as written
(plotly_text), the Altair chart as given (Vega-Lite reads no markup)."""
from __future__ import annotations

import math

import altair as alt
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from wviz.figures.common import BOTTOM_LEGEND, PALETTE, plotly_text, to_numpy

# Margins: given, not pushed by Plotly (wviz.figures.common, "Margins").

MAX_TICKS = 24        # token labels an axis shows in full; beyond, every k-th is labelled and the title says so
LOG_TICKS = [0.01, 0.1, 1.0, 10.0, 100.0]
SWEEP_DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")   # the covariance sweep's lines


def token_ticks(labels: list[str]) -> tuple[dict, str]:
    """Tick settings naming the tokens on a heatmap axis (positions 0..n-1): every name up to MAX_TICKS tokens,
    rotated when long; beyond, one in k (the returned note says so, for the title)."""
    step = -(-len(labels) // MAX_TICKS)
    shown = list(range(0, len(labels), step))
    ticks = dict(tickmode="array", tickvals=shown, ticktext=[plotly_text(labels[i]) for i in shown],
                 tickangle=-45 if max(len(s) for s in labels) > 3 else 0)
    return ticks, "" if step == 1 else f"<br>labelled: one token in {step}"


def _hover_text(labels: list[str]) -> list[list[str]]:
    shown = [plotly_text(n) for n in labels]
    return [[f"query {q}, key {k}" for k in shown] for q in shown]


def _heatmap(z, labels: list[str], colorbar: dict) -> go.Heatmap:
    """An attention heatmap over tokens: rows are queries i, columns keys j, weights on [0, 1], its colour bar
    titled "weight" (placed by ``colorbar``)."""
    n = len(labels)
    return go.Heatmap(z=to_numpy(z), x=list(range(n)), y=list(range(n)), zmin=0, zmax=1, colorscale="Viridis",
                      showscale=True, colorbar=dict(title=dict(text="weight", side="right"), thickness=12, **colorbar),
                      text=_hover_text(labels), hovertemplate="%{text}: %{z:.3f}<extra></extra>")


def token_traces(n: int) -> list[tuple[int, int, int]]:
    """The indices of each token's traces in token_ellipses' figure of n tokens: its 1- and 2-sigma ellipses and its
    mean (the browser moves them while a slider of the query moves)."""
    return [(3 * i, 3 * i + 1, 3 * i + 2) for i in range(n)]


def token_ellipses(means, ellipses: dict, labels: list[str], selected: int) -> go.Figure:
    """Each token as its mean and its 1- and 2-sigma ellipses (traces in token_traces' order); ``ellipses`` maps
    n_sigma -> (n, points, 2) for n_sigma 1 and 2."""
    means = to_numpy(means)
    fig = go.Figure()
    for i, label in enumerate(plotly_text(n) for n in labels):   # each name as drawn (plotly_text)
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
    fig.update_layout(title="Tokens as Gaussians: 1σ solid, 2σ dotted, ★ query", xaxis_title="x",
                      yaxis_title="y", height=480, yaxis_scaleanchor="x", margin=dict(t=50, b=70, l=80, r=85))
    return fig


def main_figure(a) -> go.Figure:
    """The page's main figure: W2 attention beside dot-product attention of the means, from a
    wviz.views.gaussian_w2.Attention."""
    return attention_pair(a.w2, a.dot, a.scene.tokens.names, ("W2: softmax(−W2²/τ)", "dot: softmax(⟨m_i, m_j⟩/τ)"))


def attention_pair(left, right, labels: list[str], titles: tuple[str, str]) -> go.Figure:
    """Two n x n attention matrices side by side on one scale [0, 1] (queries down, keys across), each with its
    colour bar; the right one shares the left one's query axis. Keep ``titles`` short (about 20 characters): in
    an 800 px wide window the figure is some 470 px wide and the two titles share about 300 px."""
    # the gap holds the left colour bar, its ticks and its title (about 70 px) in an 800 px wide window
    fig = make_subplots(rows=1, cols=2, subplot_titles=titles, horizontal_spacing=0.24, shared_yaxes=True)
    ticks, note = token_ticks(labels)
    for col, z in ((1, left), (2, right)):
        end = fig.layout[f"xaxis{'' if col == 1 else col}"].domain[1]
        fig.add_trace(_heatmap(z, labels, dict(x=end + 0.01, xanchor="left")), row=1, col=col)
        fig.update_xaxes(title_text="key j", **ticks, row=1, col=col)
    fig.update_yaxes(autorange="reversed", **ticks)
    fig.update_yaxes(title_text="query i", row=1, col=1)
    fig.update_layout(title=f"Attention weights, rows: queries{note}", height=440, margin=dict(t=90, b=75, l=75, r=95))
    return fig


def attention_heatmap(z, labels: list[str], title: str) -> go.Figure:
    """One n x n attention matrix (queries down, keys across) with its colour bar."""
    ticks, note = token_ticks(labels)
    fig = go.Figure(_heatmap(z, labels, {}))
    fig.update_xaxes(title_text="key j", **ticks)
    fig.update_yaxes(title_text="query i", autorange="reversed", **ticks)
    fig.update_layout(title=title + note, height=400, margin=dict(t=60, b=78, l=75, r=92))
    return fig


def query_weights(weights: dict, labels: list[str], query: str) -> go.Figure:
    """The selected query's weights under each attention, as grouped bars."""
    fig = go.Figure()
    keys = [plotly_text(n) for n in labels]
    for i, (name, w) in enumerate(weights.items()):
        fig.add_bar(x=keys, y=to_numpy(w), name=name, marker_color=PALETTE[i % len(PALETTE)])
    fig.update_xaxes(tickmode="array", tickvals=keys, ticktext=keys)
    fig.update_layout(title=f"Weights of query {plotly_text(query)}", barmode="group", yaxis_range=[0, 1.08],
                      xaxis_title="key j", yaxis_title="weight", height=360, margin=dict(t=50, b=60, l=60),
                      legend=dict(orientation="h", y=1.0, yanchor="bottom", x=1, xanchor="right"))
    return fig


def w2_parts(mean_part, cov_part, labels: list[str], query: str) -> go.Figure:
    """Each key's W2^2 to the query, stacked: ||m_q - m_k||^2 and the covariance (Bures) term."""
    fig = go.Figure()
    keys = [plotly_text(n) for n in labels]
    fig.add_bar(x=keys, y=to_numpy(mean_part), name="means ‖m_q − m_k‖²", marker_color=PALETTE[0])
    fig.add_bar(x=keys, y=to_numpy(cov_part), name="covariances (Bures)", marker_color=PALETTE[1])
    fig.update_xaxes(tickmode="array", tickvals=keys, ticktext=keys)
    fig.update_layout(title=f"W2² from query {plotly_text(query)} to each key", barmode="stack", xaxis_title="key j",
                      yaxis_title="W2²", height=360, margin=dict(t=50, b=105, l=55), legend=BOTTOM_LEGEND)
    return fig


def covariance_sweep(scales, weights, labels: list[str], token: str, now: float = 1.0) -> go.Figure:
    """Weights of the query against a scale factor on one token's covariance (log axis, ticks 0.01 ... 100)."""
    scales, w = to_numpy(scales), to_numpy(weights)
    fig = go.Figure()
    # Two keys' weights can be nearly equal over a stretch (t2 and t4 at the defaults, from 0.3 to 2): each line has
    # its own dash, so the one drawn on top shows the other's colour in its gaps
    for j, label in enumerate(labels):
        fig.add_scatter(x=scales, y=w[:, j], mode="lines", name=plotly_text(label),
                        line=dict(color=PALETTE[j % len(PALETTE)], dash=SWEEP_DASHES[j % len(SWEEP_DASHES)]))
    fig.add_vline(x=now, line_dash="dash")
    fig.add_annotation(x=math.log10(now), y=1.0, yref="y", text="as drawn", showarrow=False, xanchor="left",
                       xshift=4)    # on a log axis an annotation's x is log10 of the value (plotly's convention)
    fig.update_xaxes(type="log", tickmode="array", tickvals=LOG_TICKS, ticktext=[f"{v:g}" for v in LOG_TICKS],
                     title_text=f"factor on the covariance of {plotly_text(token)}")
    fig.update_layout(title=f"How the query's weights move as {plotly_text(token)} widens", yaxis_title="weight",
                      yaxis_range=[-0.02, 1.05], height=380, margin=dict(t=50, b=80, l=80, r=90))
    return fig


def linked_weights(table: pd.DataFrame, order: list[str], selected: str, main: str = "W2") -> alt.Chart:
    """The ``main`` attention as a heatmap above the weights of one query as bars; clicking a cell of the heatmap
    picks its row's query and the bars follow, in the browser (a Vega-Lite point selection on the field "query",
    no round trip to the server). ``table`` has one row per (attention, query, key): columns attention, query,
    key, weight; ``order`` is the tokens' order on both axes, ``selected`` the query picked at first."""
    pick = alt.selection_point(name="query_pick", fields=["query"], on="click", value=[{"query": selected}],
                               clear=False, empty=False)
    x = alt.X("key:N", sort=order, title="key j", axis=alt.Axis(labelAngle=-45 if len(order) > 8 else 0))
    base = alt.Chart(table)
    heat = base.transform_filter(alt.datum.attention == main).mark_rect().encode(
        x=x, y=alt.Y("query:N", sort=order, title="query i"),
        color=alt.Color("weight:Q", scale=alt.Scale(domain=[0, 1], scheme="viridis"), title="weight"),
        stroke=alt.condition(pick, alt.value("#D55E00"), alt.value(None)), strokeWidth=alt.value(3),
        tooltip=["query:N", "key:N", alt.Tooltip("weight:Q", format=".3f")],
    ).add_params(pick).properties(title=f"{main} attention: click a row to pick its query", height=260)
    bars = base.transform_filter(pick).mark_bar().encode(
        x=x, xOffset=alt.XOffset("attention:N"), y=alt.Y("weight:Q", scale=alt.Scale(domain=[0, 1]), title="weight"),
        color=alt.Color("attention:N", scale=alt.Scale(range=PALETTE[:2]), title="attention"),
        tooltip=["attention:N", "query:N", "key:N", alt.Tooltip("weight:Q", format=".3f")],
    ).properties(title="Weights of the picked query", height=220)
    return alt.vconcat(heat, bars).resolve_scale(color="independent").configure_axis(
        labelFontSize=12, titleFontSize=13).configure_title(fontSize=14)
