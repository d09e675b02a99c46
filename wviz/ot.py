"""Optimal transport on torch tensors: cost matrices, entropic OT (Sinkhorn), exact OT, squared-L2-regularised OT.

The notation follows eq. (23) of the Fenchel-dual paper (shared/seeds/002, Sec. 9),

    W_gamma(p, u; M) = min_{X in U(p, u)} <M, X> - gamma H(X),   H(X) = -sum_ij X_ij log X_ij,

written here as min_{P in U(a, b)} <C, P> - gamma H(P) with U(a, b) = {P >= 0 : P 1 = a, P^T 1 = b}: a (..., n) and
b (..., m) are the masses, C (..., n, m) the cost, P the plan. Every solver is batched over the leading dimensions
(a, b and C broadcast against each other), runs on CPU and CUDA in float32 or float64, takes no gradients, and
returns an :class:`OTResult`.

Marginal error (all solvers): max(||P 1 - a||_1, ||P^T 1 - b||_1), the L1 error of the worse of the two marginals;
a solver has converged when it is <= tol for every problem of the batch.

References: Cuturi 2013 (Sinkhorn distances); Schmitzer 2019 (stabilised sparse scaling algorithms for entropy
regularised transport problems: absorption of the scalings into log-domain potentials, epsilon scaling);
Thibault, Chizat, Dossal & Papadakis 2021 and Lehmann, von Renesse, Sambale & Uschmajew 2022 (over-relaxed Sinkhorn
and its optimal omega, from Young's SOR theory); Blondel, Seguy & Rolet 2018 (smooth and sparse OT); the 001 note
(shared/seeds/001, eqs. (4)-(5): attention as one-sided entropic OT).
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import torch

from wviz._checks import positive

__all__ = ["OTResult", "COST_KINDS", "cost_matrix", "sinkhorn", "emd", "quadratic_ot"]

COST_KINDS = ("sqeuclidean", "euclidean", "l1", "cosine", "dot")


@dataclass(frozen=True, eq=False)
class OTResult:
    """What a solver returns. Tensors carry the batch shape ``...`` of the problem.

    plan            (..., n, m) transport plan P
    cost            (...)  <C, P>
    reg_cost        (...)  the regularised objective at P: <C, P> - gamma H(P) (sinkhorn), <C, P> + gamma/2 ||P||^2
                           (quadratic_ot), <C, P> (emd)
    n_iter          iterations run (a Sinkhorn iteration = one row and one column update; 0 for closed forms and
                    for emd, whose network simplex does not report a count)
    marginal_error  (...)  max(||P 1 - a||_1, ||P^T 1 - b||_1)
    converged       (...)  bool: marginal_error <= tol (emd: POT's network simplex reported an optimal basis)
    history         (checks, 2) float64 on the CPU: rows (iteration, worst marginal error over the batch), one per
                    convergence check; in epsilon scaling the early rows belong to the larger gammas of the schedule
    f, g            (..., n), (..., m) dual potentials: P_ij = exp((f_i + g_j - C_ij) / gamma) (sinkhorn),
                    P_ij = max(f_i + g_j - C_ij, 0) / gamma (quadratic_ot), POT's duals (emd); -inf where a mass is 0
    gamma           the regularisation the plan was solved for (0 for emd); warm starts read it
    plans           ((iteration, plan), ...) when sinkhorn(record_plans=k) was asked to record them, else ()
    """

    plan: torch.Tensor
    cost: torch.Tensor
    reg_cost: torch.Tensor
    n_iter: int
    marginal_error: torch.Tensor
    converged: torch.Tensor
    history: torch.Tensor
    f: torch.Tensor | None = None
    g: torch.Tensor | None = None
    gamma: float = 0.0
    plans: tuple = ()


# ---- cost matrices --------------------------------------------------------------------------------------------------

def cost_matrix(x, y, kind: str = "sqeuclidean") -> torch.Tensor:
    """Ground cost C_ij = c(x_i, y_j) between points x (..., n, d) and y (..., m, d), batched: (..., n, m).

    kinds: "sqeuclidean" ||x - y||^2 (the cost M(t, t') = d(t, t')^rho with rho = 2 of 002 Sec. 9),
    "euclidean" ||x - y||, "l1" sum_k |x_k - y_k|, "cosine" 1 - <x, y> / (||x|| ||y||), and
    "dot" -<x, y> (the cost C_j = -<q, k_j> that turns one-sided entropic OT into softmax attention, 001 eq. (4)).
    """
    if kind not in COST_KINDS:
        raise ValueError(f"unknown cost kind {kind!r}; choose from {', '.join(COST_KINDS)}")
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
        nx, ny = x.norm(dim=-1), y.norm(dim=-1)
        for name, norms in (("x", nx), ("y", ny)):
            if bool((norms == 0).any()):
                i = int((norms == 0).nonzero()[0, -1])
                raise ValueError(f"the cosine cost needs non-zero vectors, but point {i} of {name} is zero")
        return 1 - (x @ y.mT) / (nx[..., :, None] * ny[..., None, :])


# ---- input checks -------------------------------------------------------------------------------------------------

def _check_iter_args(tol, max_iter):
    if not (isinstance(tol, (int, float)) and math.isfinite(tol) and tol > 0):
        raise ValueError(f"tol must be a positive number, got {tol!r}")
    if not (isinstance(max_iter, int) and max_iter >= 1):
        raise ValueError(f"max_iter must be a positive integer, got {max_iter!r}")


def _name(x: float) -> str:
    return "NaN" if math.isnan(x) else ("inf" if x > 0 else "-inf") if math.isinf(x) else f"{x:g}"


def _check_cost(C: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Row minima and maxima of C; NaN and inf propagate into them, so two passes over C also validate it."""
    lo, hi = C.amin(-1), C.amax(-1)
    if not bool(torch.isfinite(lo).all() & torch.isfinite(hi).all()):
        bad = (~torch.isfinite(C)).nonzero()[0].tolist()
        where = ", ".join(map(str, bad))
        raise ValueError(f"the cost matrix C contains {_name(C[tuple(bad)].item())} at [{where}]; costs must be "
                         "finite")
    return lo, hi


def _check_mass(w: torch.Tensor, name: str) -> torch.Tensor:
    """Total mass of w (...,); raises ValueError on NaN, inf, negative entries or a zero total."""
    total = w.sum(-1)
    if bool((w >= 0).all() & torch.isfinite(total).all() & (total > 0).all()):   # NaN >= 0 is False
        return total
    if not bool(torch.isfinite(w).all()):
        i = (~torch.isfinite(w)).nonzero()[0].tolist()
        raise ValueError(f"the masses {name} contain {_name(w[tuple(i)].item())} at {i}; masses must be finite")
    if bool((w < 0).any()):
        i = (w < 0).nonzero()[0].tolist()
        raise ValueError(f"masses must be non-negative, but {name}{i} = {w[tuple(i)].item():.4g}")
    if not bool(torch.isfinite(total).all()):
        raise ValueError(f"the masses {name} are too large: their total overflows")
    raise ValueError(f"the total mass of {name} is zero; give at least one point a positive mass")


def _tensors(a, b, C):
    """a, b, C as tensors of one floating dtype on C's device (ints become float64)."""
    C = torch.as_tensor(C)
    a = torch.as_tensor(a, device=C.device)
    b = None if b is None else torch.as_tensor(b, device=C.device)
    dtype = torch.promote_types(a.dtype, C.dtype)
    if b is not None:
        dtype = torch.promote_types(dtype, b.dtype)
    if not dtype.is_floating_point:
        dtype = torch.float64
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"use float32 or float64 tensors, not {dtype}")
    a, C = a.to(dtype), C.to(dtype)
    b = None if b is None else b.to(dtype)
    if C.ndim < 2:
        raise ValueError(f"the cost C must be a matrix (n, m), got shape {tuple(C.shape)}")
    n, m = C.shape[-2:]
    if n == 0 or m == 0:
        raise ValueError(f"the cost matrix C is empty (shape {tuple(C.shape)})")
    if a.ndim < 1 or a.shape[-1] != n:
        raise ValueError(f"a must have one mass per row of C ({n}), got shape {tuple(a.shape)}")
    if b is not None and (b.ndim < 1 or b.shape[-1] != m):
        raise ValueError(f"b must have one mass per column of C ({m}), got shape {tuple(b.shape)}")
    return a, b, C


def _prepare(a, b, C):
    """Validated problem flattened to a batch: a (B, n), b (B, m), C (B, n, m), the batch shape, and facts about
    it (row minima and maxima of C, extreme values, zero masses), gathered with a single host synchronisation.

    b is rescaled to a's total when the two totals agree within rounding (so that Sinkhorn can meet tol);
    totals that really differ are refused.
    """
    if b is None:   # only sinkhorn has a one-sided form (b=None), and it does not come here
        raise ValueError("this solver needs both marginals a and b; b=None (the one-sided problem) is for sinkhorn")
    a, b, C = _tensors(a, b, C)
    n, m = C.shape[-2:]
    if a.ndim == 1 and b.ndim == 1 and C.ndim == 2:
        shape = ()
    else:
        try:
            shape = torch.broadcast_shapes(a.shape[:-1], b.shape[:-1], C.shape[:-2])
        except RuntimeError:
            raise ValueError(f"the batch shapes of a {tuple(a.shape[:-1])}, b {tuple(b.shape[:-1])} and C "
                             f"{tuple(C.shape[:-2])} do not match") from None
    B = math.prod(shape)
    C = C.expand(*shape, n, m).reshape(B, n, m)  # a view (no copy) unless C is broadcast against a batch
    a = a.expand(*shape, n).reshape(B, n)
    b = b.expand(*shape, m).reshape(B, m)
    sa, sb = a.sum(-1), b.sum(-1)
    lo, hi = C.amin(-1), C.amax(-1)           # NaN and inf propagate: two passes over C validate it
    stats = torch.stack([a.amin(), b.amin(), sa.amin(), sb.amin(), sa.amax(), sb.amax(),
                         ((sa - sb).abs() / torch.maximum(sa, sb)).amax(), lo.amin(), lo.amax(), hi.amax()])
    a_min, b_min, sa_min, sb_min, sa_max, sb_max, rel, lo_min, lo_max, hi_max = stats.tolist()
    if not (a_min >= 0 and sa_min > 0 and math.isfinite(sa_max)):
        _check_mass(a, "a")
    if not (b_min >= 0 and sb_min > 0 and math.isfinite(sb_max)):
        _check_mass(b, "b")
    if not (math.isfinite(lo_min) and math.isfinite(hi_max)):
        _check_cost(C)
    if not rel <= max(1e-6, 64 * torch.finfo(a.dtype).eps):
        i = int(((sa - sb).abs() / torch.maximum(sa, sb)).argmax())
        raise ValueError(f"a and b must have the same total mass, but sum(a) = {sa[i].item():.6g} and "
                         f"sum(b) = {sb[i].item():.6g}; normalise both to 1")
    b = b * (sa / sb)[:, None]
    info = dict(lo=lo, hi=hi, lo_min=lo_min, lo_max=lo_max, hi_max=hi_max, zero_a=a_min == 0, zero_b=b_min == 0)
    return a, b, C, shape, info


def _finish(shape, plan, cost, reg_cost, n_iter, err, converged, history, f=None, g=None, gamma=0.0, plans=()):
    """OTResult with the batch shape restored."""
    n, m = plan.shape[-2:]
    hist = torch.from_numpy(np.asarray(history, dtype=np.float64).reshape(-1, 2))
    return OTResult(plan=plan.reshape(*shape, n, m), cost=cost.reshape(shape), reg_cost=reg_cost.reshape(shape),
                    n_iter=int(n_iter), marginal_error=err.reshape(shape), converged=converged.reshape(shape),
                    history=hist, f=None if f is None else f.reshape(*shape, n),
                    g=None if g is None else g.reshape(*shape, m), gamma=float(gamma),
                    plans=tuple((it, P.reshape(*shape, n, m)) for it, P in plans))


def _marginal_error(P, a, b):
    return torch.maximum((P.sum(-1) - a).abs().sum(-1), (P.sum(-2) - b).abs().sum(-1))


def _mv(K, v):
    """K v for a batch K (B, n, m), v (B, m, 1). For B > 1 as the row product (v^T K^T)^T: torch's batched
    matrix-vector bmm(K, v) ran 4-5x slower than the row form at B = 16, n = 256 on this CPU (same result); for
    B = 1 the plain product saves the views' overhead (about 5 us of 20 at n = 256)."""
    return torch.bmm(K, v) if K.shape[0] == 1 else torch.bmm(v.mT, K.mT).mT


def _dot(C, P):
    """<C, P> per problem of the batch (a batched dot product: no n x m temporary)."""
    B = C.shape[0]
    return torch.bmm(C.reshape(B, 1, -1), P.reshape(B, -1, 1)).reshape(B)


# ---- entropic OT ----------------------------------------------------------------------------------------------------

# Kernel exponents (f_i + g_j - C_ij) / gamma are clamped to [-_CLAMP, _CLAMP / 2]: below about -708 (float64) or
# -87 (float32) exp returns subnormal numbers or 0 through a slow path, and matrix-vector products with subnormal
# entries run 4-15x slower on this CPU. Clamped entries carry at most exp(-_CLAMP + 2 _ABSORB) of mass while the
# scalings stay within exp(+-_ABSORB); a row or column that leans on clamped entries needs a scaling beyond that
# bound, which triggers an absorption that recomputes the kernel exactly.
_CLAMP = {torch.float64: 600.0, torch.float32: 60.0}
_ABSORB = {torch.float64: 50.0, torch.float32: 12.0}
_EPS_FACTOR = 0.1     # epsilon scaling: each stage solves for gamma_k = gamma_{k-1} * _EPS_FACTOR
_EPS_START = 0.01     # ... for the gammas below this fraction of the cost range (above it one stage is cheaper)
_STAGE_TOL = 1e-3     # marginal error at which an intermediate stage hands over to the next (smaller) gamma
_OMEGA_MAX = 1.99
_OMEGA_START = 1.3   # first omega before any rate is known: never slower than omega = 1 when r >= 0.3
_RELAX_LO, _RELAX_HI = math.exp(-1.0), math.exp(1.0)
_WINDOW = 4       # iterations over which _Omega measures a convergence rate


def _omega_opt(r):
    """Young's optimal over-relaxation for a 2-cyclic iteration whose plain (omega = 1) rate is r per iteration."""
    return 2.0 / (1.0 + np.sqrt(np.clip(1.0 - r, 0.0, 1.0)))


class _Omega:
    """Adaptive over-relaxation, one omega per problem of the batch (Hageman & Young's adaptive SOR).

    Sinkhorn alternates row and column updates, a 2-cyclic iteration, so near the solution Young's theory applies:
    if plain Sinkhorn shrinks the error by r per iteration, over-relaxation by omega shrinks it by lambda with
    (lambda + omega - 1)^2 = lambda omega^2 r, smallest (omega - 1) at omega* = 2 / (1 + sqrt(1 - r)). A steady
    rate lambda > omega - 1 observed at omega therefore reveals r and omega*. Across epsilon-scaling stages
    1 - r is proportional to gamma, so kappa = (1 - r) / gamma predicts omega* for the next, smaller gamma.
    """

    def __init__(self, B: int, fixed: float | None):
        self.fixed = fixed
        self.kappa = np.full(B, np.nan)
        self.w = np.ones(B)

    def start_stage(self, gamma: float):
        if self.fixed is not None:
            self.w[:] = self.fixed
        else:
            known = np.isfinite(self.kappa)
            self.w = np.where(known, np.minimum(_omega_opt(1.0 - self.kappa * gamma), _OMEGA_MAX), _OMEGA_START)
        self.gamma, self.trace, self.lam = gamma, [], None
        return self.w

    def update(self, err: np.ndarray, it: int) -> bool:
        """Record the errors at iteration it; returns True when omega changed.

        Rates are measured over windows of _WINDOW iterations: over-relaxed errors oscillate from one iteration
        to the next (complex eigenvalues once omega >= omega*), their envelope does not.
        """
        self.trace.append((it, err))
        horizon = 5 * _WINDOW     # of the safeguard below
        while self.trace[0][0] < it - horizon - 2 * _WINDOW:
            del self.trace[0]
        past = [t for t in self.trace if t[0] <= it - _WINDOW]
        if not past:
            return False
        i0, e0 = past[-1]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            lam = (err / e0) ** (1.0 / (it - i0))
        w, changed = self.w, False
        if self.fixed is None and self.lam is not None:
            steady = (lam < 1) & (lam > w - 1 + 0.02) & (np.abs(lam - self.lam) <= 0.1 * (1 - lam)) & (err > 0)
            with np.errstate(divide="ignore", invalid="ignore"):
                r = (lam + w - 1) ** 2 / (lam * w ** 2)
            w_new = np.minimum(_omega_opt(r), _OMEGA_MAX)
            better = steady & (w_new > w + 0.01)
            if better.any():
                self.w = np.where(better, w_new, w)
                self.kappa = np.where(better, (1 - r) / self.gamma, self.kappa)
                changed = True
        # safeguard: when the envelope of the error (its maximum over a window) has not fallen over five windows,
        # omega - 1 is halved. Near omega = 2 this also fires while the error merely oscillates, and omega then
        # alternates between omega* and 1 + (omega* - 1) / 2: on the hard problems (tiny gamma, few points) that
        # converged in fewer iterations than a patient safeguard did.
        older = [e for i, e in self.trace if it - horizon - _WINDOW < i <= it - horizon]
        if self.fixed is None and older and not changed:
            recent = np.max([e for i, e in self.trace if i > it - _WINDOW], axis=0)
            bad = (recent >= np.max(older, axis=0)) & (self.w > 1)
            if bad.any():
                self.w = np.where(bad, 1 + (self.w - 1) / 2, self.w)
                self.kappa = np.where(bad, np.nan, self.kappa)
                changed = True
        # a new omega is a new iteration: its rate is measured afresh
        self.lam = None if changed else lam
        if changed:
            self.trace = [(it, err)]
        return changed

    def keep(self, idx: np.ndarray):
        """Only the problems idx of the batch go on (the others have converged)."""
        self.kappa, self.w = self.kappa[idx], self.w[idx]
        self.trace = [(i, e[idx]) for i, e in self.trace]
        if self.lam is not None:
            self.lam = self.lam[idx]


def _relaxed(u, a, Ku, wm1, masked, pos):
    """The over-relaxed scaling update u <- u (a / (u K v))^omega, with the over-relaxation part of the factor
    t = a / (u K v) clamped to [e^-1, e]: u <- u t clamp(t)^(omega - 1).

    Near the solution t is close to 1 and this is exactly over-relaxed Sinkhorn; far from it (a cold start, a new
    gamma) a row whose mass is off by a factor t would otherwise be pushed to a mass off by t^(omega - 1) the
    other way, which is how over-relaxation diverges.
    """
    t = a / Ku                                    # the plain Sinkhorn update
    u = t * (t / u).clamp_(_RELAX_LO, _RELAX_HI).pow_(wm1)
    return torch.where(pos, u, 0) if masked else u


def _kernel(C, f, g, gamma, out, clamp, normalize=False):
    """K_ij = exp((f_i + g_j - C_ij) / gamma), exponent clamped to [-clamp, clamp / 2], written into out.

    f=None stands for f = 0 and clamp=None skips the clamp (the caller knows the exponents are in range), each
    saving a pass over the n x m buffer. normalize=True shifts the exponent so that every row and column has
    maximum 0 (no row or column of the kernel is lost to the clamp after a change of gamma, a warm start or a
    large absorption) and returns the shifts (r, c) with f_i + g_j = (f_i - gamma r_i) + (g_j - gamma c_j) + ...:
    the caller keeps the plan exact by starting from the scalings u = exp(r), v = exp(c).
    """
    torch.add(g[:, None, :] / gamma, C, alpha=-1.0 / gamma, out=out)
    if f is not None:
        out.add_(f[:, :, None] / gamma)
    shifts = None
    if normalize:
        r = out.amax(-1, keepdim=True)
        r = torch.where(torch.isfinite(r), r, 0)            # rows of zero mass stay at -inf
        out.sub_(r)
        c = out.amax(-2, keepdim=True)
        c = torch.where(torch.isfinite(c), c, 0)
        out.sub_(c)
        shifts = r, c.mT
    if clamp is not None:
        out.clamp_(-clamp, clamp / 2)
    out.exp_()
    return shifts


def _one_sided(a, C, gamma):
    a, _, C = _tensors(a, None, C)
    try:
        shape = torch.broadcast_shapes(a.shape[:-1], C.shape[:-2])
    except RuntimeError:
        raise ValueError(f"the batch shapes of a {tuple(a.shape[:-1])} and C {tuple(C.shape[:-2])} do not match") \
            from None
    n, m = C.shape[-2:]
    _check_mass(a, "a")
    B = math.prod(shape)
    C = C.expand(*shape, n, m).reshape(B, n, m)
    _check_cost(C)
    a = a.expand(*shape, n).reshape(B, n)
    logp = torch.log_softmax(-C / gamma, dim=-1)            # row i: softmax(-C_i / gamma), 001 eq. (5)
    P = a[:, :, None] * logp.exp()
    # potentials: log P_ij = (f_i - C_ij) / gamma, so f_i = gamma (log a_i + log p_ij) + C_ij (any j; take j = 0)
    f = torch.where(a > 0, gamma * (a.log() + logp[:, :, 0]) + C[:, :, 0], -torch.inf)
    cost = _dot(C, P)
    reg = (torch.where(a > 0, f, 0) * P.sum(-1)).sum(-1)   # sum P (C + gamma log P) = sum_i f_i a_i
    err = (P.sum(-1) - a).abs().sum(-1)
    return _finish(shape, P, cost, reg, 0, err, torch.ones_like(err, dtype=torch.bool), [], f,
                   torch.zeros(B, m, dtype=C.dtype, device=C.device), gamma)


def _init_potentials(init, a, b, B, n, m):
    """(f, g, gamma) of a warm start: an OTResult or a pair (f, g); None when unusable (then a cold start)."""
    if isinstance(init, OTResult):
        f, g, gamma0 = init.f, init.g, (init.gamma or None)
    else:
        try:
            f, g = init
        except (TypeError, ValueError):
            raise ValueError("init must be a previous OTResult or a pair of potentials (f, g)") from None
        gamma0 = None
    if f is None or g is None:
        return None
    f = torch.as_tensor(f, dtype=a.dtype, device=a.device)
    g = torch.as_tensor(g, dtype=a.dtype, device=a.device)
    if f.shape[-1] != n or g.shape[-1] != m:
        raise ValueError(f"init potentials have {f.shape[-1]} and {g.shape[-1]} entries but the problem is "
                         f"{n} x {m}")
    try:
        f = f.expand(*f.shape[:-1], n).reshape(-1, n).expand(B, n).clone()
        g = g.expand(*g.shape[:-1], m).reshape(-1, m).expand(B, m).clone()
    except RuntimeError:
        raise ValueError("init potentials do not match the batch shape of the problem") from None
    # a point that had zero mass before (potential -inf) but has mass now: no usable warm start
    if not bool(torch.isfinite(f[a > 0]).all() & torch.isfinite(g[b > 0]).all()):
        return None
    return f, g, gamma0


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
    problem does not hold the whole batch's matrix-vector products.

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
    _check_iter_args(tol, max_iter)
    if omega is not None and not (1.0 <= float(omega) < 2.0):
        raise ValueError(f"omega must be in [1, 2), got {omega}")
    if b is None:
        return _one_sided(a, C, gamma)
    a, b, C, shape, info = _prepare(a, b, C)
    B, n, m = C.shape
    dtype, device = C.dtype, C.device
    clamp, absorb = _CLAMP[dtype], _ABSORB[dtype]
    record = int(record_plans or 0)
    if check_every is None:   # a check costs a few vector operations (and on CUDA a host synchronisation)
        check_every = 10 if device.type == "cuda" else min(4, max(1, (1 << 18) // (B * n * m)))
    if record:
        check_every = record
    if not (isinstance(check_every, int) and check_every >= 1):
        raise ValueError(f"check_every must be a positive integer, got {check_every!r}")

    pos_a, pos_b = a > 0, b > 0
    zero_a, zero_b = info["zero_a"], info["zero_b"]
    warm = None if init is None else _init_potentials(init, a, b, B, n, m)
    lo, c_lo, c_hi = info["lo"], info["lo_min"], info["hi_max"]
    first_f = True      # the first kernel may skip a pass (see below)
    if warm is not None:
        f, g, gamma0 = warm
    else:
        gamma0 = None
        if info["lo_max"] - c_lo <= gamma * absorb / 2:
            # row minima within a few gamma of each other: one scalar shift keeps every row of the first kernel
            # within exp(-absorb / 2) of 1, and f = 0 saves a pass
            f, g, first_f = torch.zeros_like(a), torch.full_like(b, c_lo), None
        else:    # shift every row by its minimum: each row of the first kernel has an entry exp(0) = 1
            f, g = lo.clone(), torch.zeros_like(b)
    f = f.masked_fill_(~pos_a, -torch.inf)
    g = g.masked_fill_(~pos_b, -torch.inf)

    # epsilon scaling: gamma_k = gamma / _EPS_FACTOR^k, from _EPS_START times the cost range (or from a warm
    # start's gamma) down to gamma; above that one stage converges in fewer iterations than a schedule
    schedule = [gamma]
    if eps_scaling and not record:
        top = gamma0 if gamma0 is not None else _EPS_START * (c_hi - c_lo)
        while schedule[-1] / _EPS_FACTOR < top * (1 - 1e-9):
            schedule.append(schedule[-1] / _EPS_FACTOR)
        schedule.reverse()

    K = torch.empty_like(C)   # the only n x m buffer: the kernel, finally the plan
    KT = K.mT
    ma, mb = pos_a.to(dtype)[:, :, None], pos_b.to(dtype)[:, :, None]
    a3, b3, pa3, pb3 = a[:, :, None], b[:, :, None], pos_a[:, :, None], pos_b[:, :, None]
    na3, nb3 = -a3, -b3
    relax = _Omega(B, None if omega is None else float(omega))
    history, plans = [], []
    record_every = record
    plan_bytes = B * n * m * C.element_size()
    max_plans = max(2, min(256, (256 << 20) // max(plan_bytes, 1)))
    it, failures = 0, 0
    out, orig = None, torch.arange(B, device=device)   # results of problems that left the batch; who is left
    # float32 overflows within a few iterations; recorded iterates must never lean on the clamp for long
    range_every = 1 if dtype == torch.float32 or record else 4
    tiny = 1000 * torch.finfo(dtype).eps

    def rebuild(u, v, gam, normalize=True):
        """Absorb the scalings into the potentials (f += gamma log u) and rebuild the kernel for gam; returns the
        scalings that represent the same plan on the new kernel (ones, unless normalize moved the maxima)."""
        nonlocal f, g
        f = f + gam * u.log()[:, :, 0]   # u = 0 (zero mass) gives -inf: that row stays empty
        g = g + gam * v.log()[:, :, 0]
        shifts = _kernel(C, f, g, gam, K, clamp, normalize)
        if shifts is None:
            return ma.clone(), mb.clone()
        r, c = shifts
        f = f - gam * r[:, :, 0]
        g = g - gam * c[:, :, 0]
        return r.exp() * ma, c.exp() * mb

    def errors(u, v, Kv, KTu) -> np.ndarray:
        """Marginal error of every problem: the plan diag(u) K diag(v) has marginals u * Kv and v * KTu."""
        err = torch.maximum(torch.addcmul(na3, u, Kv).abs_().sum((1, 2)),
                            torch.addcmul(nb3, v, KTu).abs_().sum((1, 2)))
        return np.array(err.tolist())

    def range_of(u, v) -> float:
        """max |log u|, |log v| over the points with mass (inf or NaN after an overflow)."""
        ext = torch.cat([torch.where(pa3, u, 1).reshape(-1), torch.where(pb3, v, 1).reshape(-1)])
        return ext.log_().abs_().amax().item()

    for stage, gam in enumerate(schedule):
        final = stage == len(schedule) - 1
        stage_tol = tol if final else max(tol, _STAGE_TOL)
        if stage == 0 and warm is None and (c_hi - c_lo) / gam < clamp:
            # a cold start: the exponents lie in [-(max C - min C) / gamma, 0], none reaches the clamp
            _kernel(C, f if first_f else None, g, gam, K, None)
            u, v = ma.clone(), mb.clone()
        else:
            # a new gamma, a warm start, or a cold start at a gamma so small that whole columns of the kernel would
            # sit at the clamp (and take its value, not theirs): normalised, no row or column is lost
            u, v = rebuild(ma, mb, gam)
        saved = (u, v)
        w_np = relax.start_stage(gam)
        plain = bool((w_np == 1).all())
        w = torch.as_tensor(w_np, dtype=dtype, device=device).view(B, 1, 1)
        wm1 = w - 1
        if record and final:
            plans.append((it, u * K * v.mT))
        best, best_it, n_checks = math.inf, it, 0
        Kv = _mv(K, v)
        while True:
            # one iteration: u <- u^(1 - omega) (a / K v)^omega, then the same for v (plain Sinkhorn at omega = 1)
            if plain:   # a zero mass with an empty kernel row would give 0 / 0: that row stays at 0
                u = torch.where(pa3, a3 / Kv, 0) if zero_a else a3 / Kv
            else:
                u = _relaxed(u, a3, Kv, wm1, zero_a, pa3)
            KTu = _mv(KT, u)
            if plain:
                v = torch.where(pb3, b3 / KTu, 0) if zero_b else b3 / KTu
            else:
                v = _relaxed(v, b3, KTu, wm1, zero_b, pb3)
            Kv = _mv(K, v)
            it += 1
            if it % check_every and it < max_iter:
                continue
            # check the plan P = diag(u) K diag(v): its marginals are u * Kv and v * KTu (KTu is still current)
            n_checks += 1
            errs = errors(u, v, Kv, KTu)
            worst = float(errs.max())
            done = worst <= stage_tol or it >= max_iter
            spread = range_of(u, v) if (done or n_checks % range_every == 0 or not math.isfinite(worst)) else 0.0
            if not math.isfinite(worst) or not math.isfinite(spread):
                # overflow in spite of the bounds: back to the last good scalings, on a normalised kernel
                failures += 1
                range_every = 1
                if failures > 5:
                    u, v = saved
                    break
                u, v = rebuild(*saved, gam)
                saved = (u, v)
                Kv = _mv(K, v)
                continue
            if spread > absorb:
                # absorb the scalings into the potentials before they overflow: the same plan on new potentials,
                # except for entries that sat at the clamp, which now take their exact values; hence new errors
                u, v = rebuild(u, v, gam)
                Kv, KTu = _mv(K, v), _mv(KT, u)
                errs = errors(u, v, Kv, KTu)
                worst = float(errs.max())
                done = worst <= stage_tol or it >= max_iter
            saved = (u, v)
            history.append((it, worst))
            if record and final and it % record_every == 0:
                plans.append((it, u * K * v.mT))
                if len(plans) > max_plans:   # keep the first, thin the rest
                    plans[1:] = plans[2::2]
                    record_every *= 2
            if done:
                break
            if worst < best * 0.9:
                best, best_it = worst, it
            elif final and worst < tiny and it - best_it >= 50:
                break   # stuck at the rounding floor (float32): stop honestly, converged=False
            conv = errs <= tol
            if (final and not record and 2 * conv.sum() >= len(conv)
                    and _iterations_left(errs, relax.lam, ~conv, tol) > 10):
                # half of the batch has converged and the rest, at their measured rates, need more than ten more
                # iterations (leaving costs about two iterations' work: copying the rest's C and kernel): the
                # converged problems leave the batch, their plans written out now, and the rest go on in buffers of
                # their own. A batch that converges together never moves; one slow problem no longer drags the
                # others along.
                d, k = (torch.as_tensor(np.flatnonzero(x), device=device) for x in (conv, ~conv))
                if out is None:
                    out = _Finished(K, f, g)
                sub = [t.index_select(0, d) for t in (K, u, v, Kv, KTu, f, g, C, a3, b3, pos_a, pos_b)]
                P_d, *parts = _plan_parts(*sub, gam)
                out.store(orig[d], P_d, parts + [torch.ones(len(d), dtype=torch.bool, device=device)])
                K, u, v, Kv, KTu, f, g, C, a3, b3, na3, nb3, pa3, pb3, ma, mb, pos_a, pos_b, w, orig = (
                    t.index_select(0, k) for t in (K, u, v, Kv, KTu, f, g, C, a3, b3, na3, nb3, pa3, pb3, ma, mb,
                                                   pos_a, pos_b, w, orig))
                KT, wm1, saved = K.mT, w - 1, (u, v)
                relax.keep(~conv)
                errs = errs[~conv]
            if relax.update(errs, it):
                w = torch.as_tensor(relax.w, dtype=dtype, device=device).view(-1, 1, 1)
                wm1 = w - 1
                plain = False
        if failures > 5 or it >= max_iter:
            break
        if not final:
            f = f + gam * u.log()[:, :, 0]
            g = g + gam * v.log()[:, :, 0]

    if failures > 5:   # could not recover from repeated overflow: the last good plan, reported as it is
        Kv, KTu = _mv(K, v), _mv(KT, u)
    P, *parts = _plan_parts(K, u, v, Kv, KTu, f, g, C, a3, b3, pos_a, pos_b, gam)
    # a run stopped by max_iter before the last stage returns a plan for a larger gamma, never "converged"
    parts.append((parts[0] <= tol) & (gam == gamma) & (failures <= 5))
    if out is not None:   # the batch was compacted: the remaining problems join those that finished earlier
        out.store(orig, P, parts)
        P, parts = out.P, out.parts
    err, f, g, cost, reg, converged = parts
    return _finish(shape, P, cost, reg, it, err, converged, history, f, g, gam, plans)


def _iterations_left(err: np.ndarray, lam: np.ndarray | None, rest: np.ndarray, tol: float) -> float:
    """Iterations the slowest problem of ``rest`` still needs to reach tol at its last measured rate lam per
    iteration: 0 while no rate is measured, inf for a problem that is not converging."""
    if lam is None:
        return 0.0
    lam, err = lam[rest], err[rest]
    with np.errstate(divide="ignore", invalid="ignore"):
        left = np.where(lam < 1, np.log(tol / err) / np.log(lam), np.inf)
    return float(np.nan_to_num(left, nan=0.0).max())


def _plan_parts(K, u, v, Kv, KTu, f, g, C, a3, b3, pos_a, pos_b, gam):
    """The plan of the scalings, P = diag(u) K diag(v) written over K, and (marginal error, f, g, <C, P>,
    <C, P> - gamma H(P)) with the scalings absorbed into the potentials f, g."""
    row, col = u * Kv, v * KTu
    err = torch.maximum((row - a3).abs().sum((1, 2)), (col - b3).abs().sum((1, 2)))
    P = K.mul_(u).mul_(v.mT)
    f = f + gam * u.log()[:, :, 0]
    g = g + gam * v.log()[:, :, 0]
    cost = _dot(C, P)
    # <C, P> - gamma H(P) = sum_ij P_ij (C_ij + gamma log P_ij) = sum_ij P_ij (f_i + g_j) = <f, P 1> + <g, P^T 1>
    reg = (torch.where(pos_a, f, 0) * row[:, :, 0]).sum(-1) + (torch.where(pos_b, g, 0) * col[:, :, 0]).sum(-1)
    return P, err, f, g, cost, reg


class _Finished:
    """The results of a batch whose converged problems leave it early: the plans go into the batch's first
    kernel buffer (B, n, m), the rest into per-problem tensors, at the problems' original indices."""

    def __init__(self, K, f, g):
        B = K.shape[0]
        self.P = K
        self.parts = [f.new_empty(B), f.new_empty(f.shape), g.new_empty(g.shape), f.new_empty(B), f.new_empty(B),
                      torch.empty(B, dtype=torch.bool, device=K.device)]

    def store(self, idx: torch.Tensor, P, parts):
        if P is not self.P:   # a compacted buffer
            self.P.index_copy_(0, idx, P)
        for mine, part in zip(self.parts, parts):
            mine.index_copy_(0, idx, part)


# ---- exact OT -------------------------------------------------------------------------------------------------------

@torch.no_grad()
def emd(a, b, C, *, max_iter: int | None = None) -> OTResult:
    """Exact optimal transport min_{P in U(a, b)} <C, P> (eq. (23) of 002 with gamma -> 0), by POT's network simplex
    (ot.emd, Bonneel et al. 2011) in float64 on the CPU, one problem of the batch at a time.

    max_iter: the simplex's numItermax, by default generous (max(10^6, 100 n m)). POT returns a feasible but
    possibly suboptimal plan, with only a warning, when it runs out of iterations: this is reported as
    converged=False. f, g are POT's dual potentials (f_i + g_j <= C_ij, with equality on the support of P).
    """
    import ot as pot

    a, b, C, shape, _ = _prepare(a, b, C)
    B, n, m = C.shape
    numitermax = int(max_iter) if max_iter is not None else max(10 ** 6, 100 * n * m)
    a64, b64, C64 = (t.detach().to("cpu", torch.float64).numpy() for t in (a, b, C))
    plans, fs, gs, ok = [], [], [], []
    for k in range(B):
        ak, bk = a64[k], b64[k] * (a64[k].sum() / b64[k].sum())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # a non-optimal return is reported through converged instead
            P, log = pot.emd(ak, bk, C64[k], numItermax=numitermax, log=True)
        plans.append(P)
        fs.append(np.where(ak > 0, log["u"], -np.inf))
        gs.append(np.where(bk > 0, log["v"], -np.inf))
        ok.append(log["result_code"] == 1)
    as_t = lambda x, dt=C.dtype: torch.as_tensor(np.stack(x), dtype=dt, device=C.device)  # noqa: E731
    P = as_t(plans)
    cost = _dot(C, P)
    err = _marginal_error(P, a, b)
    return _finish(shape, P, cost, cost.clone(), 0, err, as_t(ok, torch.bool), [], as_t(fs), as_t(gs), 0.0)


# ---- squared-L2-regularised OT --------------------------------------------------------------------------------------

def _threshold(G, t, target, dim, steps: int = 60):
    """Per row (dim=-1) or column (dim=-2) of G, the t with sum [t + G]_+ = target: a 1-D piecewise-linear root.

    phi(t) = sum_k [t + G_k]_+ is convex and increasing, so Newton's method started anywhere with phi'(t) > 0 lands
    at or right of the root and then decreases to it monotonically, exactly once the support is found (the
    simplex-projection threshold, without sorting). t is the warm start (the previous potentials).
    """
    lo = -G.amax(dim)                        # phi(lo) = 0: the largest t with an empty support
    t = torch.where(torch.isfinite(t), torch.maximum(t, lo), lo + target)
    t = torch.where(t <= lo, lo + target, t)  # phi'(t) > 0 from here on
    D = torch.empty_like(G)
    for _ in range(steps):
        torch.add(G, t.unsqueeze(dim), out=D).clamp_min_(0)
        phi = D.sum(dim)
        cnt = torch.count_nonzero(D, dim).to(G.dtype)
        step = (phi - target) / cnt.clamp_min(1)
        t = t - step
        if not bool((step.abs() > 4 * torch.finfo(G.dtype).eps * (t.abs() + target)).any()):
            break
    return t


@torch.no_grad()
def quadratic_ot(a, b, C, gamma, tol: float = 1e-6, max_iter: int = 5000, *, init=None,
                 omega: float | None = None, check_every: int | None = None) -> OTResult:
    """Squared-L2-regularised optimal transport (Blondel, Seguy & Rolet 2018): eq. (23) of 002 with the entropy
    replaced by a quadratic, min_{P in U(a, b)} <C, P> + (gamma / 2) ||P||^2, whose plans are sparse.

    Its dual max_{f, g} <f, a> + <g, b> - (1 / (2 gamma)) sum_ij [f_i + g_j - C_ij]_+^2 is concave and smooth, with
    P_ij = [f_i + g_j - C_ij]_+ / gamma. It is solved by alternating exact block maximisation: for fixed g, each f_i
    solves sum_j [f_i + g_j - C_ij]_+ = gamma a_i (a 1-D piecewise-linear root: a simplex projection), then the same
    for g; the block updates are over-relaxed (omega in [1, 2), adapted as in :func:`sinkhorn`: the alternation is
    2-cyclic). Stops when max(||P1 - a||_1, ||P^T 1 - b||_1) <= tol; converged=False otherwise.

    gamma is in units of C times mass^-1: plans spread out when gamma is comparable to max|C| n m.
    init: a previous OTResult of quadratic_ot (or a pair (f, g)) to warm-start from.
    """
    gamma = positive(gamma, "gamma")
    _check_iter_args(tol, max_iter)
    if omega is not None and not (1.0 <= float(omega) < 2.0):
        raise ValueError(f"omega must be in [1, 2), got {omega}")
    a, b, C, shape, _ = _prepare(a, b, C)
    B, n, m = C.shape
    dtype, device = C.dtype, C.device
    if check_every is None:
        check_every = 10 if device.type == "cuda" else 1
    pos_a, pos_b = a > 0, b > 0
    warm = None if init is None else _init_potentials(init, a, b, B, n, m)
    if warm is not None:
        f, g = warm[0], warm[1]
    else:
        f, g = torch.full_like(a, torch.nan), torch.zeros_like(b)
    g = g.masked_fill(~pos_b, -torch.inf)
    relax = _Omega(B, None if omega is None else float(omega))
    relax.start_stage(gamma)
    if omega is None:
        relax.w = np.ones(B)    # exact block maximisation (monotone ascent) until a convergence rate is measured
    w = torch.as_tensor(relax.w, dtype=dtype, device=device).view(B, 1)
    G = torch.empty_like(C)
    history, it = [], 0
    err = torch.full((B,), torch.inf, dtype=dtype, device=device)
    while it < max_iter:
        # f-block: rows of G = g_j - C_ij (masked columns have g = -inf and take no mass)
        torch.sub(g[:, None, :], C, out=G)
        f_new = _threshold(G, f, gamma * a, dim=-1)
        f = f_new if it == 0 else f + w * (f_new - f)
        f = torch.where(pos_a, f, -torch.inf)
        # g-block: columns of G = f_i - C_ij
        torch.sub(f[:, :, None], C, out=G)
        g_new = _threshold(G, g, gamma * b, dim=-2)
        g = g_new if it == 0 else g + w * (g_new - g)
        g = torch.where(pos_b, g, -torch.inf)
        it += 1
        if it % check_every == 0 or it >= max_iter:
            torch.add(G, g[:, None, :], out=G).clamp_min_(0)     # gamma P
            err = torch.maximum((G.sum(-1) / gamma - a).abs().sum(-1), (G.sum(-2) / gamma - b).abs().sum(-1))
            errs = err.cpu().numpy()
            worst = float(errs.max())
            history.append((it, worst))
            if worst <= tol or not math.isfinite(worst):
                break
            if relax.update(errs, it):
                w = torch.as_tensor(relax.w, dtype=dtype, device=device).view(B, 1)
    P = torch.sub(f[:, :, None], C).add_(g[:, None, :]).clamp_min_(0).div_(gamma)
    err = _marginal_error(P, a, b)
    cost = _dot(C, P)
    reg = cost + gamma / 2 * (P * P).sum((-2, -1))
    return _finish(shape, P, cost, reg, it, err, err <= tol, history, f, g, gamma)
