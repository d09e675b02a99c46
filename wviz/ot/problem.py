"""The problem every solver of wviz.ot shares: eq. (23) of 002, min_{P in U(a, b)} <C, P> + regulariser, with
U(a, b) = {P >= 0 : P 1 = a, P^T 1 = b}. Here its inputs are checked, broadcast and flattened to a batch
a (B, n), b (B, m), C (B, n, m), and its solution is returned as an :class:`OTResult` in the caller's batch shape.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True, eq=False)
class OTResult:
    """What a solver returns. Tensors carry the batch shape ``...`` of the problem.

    plan            (..., n, m) transport plan P
    cost            (...)  <C, P>
    reg_cost        (...)  the regularised objective at P: <C, P> - gamma H(P) (sinkhorn), <C, P> + gamma/2 ||P||^2
                           (quadratic_ot), <C, P> (emd); semi-relaxed (sinkhorn with a finite rho):
                           <C, P> + gamma KL(P | a b^T) + rho KL(P^T 1 | b) (wviz.ot.semirelaxed)
    n_iter          iterations run (a Sinkhorn iteration = one row and one column update; 0 for closed forms and
                    for emd, whose network simplex does not report a count)
    marginal_error  (...)  max(||P 1 - a||_1, ||P^T 1 - b||_1); semi-relaxed, the columns' target is the column
                           sums that the column condition asks of the plan's rows (wviz.ot.semirelaxed), and the
                           rows hold a to rounding: this is the columns' error
    converged       (...)  bool: marginal_error <= tol (emd: POT's network simplex reported an optimal basis)
    history         (checks, 2) float64 on the CPU: rows (iteration, worst marginal error over the batch), one per
                    convergence check; in epsilon scaling the early rows belong to the larger gammas of the schedule
    f, g            (..., n), (..., m) dual potentials: P_ij = exp((f_i + g_j - C_ij) / gamma) (sinkhorn),
                    P_ij = max(f_i + g_j - C_ij, 0) / gamma (quadratic_ot), POT's duals (emd); -inf where a mass is 0
    gamma           the regularisation the plan was solved for (0 for emd); warm starts read it
    plans           ((iteration, plan), ...) when sinkhorn(record_plans=k) was asked to record them, else ()
    rho             the weight of sinkhorn's column penalty (inf: balanced) when rho was given, else None
    column_sums     (..., m) P^T 1, and column_kl (...) KL(P^T 1 | b): how far the columns are from their target b
                    (sinkhorn with rho given, else None)
    solved_on       where the solver ran, 'cpu' or 'cuda': 'cpu' also for a small problem on CUDA tensors that
                    sinkhorn solved on the CPU (its result's tensors are on the inputs' device all the same)
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
    rho: float | None = None
    column_sums: torch.Tensor | None = None
    column_kl: torch.Tensor | None = None
    solved_on: str = "cpu"


# ---- input checks -------------------------------------------------------------------------------------------------

def check_iter_args(tol, max_iter, name: str = "max_iter"):
    """The stopping rule of the iterative solvers: a tolerance tol > 0 on the marginal error, an iteration count
    ``name`` (max_iter, or sinkhorn's n_iter) >= 1."""
    if not (isinstance(tol, (int, float)) and math.isfinite(tol) and tol > 0):
        raise ValueError(f"tol must be a positive number, got {tol!r}")
    if not (isinstance(max_iter, int) and max_iter >= 1):
        raise ValueError(f"{name} must be a positive integer, got {max_iter!r}")


def _name(x: float) -> str:
    return "NaN" if math.isnan(x) else ("inf" if x > 0 else "-inf") if math.isinf(x) else f"{x:g}"


def check_cost(C: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Row minima and maxima of C; NaN and inf propagate into them, so two passes over C also validate it."""
    lo, hi = C.amin(-1), C.amax(-1)
    if not bool(torch.isfinite(lo).all() & torch.isfinite(hi).all()):
        bad = (~torch.isfinite(C)).nonzero()[0].tolist()
        where = ", ".join(map(str, bad))
        raise ValueError(f"the cost matrix C contains {_name(C[tuple(bad)].item())} at [{where}]; costs must be "
                         "finite")
    return lo, hi


def check_mass(w: torch.Tensor, name: str) -> torch.Tensor:
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


def tensors(a, b, C):
    """a, b, C as tensors of one floating dtype on C's device (ints become float64); b may be None."""
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


def _batch_shape(a, b, C) -> tuple:
    """The broadcast batch shape of a (..., n), b (..., m) and C (..., n, m)."""
    if a.ndim == 1 and b.ndim == 1 and C.ndim == 2:
        return ()
    try:
        return torch.broadcast_shapes(a.shape[:-1], b.shape[:-1], C.shape[:-2])
    except RuntimeError:
        raise ValueError(f"the batch shapes of a {tuple(a.shape[:-1])}, b {tuple(b.shape[:-1])} and C "
                         f"{tuple(C.shape[:-2])} do not match") from None


@dataclass(frozen=True, eq=False)
class ProblemFacts:
    """What :func:`prepare` learns about a batch of problems with its one host synchronisation, for the solvers'
    choices (sinkhorn's first potentials, its epsilon-scaling schedule, whether to mask zero masses).

    row_min        (B, n) the row minima min_j C_ij
    min_cost       min_ij C_ij over the batch (the smallest row minimum)
    max_row_min    the largest row minimum
    max_cost       max_ij C_ij over the batch
    zero_a, zero_b whether some mass of a (of b) is 0: those rows (columns) of every plan are 0
    """

    row_min: torch.Tensor
    min_cost: float
    max_row_min: float
    max_cost: float
    zero_a: bool
    zero_b: bool

    @property
    def cost_range(self) -> float:
        """max C - min C over the batch: the scale that says whether gamma is small."""
        return self.max_cost - self.min_cost


def prepare(a, b, C):
    """Validated problem flattened to a batch: a (B, n), b (B, m), C (B, n, m), the batch shape, and its
    :class:`ProblemFacts` (gathered with a single host synchronisation).

    b is rescaled to a's total when the two totals agree within rounding (so that Sinkhorn can meet tol);
    totals that really differ are refused: U(a, b) of eq. (23) of 002 is empty.
    """
    if b is None:   # only sinkhorn has a one-sided form (b=None), and it does not come here
        raise ValueError("this solver needs both marginals a and b; b=None (the one-sided problem) is for sinkhorn")
    a, b, C = tensors(a, b, C)
    n, m = C.shape[-2:]
    shape = _batch_shape(a, b, C)
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
        check_mass(a, "a")
    if not (b_min >= 0 and sb_min > 0 and math.isfinite(sb_max)):
        check_mass(b, "b")
    if not (math.isfinite(lo_min) and math.isfinite(hi_max)):
        check_cost(C)
    if not rel <= max(1e-6, 64 * torch.finfo(a.dtype).eps):
        i = int(((sa - sb).abs() / torch.maximum(sa, sb)).argmax())
        raise ValueError(f"a and b must have the same total mass, but sum(a) = {sa[i].item():.6g} and "
                         f"sum(b) = {sb[i].item():.6g}; normalise both to 1")
    b = b * (sa / sb)[:, None]
    facts = ProblemFacts(row_min=lo, min_cost=lo_min, max_row_min=lo_max, max_cost=hi_max, zero_a=a_min == 0,
                         zero_b=b_min == 0)
    return a, b, C, shape, facts


def init_potentials(init, a, b, B, n, m):
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


# ---- results --------------------------------------------------------------------------------------------------------

def finish(shape, plan, cost, reg_cost, n_iter, err, converged, history, f=None, g=None, gamma=0.0, plans=(),
           columns=None, solved_on=None):
    """OTResult with the batch shape restored; columns=(rho, P^T 1, KL(P^T 1 | b)) when sinkhorn was given rho;
    solved_on where the solver ran (the plan's device by default)."""
    n, m = plan.shape[-2:]
    hist = torch.from_numpy(np.asarray(history, dtype=np.float64).reshape(-1, 2))
    rho, sums, kl = (None, None, None) if columns is None else columns
    return OTResult(plan=plan.reshape(*shape, n, m), cost=cost.reshape(shape), reg_cost=reg_cost.reshape(shape),
                    n_iter=int(n_iter), marginal_error=err.reshape(shape), converged=converged.reshape(shape),
                    history=hist, f=None if f is None else f.reshape(*shape, n),
                    g=None if g is None else g.reshape(*shape, m), gamma=float(gamma),
                    plans=tuple((it, P.reshape(*shape, n, m)) for it, P in plans), rho=rho,
                    column_sums=None if sums is None else sums.reshape(*shape, m),
                    column_kl=None if kl is None else kl.reshape(shape), solved_on=solved_on or plan.device.type)


def to_device(res: OTResult, device: torch.device) -> OTResult:
    """res with every tensor on ``device`` (history stays on the CPU); solved_on still says where it was solved."""
    move = lambda t: t if t is None else t.to(device)  # noqa: E731
    return dataclasses.replace(res, plan=move(res.plan), cost=move(res.cost), reg_cost=move(res.reg_cost),
                               marginal_error=move(res.marginal_error), converged=move(res.converged),
                               f=move(res.f), g=move(res.g), plans=tuple((it, move(P)) for it, P in res.plans),
                               column_sums=move(res.column_sums), column_kl=move(res.column_kl))


def marginal_error(a, b, rows, columns=None, *, scalings=None, work=None, dim=-1):
    """The marginal error max(||P 1 - a||_1, ||P^T 1 - b||_1): the L1 error of the worse marginal of a plan P, given
    its row sums rows = P 1 (..., n) and column sums columns = P^T 1 (..., m); one number per problem. It is what
    every solver of wviz.ot stops on (tol) and reports (OTResult.marginal_error).

    b=None (columns=None): the one-sided problem, whose rows alone are constrained: ||P 1 - a||_1.
    scalings=(u, v): P = diag(u) K diag(v) in scaling form, given rows = K v and columns = K^T u; its marginals
    u * K v and v * K^T u are not formed (in torch one fused pass per side).
    Torch tensors and numpy arrays alike (the result is of the inputs' kind); dim: the axes that index the points
    (the last by default; (1, 2) for columns (B, n, 1)); work=(r, c): numpy buffers of the shapes of rows and
    columns that take the residuals, so that nothing is allocated (the lean loop's check, every few iterations).

    >>> import torch
    >>> from wviz.ot import marginal_error
    >>> P = torch.tensor([[0.3, 0.2], [0.1, 0.4]])
    >>> a, b = torch.tensor([0.5, 0.5]), torch.tensor([0.5, 0.5])
    >>> round(float(marginal_error(a, b, P.sum(-1), P.sum(-2))), 4)   # rows exact; columns 0.4, 0.6
    0.2
    >>> round(float(marginal_error(a, None, P.sum(-1))), 4)           # one-sided: rows only
    0.0
    """
    # one branch per library, each side written out: the lean loop's check runs this every few iterations
    if torch.is_tensor(rows):
        if scalings is None:
            err = (rows - a).abs_().sum(dim)
            return err if b is None else torch.maximum(err, (columns - b).abs_().sum(dim))
        u, v = scalings   # |a - u K v| = |u K v - a|, one fused pass
        err = torch.addcmul(a, u, rows, value=-1).abs_().sum(dim)
        return err if b is None else torch.maximum(err, torch.addcmul(b, v, columns, value=-1).abs_().sum(dim))
    r, c = (None, None) if work is None else work
    d = np.subtract(rows if scalings is None else np.multiply(scalings[0], rows, out=r), a, out=r)
    err = np.add.reduce(np.abs(d, out=d), dim)
    if b is None:
        return err
    d = np.subtract(columns if scalings is None else np.multiply(scalings[1], columns, out=c), b, out=c)
    return np.maximum(err, np.add.reduce(np.abs(d, out=d), dim))


def dot(C, P):
    """<C, P> per problem of the batch (a batched dot product: no n x m temporary)."""
    B = C.shape[0]
    return torch.bmm(C.reshape(B, 1, -1), P.reshape(B, -1, 1)).reshape(B)
