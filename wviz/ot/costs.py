"""Ground costs C_ij = c(x_i, y_j) between point clouds: the cost M of eq. (23) of 002 and the score cost of 001."""
from __future__ import annotations

import torch

COST_KINDS = ("sqeuclidean", "euclidean", "l1", "cosine", "dot")


def _points(x, y) -> tuple[torch.Tensor, torch.Tensor]:
    """x (..., n, d) and y (..., m, d) as checked floating tensors of one dtype on x's device."""
    x, y = torch.as_tensor(x), torch.as_tensor(y)
    y = y.to(x.device)
    dtype = torch.promote_types(x.dtype, y.dtype)
    if not dtype.is_floating_point:
        dtype = torch.float64
    x, y = x.to(dtype), y.to(dtype)
    if x.ndim < 2 or y.ndim < 2:
        raise ValueError(f"points must be arrays of shape (n, d) and (m, d), got shapes {tuple(x.shape)} and "
                         f"{tuple(y.shape)}")
    if x.shape[-1] != y.shape[-1]:
        raise ValueError(f"x and y must have the same dimension d, got {x.shape[-1]} and {y.shape[-1]}")
    try:
        torch.broadcast_shapes(x.shape[:-2], y.shape[:-2])
    except RuntimeError:
        raise ValueError(f"the batch shapes of x {tuple(x.shape[:-2])} and y {tuple(y.shape[:-2])} do not match") \
            from None
    for name, pts in (("x", x), ("y", y)):
        if not bool(torch.isfinite(pts).all()):
            raise ValueError(f"the points {name} contain NaN or inf")
    return x, y


def _cosine(x, y) -> torch.Tensor:
    """1 - <x, y> / (||x|| ||y||), refusing zero vectors (their direction is undefined)."""
    nx, ny = x.norm(dim=-1), y.norm(dim=-1)
    for name, norms in (("x", nx), ("y", ny)):
        if bool((norms == 0).any()):
            i = int((norms == 0).nonzero()[0, -1])
            raise ValueError(f"the cosine cost needs non-zero vectors, but point {i} of {name} is zero")
    return 1 - (x @ y.mT) / (nx[..., :, None] * ny[..., None, :])


def cost_matrix(x, y, kind: str = "sqeuclidean") -> torch.Tensor:
    """Ground cost C_ij = c(x_i, y_j) between points x (..., n, d) and y (..., m, d), batched: (..., n, m).

    kinds: "sqeuclidean" ||x - y||^2 (the cost M(t, t') = d(t, t')^rho with rho = 2 of 002 Sec. 9),
    "euclidean" ||x - y||, "l1" sum_k |x_k - y_k|, "cosine" 1 - <x, y> / (||x|| ||y||), and
    "dot" -<x, y> (the cost C_j = -<q, k_j> that turns one-sided entropic OT into softmax attention, 001 eq. (4)).

    >>> import torch
    >>> from wviz.ot import cost_matrix
    >>> x, y = torch.tensor([[0.0, 0.0], [1.0, 0.0]]), torch.tensor([[0.0, 1.0]])
    >>> cost_matrix(x, y).tolist()                                        # ||x_i - y_j||^2
    [[1.0], [2.0]]
    >>> [round(c, 4) for c in cost_matrix(x, y, "euclidean")[:, 0].tolist()]   # ||x_i - y_j||
    [1.0, 1.4142]
    """
    if kind not in COST_KINDS:
        raise ValueError(f"unknown cost kind {kind!r}; choose from {', '.join(COST_KINDS)}")
    x, y = _points(x, y)
    with torch.no_grad():
        if kind == "sqeuclidean":  # ||x||^2 + ||y||^2 - 2 <x, y>: one matrix product, clamped at the rounding error
            xx, yy = (x * x).sum(-1), (y * y).sum(-1)
            return (xx[..., :, None] + yy[..., None, :] - 2 * x @ y.mT).clamp_min_(0)
        if kind == "euclidean":
            return torch.cdist(x, y, p=2.0)
        if kind == "l1":
            return torch.cdist(x, y, p=1.0)
        if kind == "dot":
            return -(x @ y.mT)
        return _cosine(x, y)
