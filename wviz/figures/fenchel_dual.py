"""Figures of the "Attention solves a dual problem" page (source: 002).

The templates' names are typed into the page's tables (or come with its URL): each is drawn as written
(plotly_text), on an axis, in a label and in a title."""
from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from wviz.figures.common import BOTTOM_LEGEND, PALETTE, decade_ticks, plotly_text, to_numpy

# Figure 3 of 002: orange templates, dark blue evidence, the exact h orange-red (Okabe-Ito's vermilion), (18) pink
# (reddish purple), (15) green; the Try sentences name them so
TEMPLATE, EVIDENCE, EXACT, FIRST, SECOND = PALETTE[1], "#1f3b73", PALETTE[5], PALETTE[3], PALETTE[2]

# Margins: given, not pushed by Plotly (wviz.figures.common, "Margins").


def name_ticks(names: list[str]) -> dict:
    """A category axis that labels every template (slanted when the names are long or many, none dropped), its
    categories the names as drawn (plotly_text)."""
    slant = len(names) > 8 or max((len(n) for n in names), default=0) > 6
    shown = [plotly_text(n) for n in names]
    return dict(tickmode="array", tickvals=shown, ticktext=shown, tickangle=-45 if slant else 0, automargin=True)


def text_side(dx: float, dy: float) -> str:
    """The textposition that puts a point's label on the side (dx, dy) of it ('top right', 'middle left', ...):
    the side away from what would cover it."""
    n = math.hypot(dx, dy) or 1.0
    rows = "top" if dy / n > 0.38 else "bottom" if dy / n < -0.38 else "middle"   # 0.38: sin 22.5 degrees
    cols = "right" if dx / n > 0.38 else "left" if dx / n < -0.38 else "center"
    return f"{rows} {cols}" if (rows, cols) != ("middle", "center") else "top center"


def apart_from_neighbours(points, near: float = 1.0) -> list[str]:
    """Each point's label above it ('top center'), but below it when its nearest other point lies closer than
    ``near`` and higher (or as high and to the right): of two close points (t3 and its synonym t3', 0.32 apart)
    the lower is labelled below and the upper above, where the two labels ran into one another."""
    p = to_numpy(points)
    sides = []
    for k, (x, y) in enumerate(p):
        gaps = np.hypot(*(p - (x, y)).T)
        gaps[k] = np.inf
        j = int(gaps.argmin()) if len(p) > 1 else k
        higher = gaps[j] < near and (p[j, 1], p[j, 0]) > (y, x)
        sides.append("bottom center" if higher else "top center")
    return sides


def padded_range(values, pad: float = 0.25) -> list[float]:
    """An axis range around ``values`` with ``pad`` of their span (at least 0.5) on each side: room for a label
    beside the outermost point, which Plotly's autorange leaves out (it clipped 'far: 0.00' at the top)."""
    v = to_numpy(values)
    room = max(pad * (v.max() - v.min()), 0.5)
    return [float(v.min() - room), float(v.max() + room)]


# the names of the traces of h (12), (18) and (15): one point each, moved live by wviz.ui.drag
ESTIMATES = ("h exact (12)", "h of (18), lambda = alpha z", "h at (15), second order")


def _estimate_traces(fig, templates, u, names, mu, z, h, h1, h2, row=None, col=None, legend=True, big=40):
    t, u, mu, z = to_numpy(templates), to_numpy(u), to_numpy(mu), to_numpy(z)
    where = dict(row=row, col=col) if row else {}
    size = 6 + big * np.sqrt(u / max(u.max(), 1e-12))
    # the small panels of the grid name the templates only (their weights are in the large figure)
    shown = [plotly_text(n) for n in names]
    text = [f"{n}: {w:.2f}" for n, w in zip(shown, u)] if big > 20 else shown
    # each template's label above it, or below when an estimate (or another template) within 0.75 is higher: at
    # alpha = 10 and z = (0.5, 0.25) the pink (18) marker, just above t2, covered "t2: 0.40"
    near = np.concatenate([t, np.stack([to_numpy(p) for p in (h, h1, h2)])])
    sides = apart_from_neighbours(near, near=0.75)[:len(t)]
    fig.add_scatter(x=t[:, 0], y=t[:, 1], mode="markers+text", text=text,
                    textposition=sides, marker=dict(color=TEMPLATE, size=size, opacity=0.8),
                    name="templates t_i (size: u_i)", showlegend=legend, legendgroup="t", **where)
    b = mu + z
    # mu's label behind the arrow's tail, mu + z's beyond its head: the estimates lie between (on the way from mu
    # to mu + z), so they never cover the labels (below the head, the exact h covered "mu + z" at alpha = 10)
    fig.add_scatter(x=[mu[0], b[0]], y=[mu[1], b[1]], mode="lines+markers+text", line=dict(color=EVIDENCE, width=3),
                    text=["mu", "mu + z"] if big > 20 else None,  # the small panels of the grid stay unlabelled
                    textposition=[text_side(*-z), text_side(*z)], textfont=dict(color=EVIDENCE),
                    marker=dict(symbol=["circle", "arrow"], angleref="previous", size=[9, 14], color=EVIDENCE),
                    name="z: from mu to mu + z", showlegend=legend, legendgroup="z", **where)
    for point, name, color, symbol in zip((h, h1, h2), ESTIMATES, (EXACT, FIRST, SECOND),
                                          ("square", "square-open", "diamond-open")):
        p = to_numpy(point)
        fig.add_scatter(x=[p[0]], y=[p[1]], mode="markers", marker=dict(color=color, symbol=symbol, size=14,
                        line=dict(width=3, color=color)), name=name, showlegend=legend, legendgroup=name, **where)


def main_figure(s) -> go.Figure:
    """The page's main figure: the estimates of a wviz.views.fenchel_dual.Solution (:func:`estimates`)."""
    return estimates(s)


def estimates(s) -> go.Figure:
    """Figure 3 of 002 for one alpha: templates sized by u, the evidence arrow mu -> mu + z, exact h (12), the
    first-order (18) and second-order (15) approximations. ``s`` is a views.fenchel_dual.Solution."""
    fig = go.Figure()
    e = s.est
    _estimate_traces(fig, s.templates.t, s.templates.u, s.templates.names, e.mu, s.z, e.h[0], e.h1[0], e.h2[0])
    fig.update_layout(title=estimates_title(s.alpha), height=575, yaxis_scaleanchor="x",
                      xaxis_title="x", yaxis_title="y", margin=dict(t=50, b=170, l=70),
                      legend=BOTTOM_LEGEND)
    return fig


def estimates_title(alpha: float) -> str:
    return f"Exact and approximate h at alpha = {alpha:.3g}"


def estimates_grid(s, est) -> go.Figure:
    """Figure 3 of 002: one panel per alpha of ``est`` (views.fenchel_dual.Estimates, same axes) for the templates
    and z of the Solution ``s``; three panels a row, so that each stays readable on a narrow screen."""
    alphas = to_numpy(est.alphas)
    t, u, names = s.templates.t, s.templates.u, s.templates.names
    cols = 3
    rows = -(-len(alphas) // cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[f"α = {a:g}" for a in alphas],
                        shared_xaxes=True, shared_yaxes=True, horizontal_spacing=0.04, vertical_spacing=0.1)
    for k in range(len(alphas)):
        _estimate_traces(fig, t, u, names, est.mu, s.z, est.h[k], est.h1[k], est.h2[k], row=k // cols + 1,
                         col=k % cols + 1, legend=k == 0, big=16)
    # one square-ish window around everything drawn, the same in every panel
    mu = to_numpy(est.mu)
    pts = np.concatenate([to_numpy(t), mu[None], (mu + to_numpy(s.z))[None], to_numpy(est.h)])
    lo, hi = pts.min(0), pts.max(0)
    centre, half = (lo + hi) / 2, 0.6 * (hi - lo).max() + 0.3
    fig.update_xaxes(range=[centre[0] - half, centre[0] + half])
    fig.update_yaxes(range=[centre[1] - half, centre[1] + half])
    fig.update_traces(textfont_size=12, selector=dict(mode="markers+text"))
    fig.update_traces(marker_size=10, selector=dict(mode="markers"))
    fig.update_layout(title="Figure 3: h for several alpha", height=300 * rows + 120,
                      margin=dict(t=80, b=110, l=40, r=15),
                      legend=dict(orientation="h", yanchor="top", y=-0.06))
    return fig


def dual_contour(dual, s) -> go.Figure:
    """The dual objective (9) over the lambda plane (views.fenchel_dual.DualMap), with lambda*, alpha z (16) and
    the (15) point of the Solution ``s``."""
    fig = go.Figure(go.Contour(x=to_numpy(dual.xs), y=to_numpy(dual.ys), z=to_numpy(dual.values),
                               colorscale="Viridis", ncontours=30, showscale=True,
                               colorbar=dict(title="dual (9)"),
                               hovertemplate="lambda = (%{x:.3f}, %{y:.3f}): %{z:.4f}<extra></extra>"))
    for point, name, color, symbol in ((s.lam, "lambda* (maximiser)", EXACT, "star"),
                                       (s.alpha_z, "alpha z (16)", FIRST, "x"),
                                       (s.est.lam2[0], "alpha (I + alpha Sigma)^-1 z (15)", SECOND, "diamond")):
        p = to_numpy(point)
        fig.add_scatter(x=[p[0]], y=[p[1]], mode="markers", name=name,
                        marker=dict(color=color, symbol=symbol, size=15, line=dict(width=1.5, color="white")))
    fig.update_layout(title=f"The dual objective (9) at alpha = {s.alpha:.3g}", xaxis_title="lambda_1",
                      yaxis_title="lambda_2", yaxis_scaleanchor="x", height=500, margin=dict(t=50, b=156, l=86, r=85),
                      legend=dict(orientation="h", yanchor="top", y=-0.25))
    return fig


def _sweep_lines(x, lines, now: float, param: str, title: str, ytitle: str, height: int) -> go.Figure:
    """Lines (y, name, colour) against ``param`` (alpha or gamma) on log-log axes, zeros left out, with the value
    as set dashed."""
    fig = go.Figure()
    for y, name, color in lines:
        y = to_numpy(y)
        fig.add_scatter(x=to_numpy(x), y=np.where(y > 0, y, np.nan), mode="lines", name=name,
                        line=dict(color=color, width=2.5))
    # on a log axis an annotation's position is log10 of the value (Plotly): placed by hand, it sits on its line.
    # Its label stands on top of the line, above the plot, where no curve runs (inside the plot's top right corner
    # it lay on the curves near 1, at 1024 px in presentation mode); the top margin keeps it clear of the title
    fig.add_vline(x=now, line_dash="dash", annotation_text=f"{param} as set", annotation_x=np.log10(now),
                  annotation_position="top")
    xs = to_numpy(x)
    fig.update_layout(title=title, xaxis=decade_ticks(xs.min(), xs.max()), xaxis_title=param, yaxis_title=ytitle,
                      yaxis=dict(type="log", dtick=1, exponentformat="power"), height=height,
                      margin=dict(t=75, b=134, l=70), legend=dict(orientation="h", yanchor="top", y=-0.3))
    return fig


def alpha_sweep(sweep, now: float) -> go.Figure:
    """Relative deviation ||lambda* - alpha z|| / ||lambda*|| (Sec. 8) and the errors of (18) and (15) in h,
    against alpha on log axes (views.fenchel_dual.AlphaSweep)."""
    return _sweep_lines(sweep.alphas, [(sweep.deviation, "relative deviation ||lambda* - alpha z|| / ||lambda*||",
                                        EVIDENCE),
                                       (sweep.err1, "||h(12) - h(18)||", FIRST),
                                       (sweep.err2, "||h(12) - h at (15)||", SECOND)],
                        now, "alpha", "How good the approximations are", "error", 425)


def weight_bars(weights: dict, names: list[str], title: str, bottom: int, ytitle: str = "weight") -> go.Figure:
    """Grouped bars, one group per template, one colour per entry of ``weights``; ``bottom``: the margin that holds
    the templates' names and the legend under them at 800 px (its lines: as many as the entries' names need)."""
    fig = go.Figure()
    axis = name_ticks(names)
    for i, (name, w) in enumerate(weights.items()):
        fig.add_bar(x=axis["tickvals"], y=to_numpy(w), name=name, marker_color=PALETTE[i % len(PALETTE)],
                    hovertemplate="%{x}: %{y:.4f}<extra>" + name + "</extra>")
    fig.update_layout(title=title, barmode="group", xaxis=axis, xaxis_title="template",
                      yaxis_title=ytitle, height=400, margin=dict(t=50, b=bottom, l=60),
                      legend=dict(orientation="h", yanchor="top", y=-0.25))
    return fig


def attention_weights(w, names: list[str]) -> go.Figure:
    """The weights of (11) at lambda*, of (18) and of (11) at (15), with u (views.fenchel_dual.Weights)."""
    return weight_bars({"p~ of (11) at lambda* (exact)": w.exact, "attention (18), lambda = alpha z": w.attention,
                        "p~ at lambda of (15)": w.second, "preference u": w.u},
                       names, "Attention weights: exact (11) vs attention (18)", 110)


def t5_weights(w, names: list[str], target: str) -> go.Figure:
    """T5's preference (19) and weights (20) beside (18) and plain softmax (views.fenchel_dual.T5Weights)."""
    return weight_bars({"u of (19)": w.u, "weights of (20), T5's masked biased softmax": w.w20,
                        "(18) with alpha = 1 and u of (19)": w.w18, "plain softmax <t_i, z>": w.dot},
                       names, f"T5 preference and attention for target {plotly_text(target)}", 142)


def ot_weights(ot) -> go.Figure:
    """u, the true preference (40), OT attention (25) and the exact (38) over A (views.fenchel_dual.OTAttention)."""
    p = ot.panel
    return weight_bars({"preference u": p.u, "true preference u~ (40)": p.true,
                        "OT attention p* (25), lambda = alpha z": p.approx,
                        "exact p* (38), lambda* of (39)": p.exact}, ot.world.names,
                       "OT attention weights over the universe A", 142)


def ot_map(ot, z) -> go.Figure:
    """The universe A in the plane sized by the OT attention (25), with z / 2."""
    # two lines: beside the controls at 800 px the chart is some 300 px wide, and one line was cut after "gamm"
    return universe(ot.world.A, ot.world.names, to_numpy(ot.world.in_T), ot.panel.approx, z,
                    f"OT attention (25) over A<br>at alpha = {ot.alpha:.3g}, gamma = {ot.gamma:.3g}")


def universe(templates_all, names: list[str], in_T, weights, z, title: str) -> go.Figure:
    """The universe A in the plane: the templates of T (filled) and the others (open), sized by a weight vector,
    each labelled above it, or below when a close neighbour is above (a synonym sits close to its template)."""
    A, w = to_numpy(templates_all), to_numpy(weights)
    in_T = np.asarray(in_T, dtype=bool)
    size = 8 + 45 * np.sqrt(w / max(w.max(), 1e-12))
    sides = np.array(apart_from_neighbours(A))
    fig = go.Figure()
    for mask, label, symbol in ((in_T, "in T (u > 0)", "circle"), (~in_T, "only in A (u = 0)", "circle-open")):
        idx = np.flatnonzero(mask)
        fig.add_scatter(x=A[idx, 0], y=A[idx, 1], mode="markers+text", name=label,
                        text=[f"{plotly_text(names[i])}: {w[i]:.2f}" for i in idx], textposition=sides[idx].tolist(),
                        marker=dict(size=size[idx], color=TEMPLATE, symbol=symbol, line=dict(width=2, color=TEMPLATE)))
    # z / 2 as the main figure draws z: a line from the origin with an arrow head, named in the legend (a label at
    # either end lay on a template's: t1 sits at the origin, and a short z puts the head next to t1's label)
    zz = to_numpy(z) / 2
    fig.add_scatter(x=[0.0, zz[0]], y=[0.0, zz[1]], mode="lines+markers", line=dict(color=EVIDENCE, width=2),
                    marker=dict(symbol=["circle", "arrow"], angleref="previous", size=[0, 12], color=EVIDENCE),
                    name="z / 2, from the origin", hoverinfo="skip")
    fig.update_layout(title=title, height=540, yaxis_scaleanchor="x", xaxis_title="x", yaxis_title="y",
                      xaxis_range=padded_range(np.append(A[:, 0], zz[0])),
                      yaxis_range=padded_range(np.append(A[:, 1], zz[1])),
                      margin=dict(t=80, b=130, l=60), legend=BOTTOM_LEGEND)
    return fig


def gamma_sweep(sweep, now: float) -> go.Figure:
    """||u~ - u||_1 (Prop. 1: -> 0 as gamma -> 0) and ||p*(38) - p*(25)||_1 against gamma, log axes
    (views.fenchel_dual.GammaSweep)."""
    return _sweep_lines(sweep.gammas, [(sweep.gap_u, "||u~ (40) - u||_1", TEMPLATE),
                                       (sweep.gap_p, "||p* (38) - p* (25)||_1", FIRST)],
                        now, "gamma", "True preference and OT attention against gamma", "L1 distance", 405)
