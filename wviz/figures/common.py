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
