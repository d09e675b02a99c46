"""Entropic optimal transport, eq. (23) of 002: W_gamma(a, b; C) = min_{P in U(a, b)} <C, P> - gamma H(P), by the
stabilised Sinkhorn algorithm (Cuturi 2013; Schmitzer 2019) with epsilon scaling, over-relaxation (Thibault et al.
2021) and batch compaction, and its one-sided form (001 eqs. (4)-(5)).

The solver runs in stages, one per gamma_k of the epsilon-scaling schedule; each stage iterates on the scalings
of a loop (the contract wviz.ot.loop.ScalingLoop: wviz.ot.scaling for batches, wviz.ot.lean for one problem on the
CPU) and checks the marginal error every few iterations (:func:`_check`) until the stopping rule
(:meth:`_Run.stop`) ends it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math

import torch

from wviz._checks import positive

from . import semirelaxed
from .batch import Finished, leave, worth_leaving
from .lean import LeanScalings, one_blas_thread, use_lean
from .loop import BatchLoop, ScalingLoop
from .problem import (OTResult, ProblemFacts, check_cost, check_iter_args, check_mass, dot, finish, init_potentials,
                      marginal_error, prepare, tensors, to_device)
from .relaxation import OverRelaxation, check_omega
from .scaling import ABSORB, Scalings

_EPS_FACTOR = 0.1     # epsilon scaling: each stage solves for gamma_k = gamma_{k-1} * _EPS_FACTOR
_EPS_START = 0.01     # ... for the gammas below this fraction of the cost range (above it one stage is cheaper)
_STAGE_TOL = 1e-3     # marginal error at which an intermediate stage hands over to the next (smaller) gamma
_MAX_FAILURES = 5     # overflow recoveries before a run gives up and returns its last good plan
_FLOOR_ITERS = 50     # iterations without a 10 % fall of the error below the rounding floor: stuck there
# A problem of at most this many entries (B n m) on CUDA tensors is solved on the CPU: there its iterations cost less
# than launching their kernels on the GPU (BENCHMARKS.md "On a GPU", an H200: n = 256 and 16 x 64 solve faster on
# the host's one thread, 16 x 256 and n = 1024 on the GPU, n = 512 about even). Every size the Transport plans page
# offers falls below it.
CPU_ROUTE_SIZE = 1 << 18


@torch.no_grad()
def sinkhorn(a, b, C, gamma, tol: float = 1e-6, max_iter: int = 10000, *, init=None, eps_scaling: bool = True,
             omega: float | None = None, check_every: int | None = None, record_plans: int = 0,
             rho: float | None = None, route: bool = True, n_iter: int | None = None) -> OTResult:
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

    rho: semi-relaxed OT (Chizat, Peyré, Schmitzer & Vialard 2018; wviz.ot.semirelaxed), the road between the two.
    rho=None (the default) is the balanced problem above; a number rho >= 0 holds the rows exactly and pulls the
    columns towards b with the weight rho,

        min_{P >= 0, P 1 = a}  <C, P> + gamma KL(P | a b^T) + rho KL(P^T 1 | b),

    solved by the same stabilised iteration with the column update raised to phi = rho / (rho + gamma),
    v <- (b / K^T u)^phi exp((gamma log b - g) / (rho + gamma)) in the log domain, the dual point translated at every
    iteration (Séjourné, Vialard & Peyré 2022), and epsilon scaling from rho down at most. rho = 0 is each row's
    prior-softmax with prior b in closed form, P_ij = a_i b_j exp(-C_ij / gamma) / sum_k b_k exp(-C_ik / gamma)
    (001, eq. (13): plain softmax for a uniform b), rho = inf the balanced problem. Its optimality conditions:
    P 1 = a and g_j = gamma log b_j - rho log(q_j / b_j) with q = P^T 1. The result also carries rho, column_sums
    (q) and column_kl (KL(q | b)); reg_cost is the semi-relaxed objective. The plan's rows are a to rounding (the
    plan is read after a last row update), and marginal_error is the columns' L1 error against the column condition
    of those rows. POT's
    ``ot.unbalanced.sinkhorn_unbalanced(a, b, C, gamma, reg_m=(inf, rho))`` solves the same problem; its potentials
    and stopping rule differ (module semirelaxed). wviz's balanced objective -gamma H(P) equals gamma KL(P | a b^T)
    up to a constant on U(a, b) only: off it, with -gamma H(P), the rho = 0 end would be softmax whatever b.

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
    n_iter=k runs exactly k iterations at gamma and stops (Sinkformers' fixed count, wviz.models.normalisers): no
    epsilon scaling, no stop on tol (which then only decides converged), no problem leaving a batch early; the
    over-relaxation as omega says (omega=1: k plain iterations).
    route: a problem of at most CPU_ROUTE_SIZE = 2^18 entries (B n m) on CUDA tensors is solved on the CPU, where
    each iteration costs less than launching its kernels on the GPU, and its result comes back on the GPU
    (result.solved_on says 'cpu'); route=False keeps every problem on its tensors' device.

    The plan meets both marginals to tol, and its cost tends to the exact one (emd) as gamma -> 0, within
    gamma log(n m); with b=None each row is a_i softmax(-C_i / gamma):

    >>> import torch
    >>> from wviz.ot import cost_matrix, emd, sinkhorn
    >>> g = torch.Generator().manual_seed(0)
    >>> x, y = torch.rand(5, 2, generator=g, dtype=torch.float64), torch.rand(4, 2, generator=g, dtype=torch.float64)
    >>> C = cost_matrix(x, y)
    >>> a, b = torch.full((5,), 1 / 5, dtype=torch.float64), torch.full((4,), 1 / 4, dtype=torch.float64)
    >>> res = sinkhorn(a, b, C, gamma=0.01)
    >>> bool(res.converged), float(res.marginal_error) <= 1e-6
    (True, True)
    >>> torch.allclose(res.plan.sum(1), a, atol=1e-6), torch.allclose(res.plan.sum(0), b, atol=1e-6)
    (True, True)
    >>> exact = float(emd(a, b, C).cost)
    >>> [round(float(sinkhorn(a, b, C, gamma).cost) - exact, 4) for gamma in (0.1, 0.01, 0.001)]
    [0.0296, 0.0008, 0.0]
    >>> torch.allclose(sinkhorn(a, None, C, 0.5).plan, a[:, None] * torch.softmax(-C / 0.5, dim=1))
    True

    Semi-relaxed: the rows keep a, and the columns move from softmax attention (rho = 0, b uniform) to b as rho grows
    (their KL divergence from b falls to 0):

    >>> torch.allclose(sinkhorn(a, b, C, 0.05, rho=0).plan, a[:, None] * torch.softmax(-C / 0.05, dim=1))
    True
    >>> [round(float(sinkhorn(a, b, C, 0.05, rho=rho).column_kl), 4) for rho in (0, 0.01, 0.1, 1, float("inf"))]
    [0.1356, 0.1159, 0.0497, 0.0038, 0.0]
    >>> res = sinkhorn(a, b, C, 0.05, rho=0.1)
    >>> torch.allclose(res.plan.sum(1), a, atol=1e-6), [round(q, 3) for q in res.column_sums.tolist()]
    (True, [0.167, 0.348, 0.306, 0.179])
    """
    gamma = positive(gamma, "gamma")
    check_iter_args(tol, max_iter)
    check_omega(omega)
    fixed = n_iter is not None
    if n_iter is not None:
        check_iter_args(tol, n_iter, "n_iter")
        max_iter, eps_scaling = n_iter, False
    rho = semirelaxed.check_rho(rho)
    if b is None:
        if rho is not None:
            raise ValueError("rho holds the columns of the plan near their masses b: give b (b=None is the "
                             "one-sided problem, whose columns are free)")
        return _one_sided(a, C, gamma)
    if rho is not None and not 0 < rho < math.inf:   # the two ends: the prior-softmax, the balanced problem
        return _rho_end(a, b, C, gamma, rho, dict(tol=tol, max_iter=max_iter, init=init, eps_scaling=eps_scaling,
                                                  omega=omega, check_every=check_every, record_plans=record_plans,
                                                  route=route, n_iter=n_iter))
    if route and _small_on_cuda(a, b, C):
        res = sinkhorn(a.cpu(), b.cpu(), C.cpu(), gamma, tol, max_iter, init=init, eps_scaling=eps_scaling,
                       omega=omega, check_every=check_every, record_plans=record_plans, rho=rho, route=False,
                       n_iter=n_iter)
        return to_device(res, C.device)
    a, b, C, shape, facts = prepare(a, b, C)
    record = int(record_plans or 0)
    check_every = _check_interval(check_every, record, C)
    warm = None if init is None else init_potentials(init, a, b, *C.shape)
    f, g, f_is_zero, gamma0 = _start_potentials(warm, a, b, facts, gamma, rho is not None)
    lean = use_lean(C, record)
    loop: ScalingLoop
    if lean:   # one problem on the CPU; a fixed omega asks for exact float64 iterations
        loop = LeanScalings(a, b, C, f, g, facts.zero_a, facts.zero_b, low=omega is None, rho=rho)
    else:
        loop = Scalings(a, b, C, f, g, facts.zero_a, facts.zero_b, rho=rho)
    top = gamma0 if gamma0 is not None else _EPS_START * facts.cost_range
    schedule = _schedule(gamma, top if rho is None else min(top, rho)) if eps_scaling and not record else [gamma]
    relax = OverRelaxation(C.shape[0], None if omega is None else float(omega), rho)
    run = _Run(tol, max_iter, check_every, record, relax, C, fixed)
    with one_blas_thread() if lean else contextlib.nullcontext():
        for k, gamma_k in enumerate(schedule):
            final = k == len(schedule) - 1
            if k == 0 and warm is None and facts.cost_range / gamma_k < loop.clamp:
                loop.cold_start(gamma_k, f_is_zero)
            else:
                # a new gamma, a warm start, or a cold start at a gamma so small that whole columns of the kernel
                # would sit at the clamp (and take its value, not theirs): normalised, no row or column is lost
                loop.rebuild(gamma_k)
            _stage(loop, run, gamma_k, final)
            if run.stop() is not None:
                break
            if not final:
                loop.absorb(gamma_k)
        return _result(loop, run, shape, gamma_k, gamma, rho, b)


def _small_on_cuda(a, b, C) -> bool:
    """A problem on CUDA tensors of at most CPU_ROUTE_SIZE entries (B n m), B its broadcast batch size."""
    if not all(isinstance(t, torch.Tensor) and t.device.type == "cuda" for t in (a, b, C)) or C.ndim < 2:
        return False
    try:
        batch = torch.broadcast_shapes(a.shape[:-1], b.shape[:-1], C.shape[:-2])
    except RuntimeError:   # prepare says what does not match
        return False
    return math.prod(batch) * C.shape[-2] * C.shape[-1] <= CPU_ROUTE_SIZE


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


def _start_potentials(warm, a, b, facts: ProblemFacts, gamma, semi: bool = False):
    """(f, g, f_is_zero, gamma0): the warm start's potentials and gamma, or a cold start's shift of the cost by its
    row minima (the plan does not change: any f_i + g_j added to -C_ij is absorbed by the scalings). semi: the
    semi-relaxed column update reads the level of g (wviz.ot.semirelaxed), so a scalar shift goes into f."""
    if warm is not None:
        f, g, gamma0 = warm
        return f, g, False, gamma0
    if facts.max_row_min - facts.min_cost <= gamma * ABSORB[a.dtype] / 2:
        # row minima within a few gamma of each other: one scalar shift keeps every row of the first kernel
        # within exp(-ABSORB / 2) of 1, and f = 0 saves a pass
        if semi:
            return torch.full_like(a, facts.min_cost), torch.zeros_like(b), False, None
        return torch.zeros_like(a), torch.full_like(b, facts.min_cost), True, None
    # shift every row by its minimum: each row of the first kernel has an entry exp(0) = 1
    return facts.row_min.clone(), torch.zeros_like(b), False, None


def _schedule(gamma: float, top: float) -> list[float]:
    """Epsilon scaling (Schmitzer 2019): gamma_k = gamma / _EPS_FACTOR^k, from top (_EPS_START times the cost
    range, or a warm start's gamma) down to gamma; above that one stage converges in fewer iterations than a
    schedule. The semi-relaxed problem starts at rho at the latest: a stage at gamma_k > rho solves a problem near
    the prior-softmax end (its column update's exponent rho / (rho + gamma_k) below 1/2), whose potentials say
    little about a smaller gamma, and at gamma >= rho one stage converges fast (by phi <= 1/2 per iteration)."""
    schedule = [gamma]
    while schedule[-1] / _EPS_FACTOR < top * (1 - 1e-9):
        schedule.append(schedule[-1] / _EPS_FACTOR)
    schedule.reverse()
    return schedule


class _Run:
    """What one sinkhorn call carries across its stages: the stopping rule (:meth:`stop`) and what it reads, the
    iteration count, the history of checks, the recorded plans, the over-relaxation, the overflow recoveries and the
    problems that left the batch early (wviz.ot.batch)."""

    __slots__ = ("tol", "max_iter", "check_every", "record", "relax", "history", "plans", "record_every", "max_plans",
                 "it", "failures", "range_every", "tiny", "max_log_range", "finished", "final", "stage_tol", "best",
                 "best_it", "checks", "fixed")
    history: list[tuple[int, float]]          # (iteration, worst marginal error) of each check
    plans: list[tuple[int, torch.Tensor]]     # (iteration, plan) of each recorded plan
    finished: Finished | None                 # the problems that left the batch early, None until the first leave

    def __init__(self, tol, max_iter, check_every, record, relax, C, fixed: bool = False):
        self.tol, self.max_iter, self.check_every, self.record, self.relax = tol, max_iter, check_every, record, relax
        self.fixed = fixed   # n_iter: only max_iter (or overflows) ends the run
        self.history, self.plans, self.record_every = [], [], record
        plan_bytes = C.numel() * C.element_size()
        self.max_plans = max(2, min(256, (256 << 20) // max(plan_bytes, 1)))
        self.it, self.failures, self.finished = 0, 0, None
        # float32 overflows within a few iterations; recorded iterates must never lean on the clamp for long
        self.range_every = 1 if C.dtype == torch.float32 or record else 4
        self.tiny = 1000 * torch.finfo(C.dtype).eps   # the rounding floor of the marginal error
        self.max_log_range = ABSORB[C.dtype]   # the scalings stay within exp(+-ABSORB) (wviz.ot.scaling)
        self.start_stage(True)

    def start_stage(self, final: bool):
        """A new gamma_k: its tolerance, no progress and no check yet."""
        self.final = final
        self.stage_tol = self.tol if final else max(self.tol, _STAGE_TOL)
        self.best, self.best_it, self.checks = math.inf, self.it, 0

    def stop(self, worst: float | None = None) -> str | None:
        """The stopping rule of sinkhorn, the one place it is stated: why the run or its stage ends now, or None.

        Asked after each check with worst, the largest marginal error of the batch, and after a stage or an
        overflow without it. The run ends:
          "overflow"  after more than _MAX_FAILURES overflow recoveries: the last good scalings are the result;
          "max_iter"  once max_iter iterations have run, all stages together (with n_iter, nothing else ends it).
        A stage ends:
          "tol"       when worst <= the stage's tolerance: tol at the final gamma; max(tol, _STAGE_TOL) before it,
                      where a stage only hands a warm start over to the next, smaller gamma;
          "floor"     at the final gamma, when worst is below the rounding floor (1000 eps of the dtype) and has not
                      fallen by 10 % over the last _FLOOR_ITERS iterations (float32 cannot always reach tol).
        The result has converged when its marginal error is <= tol at the final gamma and the run did not give up
        (:func:`_result`); "floor" and "max_iter" return converged=False where tol was not met.
        """
        if self.failures > _MAX_FAILURES:
            return "overflow"
        if self.it >= self.max_iter:
            return "max_iter"
        if worst is None or self.fixed:
            return None
        if worst <= self.stage_tol:
            return "tol"
        # progress, for "floor": 10 % below the best error of the stage so far (see progress)
        if self.final and worst < self.tiny and self.it - self.best_it >= _FLOOR_ITERS and not worst < self.best * 0.9:
            return "floor"
        return None

    def progress(self, worst: float):
        """Note a check's worst error that did not stop the stage: the new best when it is 10 % below the best."""
        if worst < self.best * 0.9:
            self.best, self.best_it = worst, self.it

    def steps(self) -> int:
        """Iterations until the next check: at the next multiple of check_every, or at max_iter."""
        return max(1, min(self.check_every - self.it % self.check_every, self.max_iter - self.it))

    def record_plan(self, loop: ScalingLoop):
        """Keep the current plan diag(u) K diag(v); beyond max_plans keep the first and every other one of the
        rest, and record half as often."""
        self.plans.append((self.it, loop.plan()))
        if len(self.plans) > self.max_plans:
            self.plans[1:] = self.plans[2::2]
            self.record_every *= 2


def _stage(loop: ScalingLoop, run: _Run, gamma_k: float, final: bool):
    """Iterate at gamma_k, one gamma of the schedule, until the stopping rule (:meth:`_Run.stop`) ends the stage;
    recover from overflows; let converged problems leave a batch whose rest is slow (wviz.ot.batch)."""
    run.start_stage(final)
    loop.set_omega(run.relax.start_stage(gamma_k))
    if run.record:
        run.record_plan(loop)
    saved = loop.save()   # the last scalings that passed a check
    loop.start()
    while True:
        steps = run.steps()
        loop.iterate(steps)
        run.it += steps
        checked = _check(loop, run, gamma_k)
        if checked is None:   # an overflow: back to the last good scalings, unless that keeps failing
            if _recover(loop, run, saved, gamma_k):
                return
            saved = loop.save()
            continue
        errs, worst, why = checked
        saved = loop.save()
        run.history.append((run.it, worst))
        if run.record and run.it % run.record_every == 0:
            run.record_plan(loop)
        if why is not None:
            return
        run.progress(worst)
        conv = errs <= run.tol   # converged problems leave a batch whose rest is slow (wviz.ot.batch)
        if final and not run.record and not run.fixed and worth_leaving(conv, errs, run.relax.rate, run.tol) and \
                isinstance(loop, BatchLoop):
            run.finished = leave(loop, conv, gamma_k, run.finished, run.tol)
            run.relax.keep(~conv)
            errs, saved = errs[~conv], loop.save()
        if run.relax.update(errs, run.it):
            loop.set_omega(run.relax.omega)


def _check(loop: ScalingLoop, run: _Run, gamma_k: float):
    """The marginal errors of the plan diag(u) K diag(v): (errors, worst, why the stage stops or None), or None
    after an overflow.

    Every range_every checks, and before the stage stops, the scalings are measured: beyond exp(+-ABSORB) they
    are absorbed into the potentials before they overflow (Schmitzer 2019), the same plan on new potentials except
    for entries that sat at the clamp, which now take their exact values; hence new errors.
    """
    run.checks += 1
    errs = loop.errors()
    worst = float(errs.max())
    why = run.stop(worst)
    measure = why is not None or run.checks % run.range_every == 0 or not math.isfinite(worst)
    log_range = loop.log_range() if measure else 0.0
    if not math.isfinite(worst) or not math.isfinite(log_range):
        return None
    if log_range > run.max_log_range:
        loop.absorb(gamma_k)
        loop.rebuild(gamma_k)
        loop.refresh()
        errs = loop.errors()
        worst = float(errs.max())
        why = run.stop(worst)
    return errs, worst, why


def _recover(loop: ScalingLoop, run: _Run, saved, gamma_k: float) -> bool:
    """After an overflow in spite of the bounds: rebuild from the last good scalings on a normalised kernel and
    measure the scalings at every check from now on. True when the stopping rule gives up (then the last good
    scalings are the result)."""
    run.failures += 1
    run.range_every = 1
    if run.stop() == "overflow":
        loop.restore(saved)
        return True
    loop.recover(saved, gamma_k)
    return False


def _result(loop: ScalingLoop, run: _Run, shape, gamma_k: float, gamma: float, rho=None, b=None) -> OTResult:
    """The log-domain plan of the final potentials, joined to those of problems that left the batch early. A run
    stopped by max_iter before the last stage returns a plan for a larger gamma, never "converged". Semi-relaxed
    (rho): with the plan's column sums and their KL divergence from b."""
    P, *parts = loop.plan_parts(gamma_k)
    parts.append((parts[0] <= run.tol) & (gamma_k == gamma) & (run.stop() != "overflow"))
    if run.finished is not None:   # the batch was compacted: the rest join those that finished earlier
        P, parts = run.finished.join(P, parts)
    err, f, g, cost, reg, converged = parts
    columns = None if rho is None else _columns(P, b, rho)
    return finish(shape, P, cost, reg, run.it, err, converged, run.history, f, g, gamma_k, run.plans, columns)


def _columns(P, b, rho):
    """(rho, P^T 1, KL(P^T 1 | b)): what a solve with rho reports about the columns."""
    sums = P.sum(-2)
    return rho, sums, semirelaxed.kl(sums, b, b > 0)


def _rho_end(a, b, C, gamma, rho: float, options: dict) -> OTResult:
    """The ends of the rho slider: rho = inf is the balanced problem (its result, with the column sums), rho = 0 the
    prior-softmax in closed form (wviz.ot.semirelaxed.prior_softmax_plan): no iteration, converged."""
    if rho > 0:
        res = sinkhorn(a, b, C, gamma, **options)
        b = torch.as_tensor(b, dtype=res.plan.dtype, device=res.plan.device)
        _, sums, kl = _columns(res.plan, b.expand(res.plan.shape[:-2] + b.shape[-1:]), rho)
        return dataclasses.replace(res, rho=rho, column_sums=sums, column_kl=kl)
    a, b, C, shape, facts = prepare(a, b, C)
    P, f, g = semirelaxed.prior_softmax_plan(a, b, C, gamma)
    rows, columns = P.sum(-1), P.sum(-2)
    reg = semirelaxed.objective(f, g, rows, columns, a, b, a > 0, b > 0, gamma, 0.0)
    err = marginal_error(a, None, rows)
    return finish(shape, P, dot(C, P), reg, 0, err, torch.ones_like(err, dtype=torch.bool), [], f, g, gamma,
                  columns=_columns(P, b, 0.0))


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
    err = marginal_error(a, None, P.sum(-1))
    return finish(shape, P, cost, reg, 0, err, torch.ones_like(err, dtype=torch.bool), [], f,
                  torch.zeros(B, m, dtype=C.dtype, device=C.device), gamma)
