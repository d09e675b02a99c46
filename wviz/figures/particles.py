"""Figures of the "Particles and contraction" page."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from wviz.figures.common import BOTTOM_LEGEND, PALETTE, decade_ticks, to_numpy

# Margins: given, not pushed by Plotly (wviz.figures.common, "Margins").


def _trails(traj: np.ndarray, upto: int):
    """Every particle's path over layers 0..upto as one line trace (None between particles)."""
    N = traj.shape[1]
    segs = np.concatenate([traj[: upto + 1].transpose(1, 0, 2), np.full((N, 1, 2), np.nan)], 1).reshape(-1, 2)
    return segs[:, 0], segs[:, 1]


def _layer_traces(traj: np.ndarray, h: int, angle: np.ndarray) -> list:
    """Layer h: every particle's trail over layers 0..h (grey) and the particles, coloured by ``angle``."""
    tx, ty = _trails(traj, h)
    return [go.Scatter(x=tx, y=ty, mode="lines", line=dict(color="rgba(120,120,120,0.45)", width=1),
                       hoverinfo="skip", name="trails", showlegend=False),
            go.Scatter(x=traj[h, :, 0], y=traj[h, :, 1], mode="markers", name=f"layer {h}", showlegend=False,
                       marker=dict(size=8, color=angle, colorscale="Twilight", line=dict(width=0.5, color="black")),
                       hovertemplate="particle %{text}<br>(%{x:.3f}, %{y:.3f})<extra></extra>",
                       text=[str(i) for i in range(1, traj.shape[1] + 1)])]   # counted from 1, as x_1, ..., x_N


def _flow_parts(trajectory):
    """The trajectory (L + 1, N, 2) as numpy, each particle's colour (its angle around the centroid of layer 0,
    so that particles can be followed) and the axes that hold every layer (the same in every frame)."""
    traj = to_numpy(trajectory)
    c = traj[0] - traj[0].mean(0)
    lo, hi = np.nanmin(traj, (0, 1)), np.nanmax(traj, (0, 1))
    pad = 0.08 * max(float((hi - lo).max()), 1e-9)
    axes = dict(xaxis=dict(range=[lo[0] - pad, hi[0] + pad], title="x (first coordinate)"),
                yaxis=dict(range=[lo[1] - pad, hi[1] + pad], title="y (second coordinate)", scaleanchor="x"))
    return traj, np.arctan2(c[:, 1], c[:, 0]), axes


def particles_at(trajectory, h: int, title: str, height: int = 520) -> go.Figure:
    """The particles at layer h with their trails so far, on axes that hold every layer: one still of the flow
    (the frames of its animation, the side-by-side view)."""
    traj, angle, axes = _flow_parts(trajectory)
    fig = go.Figure(data=_layer_traces(traj, h, angle))
    fig.update_layout(title=title, height=height, margin=dict(t=60, b=56, l=64), **axes)
    return fig


def flow_frames(trajectory, title: str) -> list[go.Figure]:
    """particles_at for every layer 0..L, titled "``title``: layer h of L": the frames of the flow's animation."""
    L = to_numpy(trajectory).shape[0] - 1
    return [particles_at(trajectory, h, f"{title}: layer {h} of {L}") for h in range(L + 1)]


FLOW_TRACES = (0, 1)   # the indices of the trails and of the particles in a frame of the flow (_layer_traces)


def flow_title(layers: int, potential: str, tau: float) -> str:
    return f"Particles over {layers} layers ({potential} potential, tau = {tau:g})"


def main_figure(f) -> go.Figure:
    """The page's main figure: the animated particle flow of a wviz.views.particles.Flow."""
    i = f.inputs
    return particles_animation(f.trajectory, flow_title(i.layers, i.potential, f.tau))


def particles_animation(trajectory, title: str = "Particles over layers") -> go.Figure:
    """The particles of each layer with their trails, one Plotly frame per layer (play button and slider). Colour:
    each particle's angle around the centroid of layer 0, so that particles can be followed."""
    traj, angle, axes = _flow_parts(trajectory)
    L = traj.shape[0] - 1
    frames = [go.Frame(data=_layer_traces(traj, h, angle), name=str(h)) for h in range(L + 1)]
    step = lambda h: dict(method="animate", label=str(h), args=[[str(h)], dict(  # noqa: E731
        mode="immediate", frame=dict(duration=0, redraw=False), transition=dict(duration=0))])
    fig = go.Figure(data=_layer_traces(traj, L, angle), frames=frames)
    fig.update_layout(
        title=title, height=600, margin=dict(t=60, b=170, l=70), **axes,
        updatemenus=[dict(type="buttons", direction="left", x=0.0, y=-0.12, xanchor="left", yanchor="top",
                          buttons=[dict(label="Play", method="animate",
                                        args=[None, dict(frame=dict(duration=500, redraw=False), fromcurrent=False,
                                                         transition=dict(duration=250), mode="immediate")]),
                                   dict(label="Pause", method="animate",
                                        args=[[None], dict(frame=dict(duration=0, redraw=False),
                                                           mode="immediate", transition=dict(duration=0))])])],
        # the slider under the buttons, full width: beside them it ran into "Pause" at 800 px
        sliders=[dict(active=L, currentvalue=dict(prefix="layer ", xanchor="right"), x=0.0, len=1.0, y=-0.2,
                      steps=[step(h) for h in range(L + 1)])],
    )
    return fig


def layer_steps(steps, ground: str) -> go.Figure:
    """W1 between consecutive layers."""
    s = to_numpy(steps)
    fig = go.Figure(go.Scatter(x=np.arange(1, len(s) + 1), y=s, mode="lines+markers", line=dict(color=PALETTE[0]),
                               hovertemplate="layer %{x}: %{y:.4g}<extra></extra>"))
    fig.update_layout(title=f"W1 between consecutive layers ({ground} ground metric)", height=320,
                      xaxis_title="layer h (W1 between layers h - 1 and h)", yaxis_title="W1",
                      margin=dict(t=50, b=60, l=70))
    return fig


def contraction_scatter(w1_in, w1_out, slopes: dict, pair=None, perturbation: str = "") -> go.Figure:
    """Output W1 against input W1 for each sampled pair (log-log), with the lines y = slope x of ``slopes``
    (name -> slope; None slopes are skipped) and the uploaded pair as a star. The y axis stops 1000 times above
    the steepest observed ratio; lines above it say so in the legend."""
    a, b = to_numpy(w1_in), to_numpy(w1_out)
    fig = go.Figure(go.Scatter(x=a, y=b, mode="markers", name=f"sampled pairs ({perturbation})",
                               marker=dict(size=9, color=PALETTE[0]),
                               hovertemplate="W1 in %{x:.4g}<br>W1 out %{y:.4g}<extra></extra>"))
    if pair is not None:   # the axes cover the uploaded pair too
        a, b = np.append(a, float(pair[0])), np.append(b, float(pair[1]))
    xs = np.array([a.min() / 2, a.max() * 2])
    top = 1e3 * max(float((b / a).max()), 1.0)
    if pair is not None:
        fig.add_scatter(x=[float(pair[0])], y=[float(pair[1])], mode="markers", name="uploaded X and Y",
                        marker=dict(size=16, symbol="star", color=PALETTE[5]))
    dashes = ["dot", "dash", "longdash", "dashdot", "solid"]
    shown = [1.0]
    for i, (name, slope) in enumerate((k, v) for k, v in slopes.items() if v is not None):
        above = slope > top
        shown += [] if above else [slope]
        fig.add_scatter(x=xs, y=slope * xs, mode="lines",
                        name=f"{name}: slope {slope:.3g}{' (above the chart)' if above else ''}",
                        line=dict(color=PALETTE[(i + 1) % len(PALETTE)], dash=dashes[i % len(dashes)]))
    lo = min(b.min(), xs[0] * min(shown)) / 2
    hi = max(b.max(), xs[1] * max(shown)) * 2
    fig.update_layout(title="Contraction: output W1 against input W1", xaxis=decade_ticks(*xs),
                      yaxis=dict(decade_ticks(lo, hi), range=[np.log10(lo), np.log10(hi)]), xaxis_title="W1(mu, nu)",
                      yaxis_title="W1(mu A_mu, nu A_nu)", height=520, margin=dict(t=50, b=190, l=60),
                      legend=BOTTOM_LEGEND)
    return fig


def fixed_point_history(steps, to_last, envelope=None) -> go.Figure:
    """W1 between successive iterates and to the last iterate (log scale), with the Banach envelope if given."""
    s, t = to_numpy(steps), to_numpy(to_last)
    fig = go.Figure()
    fig.add_scatter(x=np.arange(1, len(s) + 1), y=s, mode="lines+markers", name="W1(mu^l, mu^{l-1})",
                    line=dict(color=PALETTE[0]))
    fig.add_scatter(x=np.arange(len(t)), y=t, mode="lines", name="W1(mu^l, last iterate)",
                    line=dict(color=PALETTE[1], dash="dash"))
    if envelope is not None:
        e = to_numpy(envelope)
        fig.add_scatter(x=np.arange(len(e)), y=e, mode="lines", name="Banach: kappa^l / (1 - kappa) W1(mu^1, mu^0)",
                        line=dict(color=PALETTE[2], dash="dot"))
    shown = np.concatenate([s, t, to_numpy(envelope) if envelope is not None else []])
    shown = shown[shown > 0]
    ticks = decade_ticks(shown.min(), shown.max()) if len(shown) else dict(type="log")
    fig.update_layout(title="Fixed point of the weight-shared layer (Prop. 26)", yaxis=ticks,
                      xaxis_title="iteration l", yaxis_title="W1", height=380, margin=dict(t=50, b=90, l=72),
                      legend=dict(orientation="h", y=-0.25))
    return fig


def cor30_failure(n, ratio, bound) -> go.Figure:
    """The ratio of the three-cluster configuration and the Cor. 30 bound against the number of tokens N."""
    n, r, b = to_numpy(n), to_numpy(ratio), to_numpy(bound)
    fig = go.Figure()
    fig.add_scatter(x=n, y=r, mode="lines+markers", name="W1 ratio (token between two clusters)",
                    line=dict(color=PALETTE[0]))
    fig.add_scatter(x=n, y=b, mode="lines", name="Cor. 30 bound as printed", line=dict(color=PALETTE[5], dash="dash"))
    # the comparison as a subtitle: in the title it ran past the chart at 800 px
    fig.update_layout(title=dict(text="Where Cor. 30 fails",
                                 subtitle_text="ratio ~ 2 q ln N against a bound ~ sqrt(ln N)"),
                      xaxis=decade_ticks(n.min(), n.max()),
                      xaxis_title="number of tokens N", yaxis_title="W1 ratio", height=440,
                      margin=dict(t=80, b=125, l=60), legend=BOTTOM_LEGEND)
    return fig


def max_entropy(t, entropies, entropy) -> go.Figure:
    """H_nu along random moment-preserving directions through the Boltzmann-Gibbs measure (t = 0)."""
    t, H = to_numpy(t), to_numpy(entropies)
    fig = go.Figure()
    # one legend entry for all directions (a colour each): eight entries took four rows at 800 px, into the x title
    for i in range(len(t)):
        fig.add_scatter(x=t[i], y=H[i], mode="lines", name=f"{len(t)} random directions", legendgroup="directions",
                        showlegend=i == 0, line=dict(color=PALETTE[i % len(PALETTE)], width=1.5),
                        hovertemplate=f"direction {i + 1}, " + "t %{x:.3g}: H %{y:.4g}<extra></extra>")
    fig.add_scatter(x=[0.0], y=[float(entropy)], mode="markers", name="Boltzmann-Gibbs Psi_G(nu) (t = 0)",
                    marker=dict(size=14, symbol="star", color="black"))
    # a short y title (the equation above the chart defines H_nu): the long one ran into the title at 800 px
    # the title in two parts: in one line it ran past the chart at 800 px
    fig.update_layout(title=dict(text="Thm. 14: relative entropy",
                                 subtitle_text="of the measures that encode the same moment"), height=460,
                      xaxis_title="step t along a direction that keeps mass and moment",
                      yaxis_title="H_nu(mu)", margin=dict(t=80, b=110, l=80), legend=BOTTOM_LEGEND)
    return fig
