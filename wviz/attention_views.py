"""What the "Attention as transport" page computes, built on :mod:`wviz.attention`.

Each regularised map returns argmin_{p in simplex} -<s, p> + tau * Omega(p) (eq. (13) of the 001 note), so
dividing the scores by tau and solving with tau = 1 gives the same point; the tau sweep uses this to solve all
temperatures in one batched call.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from wviz import attention

MECHANISMS = attention.MECHANISMS


def attend(mechanism: str, scores: torch.Tensor, tau: float, alpha: float = 1.5,
           prior: torch.Tensor | None = None) -> torch.Tensor:
    """The closed-form weights p* of ``mechanism`` for scores s (..., m) at temperature tau."""
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown mechanism {mechanism!r}; choose from {', '.join(MECHANISMS)}")
    if MECHANISMS[mechanism].needs_prior and prior is None:
        raise ValueError("prior-softmax needs a prior distribution over the keys")
    return MECHANISMS[mechanism](scores, tau, prior=prior, alpha=alpha)


def objective(mechanism: str, p: torch.Tensor, scores: torch.Tensor, tau: float, alpha: float = 1.5,
              prior: torch.Tensor | None = None) -> torch.Tensor:
    """-<s, p> + tau * Omega(p) for the regulariser of ``mechanism`` (eq. (13) of the 001 note)."""
    return MECHANISMS[mechanism].objective(p, scores, tau, prior=prior, alpha=alpha)


def dot_scores(query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """s_j = <q, k_j>, i.e. the cost C_j = -<q, k_j> of the one-sided transport problem (eq. (4)-(5), 001)."""
    return keys @ query.unsqueeze(-1) if query.dim() == 1 else query @ keys.transpose(-1, -2)


def random_queries_keys(n: int, m: int, d: int, seed: int, device=None, dtype=torch.float32):
    """n queries and m keys with i.i.d. N(0, 1) entries in R^d, reproducible from ``seed``."""
    g = torch.Generator().manual_seed(int(seed))
    q = torch.randn(n, d, generator=g, dtype=dtype)
    k = torch.randn(m, d, generator=g, dtype=dtype)
    return q.to(device), k.to(device)


@dataclass(frozen=True)
class Landscape:
    """The objective over the 2-simplex for m = 3 keys, with the closed-form and the numerical argmin."""
    points: torch.Tensor        # (G, 3) barycentric grid
    values: torch.Tensor        # (G,) objective at each grid point
    closed_form: torch.Tensor   # (3,) p* from the closed form
    numerical: torch.Tensor     # (3,) argmin found by wviz.attention.solve_simplex (no closed form used)
    closed_value: float
    numerical_value: float


def simplex_grid(resolution: int, dtype=torch.float64) -> torch.Tensor:
    """All points (i, j, k)/resolution of the 2-simplex with i + j + k = resolution, shape (G, 3)."""
    i, j = torch.meshgrid(torch.arange(resolution + 1), torch.arange(resolution + 1), indexing="ij")
    keep = i + j <= resolution
    i, j = i[keep], j[keep]
    return torch.stack([i, j, resolution - i - j], dim=-1).to(dtype) / resolution


def landscape(mechanism: str, scores: torch.Tensor, tau: float, alpha: float = 1.5,
              prior: torch.Tensor | None = None, resolution: int = 60) -> Landscape:
    """Objective landscape on the 2-simplex for three scores, closed form vs generic solver."""
    if scores.shape[-1] != 3:
        raise ValueError(f"the simplex landscape needs exactly 3 keys, got {scores.shape[-1]}")
    s = scores.detach().to("cpu", torch.float64)
    pr = None if prior is None else prior.detach().to("cpu", torch.float64)
    grid = simplex_grid(resolution)
    values = objective(mechanism, grid, s.expand_as(grid), tau, alpha, pr)
    closed = attend(mechanism, s, tau, alpha, pr)
    numerical = MECHANISMS[mechanism].solve(s, tau, prior=pr, alpha=alpha, tol=1e-13)
    return Landscape(grid, values, closed, numerical,
                     float(objective(mechanism, closed, s, tau, alpha, pr)),
                     float(objective(mechanism, numerical, s, tau, alpha, pr)))


def tau_sweep(mechanism: str, scores: torch.Tensor, taus: torch.Tensor, alpha: float = 1.5,
              prior: torch.Tensor | None = None) -> torch.Tensor:
    """Weights (T, m) for each tau in ``taus``: from argmax (tau -> 0) to uniform or the prior (tau -> inf)."""
    s = scores.reshape(1, -1) / taus.to(scores).reshape(-1, 1)
    return attend(mechanism, s, 1.0, alpha, prior)
