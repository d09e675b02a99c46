"""What the "Transport plans" page computes, built on :mod:`wviz.ot`."""
from __future__ import annotations

import torch

from wviz import ot

SOLVERS = ("sinkhorn", "exact", "quadratic")


def solve(solver: str, a: torch.Tensor, b: torch.Tensor, C: torch.Tensor, gamma: float,
          tol: float = 1e-6) -> ot.OTResult:
    """One transport problem with the chosen solver: entropic (eq. (23) of 002), exact, or squared-L2."""
    if solver == "sinkhorn":
        return ot.sinkhorn(a, b, C, gamma, tol=tol)
    if solver == "exact":
        return ot.emd(a, b, C)
    if solver == "quadratic":
        return ot.quadratic_ot(a, b, C, gamma)
    raise ValueError(f"unknown solver {solver!r}; choose from {', '.join(SOLVERS)}")


def sinkhorn_snapshots(a: torch.Tensor, b: torch.Tensor, C: torch.Tensor, gamma: float, n_iter: int,
                       snapshots: int = 40, tol: float = 1e-6) -> ot.OTResult:
    """Plain Sinkhorn at gamma (no epsilon scaling), keeping about ``snapshots`` iterates of the plan to scrub
    through; ``n_iter`` (the iterations a first solve needed) sets the recording interval."""
    every = max(1, n_iter // snapshots)
    return ot.sinkhorn(a, b, C, gamma, tol=tol, eps_scaling=False, omega=1.0, record_plans=every,
                       max_iter=max(10 * n_iter, 1000))


def gamma_sweep(a: torch.Tensor, b: torch.Tensor, C: torch.Tensor, gammas: torch.Tensor,
                tol: float = 1e-6) -> torch.Tensor:
    """Transport cost <C, P_gamma> of the entropic plan for each gamma, largest gamma first.

    Each solve starts from the previous one's dual potentials (a warm start), so the sweep costs little more
    than its smallest gamma alone.
    """
    costs = torch.empty(len(gammas), dtype=C.dtype)
    order = torch.argsort(gammas, descending=True)
    previous = None
    for i in order.tolist():
        previous = ot.sinkhorn(a, b, C, float(gammas[i]), tol=tol, init=previous)
        costs[i] = previous.cost
    return costs


def sparsity(plan: torch.Tensor, rel: float = 1e-8) -> float:
    """Fraction of the plan's entries that carry (relatively) no mass: exact and quadratic plans are sparse."""
    return float((plan <= rel * plan.max()).float().mean())


def entropy(plan: torch.Tensor) -> float:
    """H(P) = -sum P log P with 0 log 0 = 0."""
    P = plan[plan > 0]
    return float(-(P * P.log()).sum())
