"""Small pieces shared by the figure builders."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

# Okabe-Ito: distinguishable with the common colour-vision deficiencies.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]


def to_numpy(x) -> np.ndarray:
    """A tensor on any device (or an array) as a float64 numpy array."""
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", torch.float64).numpy()
    return np.asarray(x, dtype=np.float64)


def pool_for_display(matrix: torch.Tensor, max_side: int = 512) -> tuple[np.ndarray, int, int]:
    """Average-pool a large (n, m) matrix to at most max_side per side for the browser.

    Returns the pooled matrix and the block size along each axis (1 where nothing was pooled); a 4096 x 4096
    heatmap would send 16 M cells to the browser, a 512 x 512 block mean keeps the picture.
    """
    n, m = matrix.shape[-2:]
    bn, bm = -(-n // max_side), -(-m // max_side)
    if bn == 1 and bm == 1:
        return to_numpy(matrix), 1, 1
    pooled = F.avg_pool2d(matrix.reshape(1, 1, n, m).float(), (bn, bm), ceil_mode=True)
    return to_numpy(pooled[0, 0]), bn, bm
