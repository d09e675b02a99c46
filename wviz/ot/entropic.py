"""Entropic optimal transport, eq. (23) of 002: W_gamma(a, b; C) = min_{P in U(a, b)} <C, P> - gamma H(P), by the
stabilised Sinkhorn algorithm (Cuturi 2013; Schmitzer 2019) with epsilon scaling, over-relaxation (Thibault et al.
2021) and batch compaction, and its one-sided form (001 eqs. (4)-(5)).

The solver runs in stages, one per gamma of the epsilon-scaling schedule; each stage iterates on the scalings
(wviz.ot.scaling) and checks the marginal error every few iterations (:func:`_check`).
"""
from __future__ import annotations

import contextlib
import math

import torch

from wviz._checks import positive

from .batch import leave, worth_leaving
from .lean import LeanScalings, one_blas_thread, use_lean
from .problem import (OTResult, check_cost, check_iter_args, check_mass, dot, finish, init_potentials, prepare,
                      tensors)
from .relaxation import OverRelaxation, check_omega
from .scaling import ABSORB, Scalings

_EPS_FACTOR = 0.1     # epsilon scaling: each stage solves for gamma_k = gamma_{k-1} * _EPS_FACTOR
_EPS_START = 0.01     # ... for the gammas below this fraction of the cost range (above it one stage is cheaper)
_STAGE_TOL = 1e-3     # marginal error at which an intermediate stage hands over to the next (smaller) gamma
_MAX_FAILURES = 5     # overflow recoveries before a run gives up and returns its last good plan


@torch.no_grad()
def sinkhorn(a, b, C, gamma, tol: float = 1e-6, max_iter: int = 10000, *, init=None, eps_scaling: bool = True,
             omega: float | None = None, check_every: int | None = None, record_plans: int = 0) -> OTResult:
    """Entropic optimal transport: eq. (23) of 002, W_gamma(a, b; C) = min_{P in U(a, b)} <C, P> - gamma H(P).

    The solution is P_ij = exp((f_i + g_j - C_ij) / gamma) for dual potentials f, g (Cuturi 2013). Sinkhorn's
    algorithm alternates u <- a / (K v), v <- b / (K^T u) on the kernel K = exp(-C / gamma); here in its
    stabilised form (Schmitzer 2019): K_ij = exp((f_i + g_j - C_ij) / gamma) is built from log-domain potentials,
    iterations are cheap matrix-vector products on the scalings u, v, and u, v are absorbed into f, g
    (f += gamma log u) whenever |log u| or |log v| outgrows a bound, so nothing overflows for any gamma. On top:
    the cost is shifted by its row minima (the plan does not change), epsilon scaling solves a short schedule of
    larger gammas first (each warm-starting the next), and the updates are over-relaxed,
    u <- u^(1 - omega) (a / K v)^omega, with omega in [1, 2) adapted from the observed convergence rate (Young's
    SOR theory; Thibault et al. 2021, Lehmann et al. 2022). The plan is the log-domain plan of the final potentials.
    In a batch, problems that have converged leave it once the others still need many iterations, so that one slow
    problem does not hold the whole batch's matrix-vector products. A single problem on the CPU (no record_plans)
    runs the same algorithm in numpy on buffers allocated once (wviz.ot.lean); there a float64 problem of at least
    512 x 512 with omega=None starts each stage on a float32 copy of the kernel and finishes in float64 (every
    returned number is float64's).

    Arguments: a (..., n) and b (..., m) non-negative masses of equal totals (zeros allowed: those rows and columns
    get no mass), C (..., n, m) finite costs, gamma > 0 a float in the units of C (think of gamma / max|C|).
    b=None solves the one-sided problem, rows constrained only: P = a_i softmax(-C_i / gamma), 001 eqs. (4)-(5).

    tol: stop when the L1 error of both marginals is <= tol (max(||P1 - a||_1, ||P^T 1 - b||_1)), checked every
    check_every iterations (default 10 on CUDA, where a check is a host synchronisation; on the CPU 1, or up to
    4 for small problems, where a check costs as much as an iteration).
    max_iter caps the iterations of all stages together; a run that stops without meeting tol returns
    converged=False (float32 cannot go much below 1e-6: it stops once the error stops falling near rounding level).
    init: a previous OTResult (or a pair (f, g)) to warm-start from, e.g. the previous value of a gamma slider;
    epsilon scaling then runs from init.gamma down to gamma.
    eps_scaling=False solves at gamma directly; omega=None adapts the over-relaxation, a float fixes it
    (omega=1: plain Sinkhorn). record_plans=k keeps the plan every k iterations in result.plans (solving at gamma
    directly, so that every recorded plan is an iterate for this gamma; at most about 256 MB of them: when more
    come, every other one is dropped and the interval doubles).
    """
    gamma = positive(gamma, "gamma")
    check_iter_args(tol, max_iter)
    check_omega(omega)
    if b is None:
        return _one_sided(a, C, gamma)
    a, b, C, shape, info = prepare(a, b, C)
    record = int(record_plans or 0)
    check_every = _check_interval(check_every, record, C)
    warm = None if init is None else init_potentials(init, a, b, *C.shape)
    f, g, f_is_zero, gamma0 = _start_potentials(warm, a, b, info, gamma)
    lean = use_lean(C, record)
    if lean:   # one problem on the CPU; a fixed omega asks for exact float64 iterations
        batch = LeanScalings(a, b, C, f, g, info["zero_a"], info["zero_b"], low=omega is None)
    else:
        batch = Scalings(a, b, C, f, g, info["zero_a"], info["zero_b"])
    top = gamma0 if gamma0 is not None else _EPS_START * (info["hi_max"] - info["lo_min"])
    schedule = _schedule(gamma, top) if eps_scaling and not record else [gamma]
    relax = OverRelaxation(C.shape[0], None if omega is None else float(omega))
    run = _Run(tol, max_iter, check_every, record, relax, C)
    with one_blas_thread() if lean else contextlib.nullcontext():
        for stage, gam in enumerate(schedule):
            final = stage == len(schedule) - 1
            if stage == 0 and warm is None and (info["hi_max"] - info["lo_min"]) / gam < batch.clamp:
                batch.cold_start(gam, f_is_zero)
            else:
                # a new gamma, a warm start, or a cold start at a gamma so small that whole columns of the kernel
                # would sit at the clamp (and take its value, not theirs): normalised, no row or column is lost
                batch.rebuild(batch.ma, batch.mb, gam)
            _stage(batch, run, gam, final)
            if run.failures > _MAX_FAILURES or run.it >= max_iter:
                break
            if not final:
                batch.absorb(batch.u, batch.v, gam)
        return _result(batch, run, shape, gam, gamma)


def _check_interval(check_every, record: int, C) -> int:
    """Iterations between convergence checks: a check costs a few vector operations (and on CUDA a host
    synchronisation); recorded plans are taken at checks."""
    B, n, m = C.shape
    if check_every is None:
        check_every = 10 if C.device.type == "cuda" else min(4, max(1, (1 << 18) // (B * n * m)))
    if record:
        check_every = record
    if not (isinstance(check_every, int) and check_every >= 1):
        raise ValueError(f"check_every must be a positive integer, got {check_every!r}")
    return check_every


def _start_potentials(warm, a, b, info, gamma):
    """(f, g, f_is_zero, gamma0): the warm start's potentials and gamma, or a cold start's shift of the cost by its
    row minima (the plan does not change: any f_i + g_j added to -C_ij is absorbed by the scalings)."""
    if warm is not None:
        f, g, gamma0 = warm
        return f, g, False, gamma0
    if info["lo_max"] - info["lo_min"] <= gamma * ABSORB[a.dtype] / 2:
        # row minima within a few gamma of each other: one scalar shift keeps every row of the first kernel
        # within exp(-ABSORB / 2) of 1, and f = 0 saves a pass
        return torch.zeros_like(a), torch.full_like(b, info["lo_min"]), True, None
    # shift every row by its minimum: each row of the first kernel has an entry exp(0) = 1
    return info["lo"].clone(), torch.zeros_like(b), False, None


def _schedule(gamma: float, top: float) -> list[float]:
    """Epsilon scaling (Schmitzer 2019): gamma_k = gamma / _EPS_FACTOR^k, from top (_EPS_START times the cost
    range, or a warm start's gamma) down to gamma; above that one stage converges in fewer iterations than a
    schedule."""
    schedule = [gamma]
    while schedule[-1] / _EPS_FACTOR < top * (1 - 1e-9):
        schedule.append(schedule[-1] / _EPS_FACTOR)
    schedule.reverse()
    return schedule


class _Run:
    """What one sinkhorn call carries across its stages: the stopping rule, the iteration count, the history of
    checks, the recorded plans, the over-relaxation and the overflow recoveries."""

    __slots__ = ("tol", "max_iter", "check_every", "record", "relax", "history", "plans", "record_every", "max_plans",
                 "it", "failures", "range_every", "tiny", "max_log_range")

    def __init__(self, tol, max_iter, check_every, record, relax, C):
        self.tol, self.max_iter, self.check_every, self.record, self.relax = tol, max_iter, check_every, record, relax
        self.history, self.plans, self.record_every = [], [], record
        plan_bytes = C.numel() * C.element_size()
        self.max_plans = max(2, min(256, (256 << 20) // max(plan_bytes, 1)))
        self.it, self.failures = 0, 0
        # float32 overflows within a few iterations; recorded iterates must never lean on the clamp for long
        self.range_every = 1 if C.dtype == torch.float32 or record else 4
        self.tiny = 1000 * torch.finfo(C.dtype).eps   # the rounding floor of the marginal error
        self.max_log_range = ABSORB[C.dtype]   # the scalings stay within exp(+-ABSORB) (wviz.ot.scaling)

    def steps(self) -> int:
        """Iterations until the next check: at the next multiple of check_every, or at max_iter."""
        return max(1, min(self.check_every - self.it % self.check_every, self.max_iter - self.it))

    def record_plan(self, batch: Scalings):
        """Keep the current plan diag(u) K diag(v); beyond max_plans keep the first and every other one of the
        rest, and record half as often."""
        self.plans.append((self.it, batch.u * batch.K * batch.v.mT))
        if len(self.plans) > self.max_plans:
            self.plans[1:] = self.plans[2::2]
            self.record_every *= 2


def _stage(batch: Scalings, run: _Run, gam: float, final: bool):
    """Iterate at one gamma of the schedule until the marginal error meets the stage's tolerance (tol at the
    final gamma, _STAGE_TOL before it), max_iter, the rounding floor, or repeated overflow."""
    stage_tol = run.tol if final else max(run.tol, _STAGE_TOL)
    omega = run.relax.start_stage(gam)
    batch.plain = bool((omega == 1).all())
    batch.set_omega(omega)
    if run.record:
        run.record_plan(batch)
    saved = batch.save()   # the last scalings that passed a check
    best, best_it, n_checks = math.inf, run.it, 0
    batch.start()
    while True:
        steps = run.steps()
        batch.iterate(steps)
        run.it += steps
        n_checks += 1
        checked = _check(batch, run, gam, stage_tol, n_checks)
        if checked is None:   # an overflow: back to the last good scalings, unless that keeps failing
            if _recover(batch, run, saved, gam):
                return
            saved = batch.save()
            continue
        errs, worst, done = checked
        saved = batch.save()
        run.history.append((run.it, worst))
        if run.record and run.it % run.record_every == 0:
            run.record_plan(batch)
        if done:
            return
        if worst < best * 0.9:
            best, best_it = worst, run.it
        elif final and worst < run.tiny and run.it - best_it >= 50:
            return   # stuck at the rounding floor (float32): stop honestly, converged=False
        conv = errs <= run.tol   # converged problems leave a batch whose rest is slow (wviz.ot.batch)
        if final and not run.record and worth_leaving(conv, errs, run.relax.lam, run.tol):
            leave(batch, conv, gam)
            run.relax.keep(~conv)
            errs, saved = errs[~conv], batch.save()
        if run.relax.update(errs, run.it):
            batch.set_omega(run.relax.omega)
            batch.plain = False


def _check(batch: Scalings, run: _Run, gam: float, stage_tol: float, n_checks: int):
    """The marginal errors of the plan diag(u) K diag(v): (errors, worst, done), or None after an overflow.

    Every range_every checks (and before stopping) the scalings are measured: beyond exp(+-ABSORB) they are
    absorbed into the potentials before they overflow (Schmitzer 2019), the same plan on new potentials except for
    entries that sat at the clamp, which now take their exact values; hence new errors.
    """
    errs = batch.errors()
    worst = float(errs.max())
    done = worst <= stage_tol or run.it >= run.max_iter
    log_range = batch.log_range() if (done or n_checks % run.range_every == 0 or not math.isfinite(worst)) else 0.0
    if not math.isfinite(worst) or not math.isfinite(log_range):
        return None
    if log_range > run.max_log_range:
        batch.rebuild(batch.u, batch.v, gam)
        batch.refresh()
        errs = batch.errors()
        worst = float(errs.max())
        done = worst <= stage_tol or run.it >= run.max_iter
    return errs, worst, done


def _recover(batch: Scalings, run: _Run, saved, gam: float) -> bool:
    """After an overflow in spite of the bounds: rebuild from the last good scalings on a normalised kernel and
    check every time from now on. True when it has failed too often (then the last good scalings stay)."""
    run.failures += 1
    run.range_every = 1
    if run.failures > _MAX_FAILURES:
        batch.u, batch.v = saved
        return True
    batch.rebuild(*saved, gam)
    batch.start(low=False)
    return False


def _result(batch: Scalings, run: _Run, shape, gam: float, gamma: float) -> OTResult:
    """The log-domain plan of the final potentials, joined to those of problems that left the batch early. A run
    stopped by max_iter before the last stage returns a plan for a larger gamma, never "converged"."""
    if run.failures > _MAX_FAILURES:   # could not recover from repeated overflow: the last good plan, as it is
        batch.refresh()
    P, *parts = batch.plan_parts(gam)
    parts.append((parts[0] <= run.tol) & (gam == gamma) & (run.failures <= _MAX_FAILURES))
    if batch.finished is not None:   # the batch was compacted: the rest join those that finished earlier
        batch.finished.store(batch.orig, P, parts)
        P, parts = batch.finished.P, batch.finished.parts
    err, f, g, cost, reg, converged = parts
    return finish(shape, P, cost, reg, run.it, err, converged, run.history, f, g, gam, run.plans)


def _one_sided(a, C, gamma) -> OTResult:
    """The one-sided problem, rows constrained only (001 eqs. (4)-(5)): min over P 1 = a of <C, P> - gamma H(P),
    solved in closed form by P_ij = a_i softmax(-C_i / gamma)_j."""
    a, _, C = tensors(a, None, C)
    try:
        shape = torch.broadcast_shapes(a.shape[:-1], C.shape[:-2])
    except RuntimeError:
        raise ValueError(f"the batch shapes of a {tuple(a.shape[:-1])} and C {tuple(C.shape[:-2])} do not match") \
            from None
    n, m = C.shape[-2:]
    check_mass(a, "a")
    B = math.prod(shape)
    C = C.expand(*shape, n, m).reshape(B, n, m)
    check_cost(C)
    a = a.expand(*shape, n).reshape(B, n)
    logp = torch.log_softmax(-C / gamma, dim=-1)            # row i: softmax(-C_i / gamma), 001 eq. (5)
    P = a[:, :, None] * logp.exp()
    # potentials: log P_ij = (f_i - C_ij) / gamma, so f_i = gamma (log a_i + log p_ij) + C_ij (any j; take j = 0)
    f = torch.where(a > 0, gamma * (a.log() + logp[:, :, 0]) + C[:, :, 0], -torch.inf)
    cost = dot(C, P)
    reg = (torch.where(a > 0, f, 0) * P.sum(-1)).sum(-1)   # sum P (C + gamma log P) = sum_i f_i a_i
    err = (P.sum(-1) - a).abs().sum(-1)
    return finish(shape, P, cost, reg, 0, err, torch.ones_like(err, dtype=torch.bool), [], f,
                  torch.zeros(B, m, dtype=C.dtype, device=C.device), gamma)
