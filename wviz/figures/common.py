"""Small pieces shared by the figure builders."""
from __future__ import annotations

import numpy as np
import torch

# Okabe-Ito: distinguishable with the common colour-vision deficiencies.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]


def to_numpy(x) -> np.ndarray:
    """A tensor on any device (or an array) as a float64 numpy array."""
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", torch.float64).numpy()
    return np.asarray(x, dtype=np.float64)


def vector_text(v) -> str:
    """'1.06, 0.5, -0.92': a vector's entries to 3 significant digits, for equations and captions."""
    return ", ".join(f"{x:.3g}" for x in to_numpy(v))


MAX_DECADE_LABELS = 13   # a log axis spanning more decades labels every 2nd (3rd...) one


def decade_text(k: int, m: int = 1) -> str:
    """m 10^k as read aloud: plain digits from 0.001 to 5000, else with a power of ten ("2·10<sup>-5</sup>")."""
    if -3 <= k <= 3:
        return f"{m * 10.0 ** k:g}"
    return f"10<sup>{k}</sup>" if m == 1 else f"{m}·10<sup>{k}</sup>"


def decade_ticks(lo: float, hi: float) -> dict:
    """A log axis from lo to hi (> 0) labelled in full at each power of ten (every k-th when more than
    MAX_DECADE_LABELS decades), and at 1, 2 and 5 times each power when fewer than two powers of ten lie in the
    range; never Plotly's bare leading digits ("5, 2, 1, 5, 2, 0.1")."""
    lo, hi = max(float(lo), 1e-300), max(float(hi), 1e-300)
    first, last = int(np.floor(np.log10(lo) + 1e-9)), int(np.ceil(np.log10(hi) - 1e-9))
    inside = sum(lo <= 10.0 ** k <= hi for k in range(first, last + 1))
    if inside < 2:
        ticks = [(k, m) for k in range(first, last + 1) for m in (1, 2, 5)]
    else:
        step = -(-(last - first + 1) // MAX_DECADE_LABELS)
        ticks = [(k, 1) for k in range(first, last + 1) if k % step == 0] or [(first, 1)]
    return dict(type="log", tickmode="array", tickvals=[m * 10.0 ** k for k, m in ticks],
                ticktext=[decade_text(k, m) for k, m in ticks])
