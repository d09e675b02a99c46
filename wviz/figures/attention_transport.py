"""Figures of the "Attention as transport" page."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from wviz.figures.common import BOTTOM_LEGEND, PALETTE, decade_ticks, number_text, to_numpy


# Margins: given, not pushed by Plotly (wviz.figures.common, "Margins").
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


# One colour per mechanism on the page, whichever others are chosen and in every view; the keys, where lines show
# them (the tau and rho sweeps), in greys from black (the first key) to light grey (key_greys), another encoding
MECHANISM_COLOURS = {"softmax": PALETTE[0], "sparsemax": PALETTE[1], "entmax": PALETTE[2],
                     "prior-softmax": PALETTE[5], "semi-relaxed OT": PALETTE[3]}


def key_greys(n: int) -> list[str]:
    """n greys from black to light grey (75 % white), one per key."""
    return [f"rgb({v},{v},{v})" for v in np.linspace(0, 191, n).round().astype(int)]


def weights_bars(weights: dict, key_labels: list[str], title: str | None = None) -> go.Figure:
    """Grouped bars: the weight each mechanism puts on each key (every key labelled on the axis, or every k-th
    one with a note in the title when there are too many to read). The legend sits under the figure, so that the
    bars keep the full width on a narrow screen."""
    fig = go.Figure()
    for name, p in weights.items():
        fig.add_bar(x=key_labels, y=to_numpy(p), name=name, marker_color=MECHANISM_COLOURS[name],
                    hovertemplate="%{x}: %{y:.4g}<extra>" + name + "</extra>")
    axis, note = key_ticks(key_labels)
    fig.update_layout(barmode="group", xaxis_title="key j", yaxis_title="weight p_j", yaxis_range=[0, 1.05],
                      xaxis=axis, height=380, margin=dict(t=50 if title or note else 30, b=100, l=70, r=20),
                      legend=BOTTOM_LEGEND)
    if title or note:
        fig.update_layout(title=(title or "Weights") + note)
    return fig


def main_figure(w) -> go.Figure:
    """The page's main figure: the weights p* of every chosen mechanism (a wviz.views.attention_transport.Weights)."""
    return weights_bars(w.p, w.inputs.labels)


def weights_frames(frames, key_labels: list[str]) -> list[go.Figure]:
    """The weights bars at each temperature of a tau sweep (views.attention_transport.Weights, one per frame),
    each titled with its tau; the same axes in every frame so that an animation of them does not jump."""
    return [weights_bars(w.p, key_labels, f"Weights at tau = {number_text(w.tau, 4)}") for w in frames]


def side_by_side(w, key_labels: list[str], side: str) -> go.Figure:
    """One half of the side-by-side view: every chosen mechanism's weights at the tau of ``w``."""
    fig = weights_bars(w.p, key_labels, f"{side}: tau = {w.tau:.3g}")
    return fig.update_layout(margin_b=135)   # the legend in two or three lines in half the column


ARGMINS = ("closed form p*", "numerical argmin")   # the landscape's two markers (the browser moves them by name)
LABEL_SIDES = ("bottom", "top", "top")   # each corner's label: above the top corner, under the bottom ones


def simplex_landscape(land, key_labels: list[str], title: str) -> go.Figure:
    """The objective over the 2-simplex as a heatmap on the triangle (p_1 top, p_2 bottom left, p_3 bottom right),
    the closed-form optimum and the numerical argmin."""
    z = to_numpy(land.values).astype(np.float32)   # half the bytes of float64, as many digits as a colour shows
    z[~np.isfinite(z)] = np.nan   # KL is +inf off the prior's support: leave those cells blank, as outside
    fig = go.Figure(go.Heatmap(
        x=to_numpy(land.x), y=to_numpy(land.y), z=z,
        colorscale="Viridis", reversescale=True, hoverongaps=False, colorbar=dict(title="objective", len=0.8),
        name="objective", hovertemplate="objective %{z:.4f}<extra></extra>"))
    cx, cy = land.xy(np.eye(3))   # the corners, where p_j = 1
    top = cy[0]
    for edge in (0.0, 1.0):   # white over the cells the slanted sides cut: the triangle keeps straight sides
        fig.add_scatter(x=[edge, cx[0], edge, edge], y=[0.0, top, top, 0.0], mode="lines", fill="toself",
                        fillcolor="white", line=dict(width=0), name="outside", hoverinfo="skip", showlegend=False)
    fig.add_scatter(x=[*cx, cx[0]], y=[*cy, cy[0]], mode="lines", line=dict(color="black", width=1), name="simplex",
                    hoverinfo="skip", showlegend=False)
    for name, point, symbol, size in ((ARGMINS[0], land.closed_form, "star", 16),
                                      (ARGMINS[1], land.numerical, "circle-open", 26)):
        p = to_numpy(point)
        x, y = land.xy(p)
        fig.add_scatter(x=[x], y=[y], mode="markers", name=name,
                        marker=dict(symbol=symbol, size=size, color="#D55E00", line=dict(width=3, color="black")),
                        hovertemplate=f"p = ({p[0]:.4f}, {p[1]:.4f}, {p[2]:.4f})<extra>{name}</extra>")
    for x, y, side, label in zip(cx, cy, LABEL_SIDES, key_labels):
        fig.add_annotation(x=x, y=y, text=f"p({label}) = 1", showarrow=False, yanchor=side,
                           yshift=14 if side == "bottom" else -14)   # clear of a marker on the corner
    hidden = dict(visible=False, showgrid=False, zeroline=False)
    # r: the colour bar, b: the legend (margins: top of the file)
    fig.update_layout(title=title, height=500, margin=dict(t=60, b=50, r=95), plot_bgcolor="white",
                      xaxis=dict(hidden, range=[-0.12, 1.12]),
                      yaxis=dict(hidden, range=[-0.1, top + 0.12], scaleanchor="x"),
                      legend=dict(orientation="h", y=-0.05))
    return fig


def tau_sweep_lines(taus, weights, key_labels: list[str], tau_now: float, title: str) -> go.Figure:
    """Weight of each key against tau (log axis labelled per decade), with the current tau marked."""
    taus, w = to_numpy(taus), to_numpy(weights)
    fig = go.Figure()
    for j, (label, grey) in enumerate(zip(key_labels, key_greys(len(key_labels)))):
        fig.add_scatter(x=taus, y=w[:, j], mode="lines", name=label, line=dict(color=grey))
    # on a log axis an annotation's position is log10 of the value (Plotly): placed by hand, it sits on its line
    fig.add_vline(x=tau_now, line_dash="dash", annotation_text=f"tau = {tau_now:.3g}", annotation_x=np.log10(tau_now))
    fig.update_layout(title=title, xaxis=decade_ticks(taus.min(), taus.max()), xaxis_title="tau",
                      yaxis_title="weight p_j", yaxis_range=[-0.02, 1.05], legend_title="key", height=380,
                      margin=dict(t=50, b=72, l=74, r=88))   # r: the legend (margins: top of the file)
    return fig


def attention_heatmap(matrix, title: str, block: tuple[int, int] = (1, 1)) -> go.Figure:
    """An n x m attention matrix (queries down, keys across); ``block`` says how much it was pooled."""
    z = to_numpy(matrix)
    note = "" if block == (1, 1) else f" (block means of {block[0]} x {block[1]})"
    # label each (pooled) cell with the index of the first query / key it covers, counted from 1 as k1, ..., km
    y, x = np.arange(z.shape[0]) * block[0] + 1, np.arange(z.shape[1]) * block[1] + 1
    fig = go.Figure(go.Heatmap(z=z, x=x, y=y, colorscale="Viridis", showscale=True, colorbar=dict(title="weight"),
                               hovertemplate="query i = %{y}, key j = %{x}: %{z:.3g}<extra></extra>"))
    fig.update_layout(title=title + note, xaxis_title="key j", yaxis_title="query i", yaxis_autorange="reversed",
                      height=520, margin=dict(t=50, b=78, l=84, r=96))   # r: the colour bar (margins: top of the file)
    return fig


# ---- semi-relaxed OT ---------------------------------------------------------------------------------------------

def _rho_label(rho: float) -> str:
    return "∞" if np.isinf(rho) else f"{rho:g}"


def column_sums(semi, key_labels: list[str], title: str | None = None, ymax: float | None = None) -> go.Figure:
    """Semi-relaxed OT at one rho (a wviz.views.attention_transport.SemiRelaxed): the page's query's weights, what
    every key receives from all queries (P^T 1) and the keys' target b (hollow) as bars side by side; three
    distributions over the keys, on one axis. ymax: the same axis in every frame of an animation."""
    fig = go.Figure()
    fig.add_bar(x=key_labels, y=to_numpy(semi.weights), name="the query's weights",
                marker_color=MECHANISM_COLOURS["semi-relaxed OT"],
                hovertemplate="%{x}: %{y:.4g}<extra>the query's weights</extra>")
    fig.add_bar(x=key_labels, y=to_numpy(semi.columns), name="column sums P<sup>T</sup>1 (all queries)",
                marker_color=PALETTE[4], hovertemplate="%{x}: %{y:.4g}<extra>column sum</extra>")
    fig.add_bar(x=key_labels, y=to_numpy(semi.b), name="target b", marker=dict(color="rgba(0,0,0,0)",
                                                                                line=dict(color="black", width=2)),
                hovertemplate="%{x}: b = %{y:.4g}<extra></extra>")
    axis, note = key_ticks(key_labels)
    top = ymax or 1.1 * max(float(to_numpy(x).max()) for x in (semi.weights, semi.columns, semi.b))
    fig.update_layout(barmode="group", xaxis=axis, xaxis_title="key j", yaxis_title="mass", yaxis_range=[0, top],
                      title=(title or f"Semi-relaxed OT at rho = {_rho_label(semi.rho)}: columns against b") + note,
                      height=380, margin=dict(t=50, b=140, l=74, r=20),   # b: the legend in two lines at 800 px
                      legend=BOTTOM_LEGEND)
    return fig


def rho_frames(frames, key_labels: list[str]) -> list[go.Figure]:
    """The column-sums figure at each rho of a sweep (SemiRelaxed frames), on one axis, titled with its rho."""
    top = 1.1 * max(float(to_numpy(x).max()) for f in frames for x in (f.weights, f.columns, f.b))
    return [column_sums(f, key_labels, f"Semi-relaxed OT, tau = {f.tau:.3g}, rho = {_rho_label(f.rho)}", top)
            for f in frames]


def rho_sweep_lines(sweep, key_labels: list[str], rho_now: float) -> go.Figure:
    """The road from softmax to Sinkhorn (a wviz.views.attention_transport.RhoSweep): the page's query's weights
    (top) and the keys' column sums (bottom, their targets b dotted) against rho on a log axis, with the closed ends
    at both sides of it (rho = 0: prior-softmax; rho = infinity: the balanced plan) and the current rho marked."""
    rhos = to_numpy(sweep.rhos)
    lo, hi = rhos[0] / 10 ** 0.8, rhos[-1] * 10 ** 0.8   # where the two ends are drawn
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("the query's weights p_j", "column sums (P<sup>T</sup>1)_j; dotted: b_j"))
    zero, inf = sweep.ends
    for j, (label, color) in enumerate(zip(key_labels, key_greys(len(key_labels)))):
        for row, series, ends in ((1, sweep.weights, (zero.weights, inf.weights)),
                                  (2, sweep.columns, (zero.columns, inf.columns))):
            y = [float(ends[0][j]), *to_numpy(series[:, j]), float(ends[1][j])]
            fig.add_scatter(x=[lo, *rhos, hi], y=y, mode="lines+markers", name=label, legendgroup=label,
                            showlegend=row == 1, line=dict(color=color), marker=dict(size=[9, *[0] * len(rhos), 9]),
                            hovertemplate=f"{label}: %{{y:.4g}}<extra></extra>", row=row, col=1)
        fig.add_scatter(x=[lo, hi], y=[float(sweep.b[j])] * 2, mode="lines", line=dict(color=color, dash="dot"),
                        showlegend=False, hoverinfo="skip", row=2, col=1)
    ticks = decade_ticks(rhos[0], rhos[-1])
    ticks.update(tickvals=[lo, *ticks["tickvals"], hi], ticktext=["0", *ticks["ticktext"], "∞"])
    x_now = hi if np.isinf(rho_now) else rho_now
    for row in (1, 2):
        fig.add_vline(x=x_now, line_dash="dash", row=row, col=1)
        fig.update_xaxes(ticks, range=[np.log10(lo) - 0.2, np.log10(hi) + 0.2], row=row, col=1)
    fig.update_xaxes(title_text="rho (how firmly the keys' masses b are held)", row=2, col=1)
    fig.update_layout(title=f"From softmax (rho = 0) to Sinkhorn (rho = ∞), tau = {sweep.tau:.3g}", height=600,
                      legend=dict(BOTTOM_LEGEND, title="key"),
                      margin=dict(t=80, b=102, l=32))   # margins: top of the file
    return fig
