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


# Plain Sinkhorn needs about 1 / (1 - r) iterations, which grows like 1 / gamma: at gamma = 1e-4 max C it has not
# converged after 10^5 iterations (seconds of waiting). The scrubber records at most this many; the page says so.
SCRUB_MAX_ITER = 3000


def scrub_schedule(n_iter: int, snapshots: int = 40, max_iter: int = SCRUB_MAX_ITER) -> tuple[int, int]:
    """(every, budget) of the scrubber's plain-Sinkhorn run: record the plan and the marginal error every ``every``
    iterations, for at most ``budget`` iterations. ``n_iter`` (the iterations a first solve needed) sets the
    interval; plain Sinkhorn takes a few times more, so the budget is 10 n_iter (at least 1000), capped at
    ``max_iter`` and rounded down to a multiple of ``every`` so that the last iterate is recorded."""
    every = max(1, min(n_iter, max_iter) // snapshots)
    budget = min(max(10 * n_iter, 1000), max_iter)
    return every, max(every, budget // every * every)


def sinkhorn_snapshots(a: torch.Tensor, b: torch.Tensor, C: torch.Tensor, gamma: float, n_iter: int,
                       snapshots: int = 40, tol: float = 1e-6, max_iter: int = SCRUB_MAX_ITER) -> ot.OTResult:
    """Plain Sinkhorn at gamma (no epsilon scaling, no over-relaxation) from the uniform start, keeping about
    ``snapshots`` iterates of the plan to scrub through (see :func:`scrub_schedule`). ``converged=False`` means
    the run stopped at its budget: it shows only the first iterations."""
    every, budget = scrub_schedule(n_iter, snapshots, max_iter)
    return ot.sinkhorn(a, b, C, gamma, tol=tol, eps_scaling=False, omega=1.0, record_plans=every,
                       max_iter=budget)


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
