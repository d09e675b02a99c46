"""Batch compaction for Sinkhorn: converged problems leave a batch early, so that one slow problem (a small gamma
for its costs, whose rate can be as slow as 1 - exp(-(C_ik + C_jl - C_il - C_jk) / gamma)) does not hold the whole
batch's matrix-vector products. Each problem's result is the same as if it were solved alone.
"""
from __future__ import annotations

import numpy as np
import torch

from .loop import BatchLoop


class Finished:
    """The results of a batch whose converged problems leave it early: the plans go into the batch's first
    kernel buffer (B, n, m), the rest into per-problem tensors, at the problems' original indices; rest holds the
    original indices of the problems still in the batch."""

    def __init__(self, K, f, g):
        B = K.shape[0]
        self.P = K
        self.parts = [f.new_empty(B), f.new_empty(f.shape), g.new_empty(g.shape), f.new_empty(B), f.new_empty(B),
                      torch.empty(B, dtype=torch.bool, device=K.device)]
        self.rest = torch.arange(B, device=K.device)

    def store(self, idx: torch.Tensor, P, parts):
        """Write the plans P and parts (marginal error, f, g, cost, reg_cost, converged) of problems idx."""
        if P is not self.P:   # a compacted buffer
            self.P.index_copy_(0, idx, P)
        for mine, part in zip(self.parts, parts):
            mine.index_copy_(0, idx, part)

    def join(self, P, parts) -> tuple:
        """The whole batch's plans and parts: those of the problems still in the batch (P, parts) joined to those
        that left it before."""
        self.store(self.rest, P, parts)
        return self.P, self.parts


def iterations_left(err: np.ndarray, rate: np.ndarray | None, rest: np.ndarray, tol: float) -> float:
    """Iterations the slowest problem of ``rest`` still needs to reach tol at its last measured rate per iteration
    (``rate``): 0 while no rate is measured, the largest float for a problem that is not converging."""
    if rate is None:
        return 0.0
    rate, err = rate[rest], err[rest]
    with np.errstate(divide="ignore", invalid="ignore"):
        left = np.where(rate < 1, np.log(tol / err) / np.log(rate), np.inf)
    return float(np.nan_to_num(left, nan=0.0).max())


def worth_leaving(conv: np.ndarray, err: np.ndarray, rate: np.ndarray | None, tol: float) -> bool:
    """Whether the converged problems conv should leave the batch: half of it has converged and the rest, at their
    measured rates, need more than ten more iterations. Leaving costs about two iterations' work (copying the
    rest's C and kernel), so a batch that converges together never moves."""
    return bool(2 * np.count_nonzero(conv) >= len(conv)) and iterations_left(err, rate, ~conv, tol) > 10


def leave(loop: BatchLoop, conv: np.ndarray, gamma: float, finished: Finished | None, tol: float) -> Finished:
    """The converged problems conv of a batch leave it: their plans and parts are written out now (into finished,
    made at the first leave), and the rest go on in buffers of their own. Only a batch loop can do this (a loop of
    one problem never needs to: it stops when its problem has converged). converged is the plan's marginal error
    <= tol, as for the rest (a semi-relaxed plan is not the iterate checked: wviz.ot.semirelaxed)."""
    device = loop.K.device
    done, rest = (torch.as_tensor(np.flatnonzero(x), device=device) for x in (conv, ~conv))
    if finished is None:
        finished = Finished(loop.K, loop.f, loop.g)
    P, *parts = loop.plan_parts(gamma, done)
    finished.store(finished.rest[done], P, parts + [parts[0] <= tol])
    finished.rest = finished.rest.index_select(0, rest)
    loop.keep(rest)
    return finished
