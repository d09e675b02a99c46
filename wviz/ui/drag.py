"""Figures that follow their sliders while they move: recomputed in the browser at frame rate.

Streamlit sends a slider's value to Python when the slider is released. :func:`follow` mounts wviz's component
(wviz/ui/js/drag.js) under a figure: while one of the named sliders moves, the browser recomputes the figure from
the inputs given here with the float64 kernels of wviz/ui/js/kernels.js and redraws the page's own chart before
the frame is painted. On release everything runs as before (the figure from Python, the URL, the share link, the
exports). A problem larger than its figure's ``LIVE_MAX_ENTRIES`` keeps the release path alone.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import streamlit as st

# Per figure, the numbers a frame recomputes and draws: 64 keys x 4 mechanisms, 64 x 64 weights or plan, the
# simplex's 80 x 69 cells, 1024 templates, two 11 x 11 heatmaps of W2 and dot-product attention, 20 tokens' two
# ellipses of 100 points, N^2 L = 64^2 x 16 steps of the particle flow; why not more: BENCHMARKS.md "Live while the
# slider moves: what the table says".
LIVE_MAX_ENTRIES = {"weights": 256, "many": 4096, "landscape": 5520, "gaussians": 256, "plan": 4096,
                    "estimates": 1024, "ellipses": 4000, "flow": 65536}


@dataclass(frozen=True)
class Slider:
    """A slider the figure follows: its widget key and, for a select_slider, its options (the input's value is
    then the option's index)."""
    key: str
    options: tuple[float, ...] | None = None


def _plain(x):
    """JSON-ready: tensors and arrays as lists, -inf as None and inf as "Infinity" (JSON has no infinities; the
    component reads them back: -inf masks a key, inf is the balanced end of a rho slider)."""
    if hasattr(x, "tolist"):
        x = x.tolist()
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, float) and math.isinf(x):
        return None if x < 0 else "Infinity"
    return x


_mount = None   # the component's mounting command, registered on first use (as Streamlit asks: once per process)


def _component():
    global _mount
    if _mount is None:
        _mount = st.components.v2.component("wviz.drag", js="drag.js")
    return _mount


def follow(chart: str, figure: str, sliders: dict[str, Slider], values: dict[str, float], inputs: dict,
           entries: int) -> bool:
    """Make the chart keyed ``chart`` follow ``sliders`` (name -> Slider) while they move, recomputing the
    component's ``figure`` from ``inputs`` and the sliders' current values (``values``: the released ones):
    "weights", bars of attend(mechanism, scores, tau, alpha, prior) per mechanism (semi-relaxed OT's by its
    Sinkhorn at tau and rho), or "many", the heatmap of many queries' weights, or "landscape", the objective on the
    simplex with its argmins, or "gaussians", the heatmaps of W2 and dot-product attention of 2-D Gaussian tokens,
    or "ellipses", the query token's ellipses and mean, or "plan", the heatmap of Sinkhorn's plan at gamma (and
    rho), or "estimates", the Fenchel dual's h (12), (18) and (15) at alpha, or "flow", the particle flow at tau
    (wviz/ui/js/drag.js, FIGURES). ``entries``: the numbers a frame recomputes; above the figure's
    LIVE_MAX_ENTRIES nothing is mounted. True if live."""
    if entries > LIVE_MAX_ENTRIES[figure]:
        return False
    _component()(key=f"_drag_{chart}", height="content", data=_plain({
        "chart": chart, "figure": figure, "values": values,
        "sliders": {name: {"key": s.key, "options": s.options} for name, s in sliders.items()},
        "inputs": inputs,
    }))
    return True
