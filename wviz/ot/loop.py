"""The contract of Sinkhorn's scaling loop: what wviz.ot.entropic's driver (the stages of epsilon scaling, the
checks, the stopping rule, the overflow recoveries) asks of the iterates, whichever code runs them.

The loop holds a problem (or a batch of problems) in the stabilised scaling form of Schmitzer 2019,
P = diag(u) K diag(v) with the kernel K_ij = exp((f_i + g_j - C_ij) / gamma) built from log-domain potentials f, g,
and iterates Sinkhorn's updates on the scalings u, v. Two implementations run the same algorithm:

    wviz.ot.scaling.Scalings       a batch (B, n, m) in torch, on any device: :class:`BatchLoop`
    wviz.ot.lean.LeanScalings      one problem on the CPU in numpy on fixed buffers, with a float32 start

A variant of the iteration lands here as a third implementation of the same contract or, better, as an option of
these two, never as a copy of the driver. Semi-relaxed OT (rho KL(P^T 1 | b) in place of the column constraint;
wviz.ot.semirelaxed) is such an option, ``rho`` of both loops: it changes the column update of
:meth:`ScalingLoop.iterate` (the balanced one raised to rho / (rho + gamma), with a translation of the dual point
before each row update), what :meth:`ScalingLoop.errors` measures (the columns against the column condition's
target), which scalings :meth:`ScalingLoop.log_range` counts, and the objective of :meth:`ScalingLoop.plan_parts`;
the stages, checks and stopping rule stay the driver's.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np
import torch

# What ScalingLoop.save returns: the scalings (u, v) in the loop's own form, only ever handed back to it.
Saved = Any


class PlanParts(NamedTuple):
    """A solved batch as the result needs it, every part with one row per problem (B, ...) in the problem's dtype."""

    plan: torch.Tensor            # (B, n, m) P = diag(u) K diag(v)
    marginal_error: torch.Tensor  # (B,) max(||P 1 - a||_1, ||P^T 1 - b||_1) (semi-relaxed: module semirelaxed)
    f: torch.Tensor               # (B, n) potentials with the scalings absorbed: P_ij = exp((f_i + g_j - C_ij) / gamma)
    g: torch.Tensor               # (B, m)
    cost: torch.Tensor            # (B,) <C, P>
    reg_cost: torch.Tensor        # (B,) <C, P> - gamma H(P) (semi-relaxed: its objective, module semirelaxed)


@runtime_checkable
class ScalingLoop(Protocol):
    """Sinkhorn's iterates on P = diag(u) K diag(v), K = exp((f + g - C) / gamma), for the driver of wviz.ot.entropic.

    The driver's order: per gamma of the schedule, :meth:`cold_start` (first stage of a cold start) or
    :meth:`rebuild`; :meth:`set_omega`, :meth:`save`, :meth:`start`; then :meth:`iterate` and a check
    (:meth:`errors`, now and then :meth:`log_range`, and :meth:`absorb` + :meth:`rebuild` + :meth:`refresh` when
    the scalings outgrow their bound) until the stopping rule ends the stage; after an overflow :meth:`recover` (or
    :meth:`restore` when the run gives up); between stages :meth:`absorb`; at the end :meth:`plan_parts`.
    """

    clamp: float   # kernel exponents are clamped to [-clamp, clamp / 2] (wviz.ot.scaling.CLAMP of the dtype)

    def cold_start(self, gamma: float, f_is_zero: bool) -> None:
        """The first kernel of a cold start, whose exponents (f_i + g_j - C_ij) / gamma all lie in
        [-(max C - min C) / gamma, 0] above the clamp (the caller checks), so the clamp is skipped (and f where
        f_is_zero); scalings 1 on the points with mass, 0 elsewhere."""

    def rebuild(self, gamma: float) -> None:
        """A new kernel for gamma from the potentials as they are, normalised so that every row and column has
        largest entry 1 (no row or column is lost to the clamp after a change of gamma, a warm start or an
        absorption); the shifts go into the scalings, so that the plan is the potentials' plan."""

    def absorb(self, gamma: float) -> None:
        """f += gamma log u, g += gamma log v: the current scalings move into the potentials (Schmitzer 2019;
        u = 0, a zero mass, gives -inf). The kernel agrees with the potentials again only after :meth:`rebuild`."""

    def set_omega(self, omega: np.ndarray) -> None:
        """The over-relaxation factors omega (B,) of the next updates (wviz.ot.relaxation); plain Sinkhorn,
        u <- a / K v, where every factor is 1."""

    def start(self) -> None:
        """K v, what the first row update of a stage reads (the lean loop may switch to its float32 copy here)."""

    def iterate(self, steps: int) -> None:
        """steps Sinkhorn iterations, each a row update u <- u^(1 - omega) (a / K v)^omega and then the same for
        v with K^T u (Cuturi 2013 at omega = 1; Thibault et al. 2021), from the current K v; the points without
        mass keep scaling 0. Leaves K v and K^T u of the new scalings, which the checks read."""

    def errors(self) -> np.ndarray:
        """The marginal error (wviz.ot.problem.marginal_error) of every problem's current plan, (B,) float64 on
        the host, from the products of the last iteration. Non-finite after an overflow."""

    def log_range(self) -> float:
        """max |log u|, |log v| over the points with mass: how far the scalings are from the potentials' plan
        (inf or NaN after an overflow)."""

    def refresh(self) -> None:
        """K v and K^T u of the current scalings (after a rebuild, for :meth:`errors`)."""

    def save(self) -> Saved:
        """The current scalings, to go back to after an overflow (see :meth:`recover`)."""

    def restore(self, saved: Saved) -> None:
        """Back to the scalings saved, as they are, with their K v and K^T u: what the result is read from when a
        run gives up after repeated overflows."""

    def recover(self, saved: Saved, gamma: float) -> None:
        """After an overflow: back to the scalings saved, absorbed into the potentials and rebuilt on a normalised
        kernel for gamma, ready to iterate (:meth:`start` done). The lean loop also gives up its float32 start for
        the rest of the solve: that is where overflows come from."""

    def plan(self) -> torch.Tensor:
        """The current plan diag(u) K diag(v), (B, n, m), as a new tensor (record_plans)."""

    def plan_parts(self, gamma: float) -> PlanParts:
        """The final plan and its parts, with the scalings absorbed into the potentials; the plan is written over
        the kernel's buffer, so the loop is spent. Semi-relaxed: the plan after a last plain row update, whose rows
        are a to rounding (wviz.ot.semirelaxed, "The returned plan")."""


@runtime_checkable
class BatchLoop(ScalingLoop, Protocol):
    """A loop over a batch whose converged problems can leave it early (wviz.ot.batch): a
    :class:`wviz.ot.scaling.Scalings`. K (B, n, m) is the kernel buffer, f (B, n) and g (B, m) the potentials."""

    K: torch.Tensor
    f: torch.Tensor
    g: torch.Tensor

    def plan_parts(self, gamma: float, idx: torch.Tensor | None = None) -> PlanParts:
        """As :meth:`ScalingLoop.plan_parts`, for the problems idx only (all by default); with idx the kernel's
        buffer is left as it is and the loop goes on."""

    def keep(self, idx: torch.Tensor) -> None:
        """Only the problems idx go on: every batched tensor is compacted into buffers of their own."""
