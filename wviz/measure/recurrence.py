"""The fixed point of the weight-shared recurrence (003 Prop. 26, Sec. 6.2)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from wviz._checks import renamed

from .flow import _layer
from .measures import _points
from .wasserstein import w1


@dataclass(frozen=True, eq=False)
class FixedPoint:
    """The recurrence X^{l+1} = T(X^l) with one triple of projections (Sec. 6.2). points (N, d) the last iterate;
    steps (n_iter,) W1(m(X^{l+1}), m(X^l)); to_last (n_iter + 1,) W1(m(X^l), m(X^last)); converged: a step fell
    below tol times the l1 diameter of X^0."""

    points: torch.Tensor
    steps: torch.Tensor
    to_last: torch.Tensor
    n_iter: int
    converged: bool


@renamed(weights="projections")
def fixed_point(x0, potential: str = "dot", tau: float = 1.0, projections=None, residual: bool = False,
                norm: bool = False, max_iter: int = 100, tol: float = 1e-9, ground: str = "l1") -> FixedPoint:
    """Iterate the weight-shared layer T (the Universal Transformer of Sec. 6.2) until W1 between successive
    measures falls below tol * diam(X^0). Prop. 26: if kappa(T) < 1 (Banach) the iterates converge to a
    unique fixed point, geometrically: W1(mu^l, mu*) <= kappa(T)^l / (1 - kappa(T)) W1(mu^1, mu^0).

    Example: the weight-shared Gaussian layer collapses the square onto its centre, a fixed point, in a few steps.

    >>> import torch
    >>> from wviz.measure import fixed_point
    >>> x = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=torch.float64)   # a unit square
    >>> fp = fixed_point(x, "gaussian")
    >>> fp.converged, fp.n_iter
    (True, 5)
    >>> [[round(v, 4) for v in p] for p in fp.points.tolist()]
    [[0.5, 0.5], [0.5, 0.5], [0.5, 0.5], [0.5, 0.5]]
    """
    x = _points(x0, "the initial particles")
    if x.ndim != 2:
        raise ValueError(f"fixed_point takes one point cloud (N, d), got shape {tuple(x.shape)}")
    if not (isinstance(max_iter, int) and max_iter >= 1):
        raise ValueError(f"max_iter must be a positive integer, got {max_iter!r}")
    scale = max(float(torch.cdist(x, x, p=1.0).max()), 1e-300)
    iterates, steps, converged = [x], [], False
    for it in range(1, max_iter + 1):
        iterates.append(_layer(iterates[-1], potential, tau, projections, residual, norm, it))
        steps.append(w1(iterates[-2], iterates[-1], ground))
        if float(steps[-1]) <= tol * scale:
            converged = True
            break
    to_last = torch.stack([w1(X, iterates[-1], ground) for X in iterates])
    return FixedPoint(iterates[-1], torch.stack(steps), to_last, len(steps), converged)
