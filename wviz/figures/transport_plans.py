"""Figures of the "Transport plans" page."""
from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from wviz.figures.common import BOTTOM_LEGEND, PALETTE, decade_ticks, index_ticks, number_text, to_numpy

# Margins: given, not pushed by Plotly (wviz.figures.common, "Margins").


def main_figure(t) -> go.Figure:
    """The page's main figure: the plan of a wviz.views.transport_plans.Transport with its marginals (a
    semi-relaxed plan's own marginals marked over a and b)."""
    sums = (t.plan.sum(1), t.columns) if t.semi else None
    return plan_with_marginals(t.plan, t.problem.a, t.problem.b, plan_title(t.solver, t.rho_rel), sums=sums)


COLUMN_SUMS = "P^T 1 (column sums)"   # the name of a semi-relaxed plan's column-sums trace (moved live: wviz.ui.drag)


def plan_title(solver: str, rho_rel: float) -> str:
    """The main figure's title: the solver, and rho / max C when it is finite (semi-relaxed)."""
    return f"{solver} plan P" + (f", rho = {rho_rel:.3g} max C" if math.isfinite(rho_rel) else "")


def plan_with_marginals(plan, a, b, title: str, zmax: float | None = None, height: int = 560,
                        compact: bool = False, sums=None) -> go.Figure:
    """The plan P as a heatmap (colour bar "P_ij", from 0 to ``zmax`` when given, e.g. the same in every frame of
    an animation), the target marginal b as bars above it and the source marginal a on its left. ``compact`` (half
    a page wide): the marginals' bars without tick labels (their values show on hover). sums=(P 1, P^T 1): the
    plan's own marginals, marked over the bars (a semi-relaxed plan, whose columns are not b)."""
    P, a, b = to_numpy(plan), to_numpy(a), to_numpy(b)
    i, j = np.arange(1, len(a) + 1), np.arange(1, len(b) + 1)   # sources and targets counted from 1, as in the text
    fig = make_subplots(rows=2, cols=2, column_widths=[0.22, 0.78] if compact else [0.15, 0.85],
                        row_heights=[0.2, 0.8], shared_xaxes="columns", shared_yaxes="rows",
                        horizontal_spacing=0.04 if compact else 0.01,
                        vertical_spacing=0.02)
    fig.add_bar(x=j, y=b, row=1, col=2, marker_color=PALETTE[1], name="b (target)",
                hovertemplate="b_%{x} = %{y:.3g}<extra></extra>")
    fig.add_bar(y=i, x=a, orientation="h", row=2, col=1, marker_color=PALETTE[0],
                name="a (source)", hovertemplate="a_%{y} = %{x:.3g}<extra></extra>")
    if sums is not None:
        rows, cols = map(to_numpy, sums)
        fig.add_scatter(x=j, y=cols, mode="markers", row=1, col=2, name=COLUMN_SUMS,
                        marker=dict(symbol="line-ew-open", size=12, color="black", line=dict(width=3, color="black")),
                        hovertemplate="(P^T 1)_%{x} = %{y:.3g}<extra></extra>")
        fig.add_scatter(y=i, x=rows, mode="markers", row=2, col=1, name="P 1 (row sums)",
                        marker=dict(symbol="line-ns-open", size=12, color="black", line=dict(width=3, color="black")),
                        hovertemplate="(P 1)_%{y} = %{x:.3g}<extra></extra>")
    fig.add_trace(go.Heatmap(z=P, x=j, y=i, colorscale="Viridis", showscale=True, zmin=0 if zmax else None, zmax=zmax,
                             colorbar=dict(title=dict(text="P_ij"), len=0.8, y=0.4),
                             hovertemplate="P_ij, i = %{y}, j = %{x}: %{z:.3g}<extra></extra>"), row=2, col=2)
    fig.update_xaxes(autorange="reversed", row=2, col=1, title_text="a_i")
    fig.update_yaxes(autorange="reversed", row=2, col=1, title_text="source i", **index_ticks(len(a)))
    fig.update_yaxes(title_text="b_j", row=1, col=2)
    fig.update_xaxes(title_text="target j", row=2, col=2, **index_ticks(len(b)))
    if compact:
        fig.update_xaxes(showticklabels=False, row=2, col=1)
        fig.update_yaxes(showticklabels=False, row=1, col=2)
    fig.update_layout(title=title, height=height, showlegend=False, margin=dict(t=60, b=80, l=70, r=105))
    return fig


def plan_frames(frames, title: str) -> list[go.Figure]:
    """One plan_with_marginals per (plan, rows, columns, caption) of ``frames``, all on the colour scale of the
    largest entry, titled "``title``: caption": the frames of an animation."""
    top = max(float(to_numpy(plan).max()) for plan, *_ in frames) or 1.0
    return [plan_with_marginals(plan, rows, cols, f"{title}: {caption}", zmax=top)
            for plan, rows, cols, caption in frames]


def plan_lines(x, y, plan, a, b, title: str, max_lines: int = 1500) -> go.Figure:
    """The two clouds, with a line from x_i to y_j for the largest entries of P; opacity follows the mass."""
    x, y, P, a, b = map(to_numpy, (x, y, plan, a, b))
    flat = P.ravel()
    k = min(max_lines, int((flat > 0).sum()))
    top = np.argpartition(-flat, k - 1)[:k] if k else np.array([], dtype=int)
    fig = go.Figure()
    if k:
        mass = flat[top] / flat[top].max()
        # one trace per opacity level keeps the figure light (a trace per line would be thousands of traces)
        levels = np.minimum((mass * 8).astype(int), 7)
        for level in range(8):
            idx = top[levels == level]
            if not len(idx):
                continue
            i, j = np.unravel_index(idx, P.shape)
            xs = np.column_stack([x[i, 0], y[j, 0], np.full(len(i), np.nan)]).ravel()
            ys = np.column_stack([x[i, 1], y[j, 1], np.full(len(i), np.nan)]).ravel()
            fig.add_scatter(x=xs, y=ys, mode="lines", line=dict(color="#555555", width=1.2),
                            opacity=0.08 + 0.92 * (level + 1) / 8, hoverinfo="skip", showlegend=False)
    for pts, w, name, color in ((x, a, "source x_i (size: a_i)", PALETTE[0]),
                                (y, b, "target y_j (size: b_j)", PALETTE[1])):
        fig.add_scatter(x=pts[:, 0], y=pts[:, 1], mode="markers", name=name,
                        marker=dict(color=color, size=4 + 14 * np.sqrt(w / w.max()), line=dict(width=0.5)))
    note = "" if k == int((flat > 0).sum()) else f" (the {k} largest of {int((flat > 0).sum())} entries)"
    fig.update_layout(title=title + note, height=520, yaxis_scaleanchor="x", margin=dict(t=50, b=100, l=66),
                      xaxis_title="first coordinate", yaxis_title="second coordinate", legend=BOTTOM_LEGEND)
    return fig


TOL_LABEL_ROOM = 0.3   # the part of the iterations' range the tolerance's label may take, from its left end


def marginal_error_curve(iterations, errors, tol: float, title: str, current: int | None = None) -> go.Figure:
    """Marginal L1 error against iteration (log scale), with the tolerance as a line."""
    it, err = to_numpy(iterations), to_numpy(errors)
    fig = go.Figure(go.Scatter(x=it, y=np.maximum(err, 1e-300), mode="lines+markers", name="marginal error"))
    fig.add_hline(y=tol, line_dash="dash")
    # The tolerance's label on its line at the left end, where the error is still far above it (at the right end
    # the curve comes down to it and the current iteration's line stands there); when that line is near the left
    # end, just right of it. On a log axis an annotation's y is log10 of the value (Plotly).
    near = current is not None and current < it.min() + TOL_LABEL_ROOM * (it.max() - it.min())
    fig.add_annotation(x=current if near else it.min(), xshift=6 if near else 0, xanchor="left",
                       y=np.log10(tol), yanchor="bottom", text=f"tol = {number_text(tol)}", showarrow=False)
    if current is not None:
        fig.add_vline(x=current, line_color=PALETTE[5])
    shown = np.maximum(err, 1e-300)
    fig.update_layout(title=title, xaxis_title="iteration", yaxis_title="L1 marginal error",
                      yaxis=decade_ticks(min(shown.min(), tol), max(shown.max(), tol)), height=360,
                      margin=dict(t=50, b=60, l=75))
    return fig


def cost_against_gamma(gammas_rel, costs, exact_cost: float, gamma_rel_now: float, title: str) -> go.Figure:
    """Transport cost <C, P_gamma> against gamma / max C (the unit of the page's slider), converging to the exact
    (unregularised) cost, with the slider's gamma marked."""
    g = to_numpy(gammas_rel)
    fig = go.Figure(go.Scatter(x=g, y=to_numpy(costs), mode="lines+markers", name="<C, P_gamma>",
                               hovertemplate="gamma / max C = %{x:.3g}: cost %{y:.4g}<extra></extra>"))
    fig.add_hline(y=exact_cost, line_dash="dash", annotation_text=f"exact OT = {exact_cost:.4g}")
    # on a log axis an annotation's position is log10 of the value (Plotly): placed by hand, it sits on its line
    fig.add_vline(x=gamma_rel_now, line_color=PALETTE[5], annotation_text=f"the slider: {gamma_rel_now:.3g}",
                  annotation_x=np.log10(gamma_rel_now))
    fig.update_layout(title=title, xaxis=decade_ticks(min(g.min(), gamma_rel_now), max(g.max(), gamma_rel_now)),
                      xaxis_title="gamma / max C", yaxis_title="transport cost <C, P>", height=360,
                      margin=dict(t=50, b=56, l=60))
    return fig


def cost_against_rho(sweep, rho_now: float, title: str) -> go.Figure:
    """The semi-relaxed plans' transport cost <C, P_rho> (top) and their columns' KL(P^T 1 | b) (bottom) against
    rho / max C (a wviz.views.transport_plans.RhoSweep), with the two ends dashed (rho = 0: each source's
    prior-softmax; rho = infinity: the balanced plan) and the current rho marked (at the right edge when infinite)."""
    rhos = to_numpy(sweep.rhos)
    (cost0, kl0), (cost_inf, _) = sweep.ends
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.1,
                        subplot_titles=("transport cost <C, P>",
                                        "KL(P<sup>T</sup>1 | b): how far the columns are from b"))
    fig.add_scatter(x=rhos, y=to_numpy(sweep.costs), mode="lines+markers", name="<C, P_rho>", row=1, col=1,
                    marker_color=PALETTE[0])
    fig.add_scatter(x=rhos, y=np.maximum(to_numpy(sweep.kls), 1e-300), mode="lines+markers", name="KL(P^T 1 | b)",
                    row=2, col=1, marker_color=PALETTE[1])
    # the ends' labels on a white ground: the current rho's line crosses them when it is at the right edge
    ground = dict(annotation_bgcolor="white")
    fig.add_hline(y=cost0, line_dash="dot", annotation_text="rho = 0: prior-softmax", row=1, col=1, **ground)
    fig.add_hline(y=cost_inf, line_dash="dash", annotation_text="rho = ∞: balanced",
                  annotation_position="bottom right", row=1, col=1, **ground)
    fig.add_hline(y=max(kl0, 1e-300), line_dash="dot", annotation_text="rho = 0", row=2, col=1,
                  annotation_y=np.log10(max(kl0, 1e-300)), **ground)   # log10: it sits on its line (log axis)
    x_now = rhos[-1] if np.isinf(rho_now) else rho_now
    kls = np.maximum(to_numpy(sweep.kls), 1e-300)
    for row in (1, 2):
        fig.add_vline(x=x_now, line_color=PALETTE[5], row=row, col=1)
        fig.update_xaxes(decade_ticks(rhos.min(), rhos.max()), row=row, col=1)
    fig.update_yaxes(decade_ticks(min(kls.min(), kl0), max(kls.max(), kl0), labels=6), row=2, col=1)   # half height
    fig.update_xaxes(title_text="rho / max C (how firmly the targets' masses b are held)", row=2, col=1)
    fig.update_layout(title=title, height=560, showlegend=False, margin=dict(t=80, b=56, l=34))
    return fig
