"""Semi-relaxed entropic optimal transport: every row of the plan keeps its mass a_i exactly, and the columns' masses
b become a soft target, held by a KL penalty of weight rho (Chizat, Peyré, Schmitzer & Vialard 2018):

    min_{P >= 0, P 1 = a}  <C, P> + gamma KL(P | a b^T) + rho KL(P^T 1 | b),    KL(x | y) = sum x log(x / y) - x + y

rho -> 0 drops the column term: each row is a_i times the prior-softmax of -C_i / gamma with prior b (001,
eq. (13)), P_ij = a_i b_j exp(-C_ij / gamma) / sum_k b_k exp(-C_ik / gamma); rho -> infinity holds the columns at b:
the balanced problem of eq. (23) of 002 (whose -gamma H(P) differs from gamma KL(P | a b^T) by a constant on U(a, b),
but not off it: with -gamma H(P) the rho -> 0 end would be plain softmax, whatever b).

Optimality. With the plan in wviz's log-domain form P_ij = exp((f_i + g_j - C_ij) / gamma) (the f, g of OTResult,
which carry gamma log a_i and gamma log b_j: the potentials of the reference measure a b^T are f_i - gamma log a_i
and g_j - gamma log b_j), the solution is characterised by

    P 1 = a,        g_j = gamma log b_j - rho log(q_j / b_j),   q = P^T 1,

the second being d/dq of rho KL(q | b) = rho log(q / b), the price of a column's deviation from its target.

The scaling algorithm (Chizat et al. 2018: the proximal step of rho KL) on P = diag(u) K diag(v) with
K = exp((f + g - C) / gamma): the row update is Sinkhorn's, u <- a / K v, and the column update solves the
column condition for v: the balanced update raised to phi = rho / (rho + gamma), times a factor of the potentials,

    v <- (b / K^T u)^phi exp((gamma log b - g) / (rho + gamma)) = exp(c - phi log K^T u),
    c = log b - g / (rho + gamma),

computed in the log domain (both factors overflow alone for a small rho + gamma). The iteration contracts by phi
in the total mass of the plan (the one direction in which the plan's rows do not move) and by phi times Sinkhorn's
rate in the others: at rho >> gamma the mass mode alone would need about (rho / gamma) log(1 / tol) iterations.
Before each row update the dual point is therefore translated, f <- f - lambda, g <- g + lambda (the kernel and the
plan do not change), by the lambda = rho log(sum q* / sum a) that maximises the dual along that line (Séjourné,
Vialard & Peyré 2022, translation invariant Sinkhorn; q* below): the mass mode is then solved in one step.

Stopping measure. After a column update the column condition holds for the current rows, so what is left of the
optimality conditions is the row constraint; with an over-relaxed column update (Thibault et al. 2021) the column
condition is off too. The loops stop on, and the result reports, the marginal error (wviz.ot.problem.marginal_error)
against the two targets of these conditions,

    max(||P 1 - a||_1, ||P^T 1 - q*||_1),    q* = t * K^T u, t the plain column update of the current rows,

the L1 error of the rows and of the columns against the column sums that the column condition asks for; at omega = 1
the second term is 0 and this is the rows' error, which is 0 exactly at the solution.

The returned plan. The iterations end on a column update, so the last iterate's rows hold a only to tol. The plan
returned is that iterate after one more plain row update, u <- a / K v: its rows are a to rounding, as the problem
holds them, and its marginal error (the same measure) is the columns' error against the column condition of these
rows. At omega = 1 that is at most about phi times the rows' error of the last check (the column sums move by the
rows' last correction, the column update by phi times it), so within tol; with over-relaxation the columns' own
error of the last check adds to it, and the result can end a little above the last check's error (converged
says whether the plan returned meets tol).

Numerics. A column may carry no mass worth a float even though b_j > 0 (rho small, gamma small, a key far from
every query): its scaling is held at FLOOR (exp(-2 ABSORB) of the dtype), where its entries of the plan are below
rounding, and only large scalings call for an absorption (a small one cannot overflow anything: the kernel stays
<= 1 between rebuilds). Such a column's reported potential is one at which its plan is below rounding, not the
column condition's (whose column sum underflows). Epsilon scaling starts at gamma_k = rho at the latest, and the
over-relaxation of a stage no higher than Young's optimum for the rate phi (wviz.ot.entropic, wviz.ot.relaxation).

POT's ``ot.unbalanced.sinkhorn_unbalanced(a, b, M, reg, reg_m=(inf, rho))`` (reg_type "kl", its default since 0.9.5)
solves the same problem, with the same reference measure a b^T: its plan is this one. Its total_cost takes the KL
terms without their - x + y (and with 1e-16 inside the log): the same number when sum a = sum b = 1 and the rows
are exact, as they are at the solution. Its potentials logu, logv are those of the kernel a_i b_j
exp(-C_ij / gamma): gamma logu_i = f_i - gamma log a_i and gamma logv_j = g_j - gamma log b_j (no constant is free
in the semi-relaxed problem). It iterates without the translation, so at rho >> gamma it needs the (rho / gamma)
log(1 / tol) iterations above (its translation invariant variant has one), and it stops on the relative change of
its scalings, not on a marginal error.
"""
from __future__ import annotations

import math

import numpy as np
import torch

__all__ = ["FLOOR", "check_rho", "phi", "log_targets", "log_targets_into", "column_scalings", "column_scalings_into",
           "translation", "kl", "objective", "prior_softmax_plan"]

# The smallest column scaling (see Numerics above), exp(-2 ABSORB) of wviz.ot.scaling's bound on the scalings: its
# products with the clamped kernel (>= exp(-CLAMP)) stay normal numbers, which keeps matrix-vector products fast.
FLOOR = {torch.float64: math.exp(-100.0), torch.float32: math.exp(-24.0)}


def check_rho(rho) -> float | None:
    """rho=None (the balanced problem), or the weight rho >= 0 of the column penalty (0: the prior-softmax closed
    form, inf: balanced).

    >>> from wviz.ot.semirelaxed import check_rho
    >>> check_rho(None) is None, check_rho(2), check_rho(float("inf"))
    (True, 2.0, inf)
    >>> check_rho(-1)
    Traceback (most recent call last):
        ...
    ValueError: rho must be a number >= 0 (or inf for the balanced problem), got -1
    """
    if rho is None:
        return None
    try:
        r = float(rho)
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(f"rho must be a number >= 0 (or inf for the balanced problem), got {rho!r}") from None
    if not r >= 0:   # also NaN
        raise ValueError(f"rho must be a number >= 0 (or inf for the balanced problem), got {r:g}")
    return r


def phi(rho: float, gamma: float) -> float:
    """The exponent of the column update, rho / (rho + gamma): 0 at rho = 0 (no column constraint), 1 as
    rho -> infinity (Sinkhorn's update).

    >>> from wviz.ot.semirelaxed import phi
    >>> phi(0.0, 0.1), round(phi(1.0, 0.1), 4), round(phi(1e6, 0.1), 4)
    (0.0, 0.9091, 1.0)
    """
    return rho / (rho + gamma)


def log_targets(log_b, g, rho: float, gamma: float, pos_b):
    """c = log b - g / (rho + gamma), the log-domain part of the column update that depends on the potentials g
    (the same shapes as log_b; -inf where b = 0). Torch tensors. See :func:`column_scalings`.

    >>> import torch
    >>> from wviz.ot.semirelaxed import log_targets
    >>> b = torch.tensor([0.5, 0.5, 0.0])
    >>> c = log_targets(b.log(), torch.tensor([1.0, -1.0, 0.0]), rho=1.0, gamma=1.0, pos_b=b > 0)
    >>> [round(float(x), 4) for x in c]      # log 0.5 - g / 2, and -inf where b = 0
    [-1.1931, -0.1931, -inf]
    """
    return torch.where(pos_b, log_b - g / (rho + gamma), -math.inf)


def log_targets_into(c, log_b, g, rho: float, gamma: float, zero=None):
    """:func:`log_targets` in numpy, written into c (wviz.ot.lean's buffers); zero: the indices of the points without
    mass (where log_b is -inf), set to -inf.

    >>> import numpy as np, torch
    >>> from wviz.ot.semirelaxed import log_targets, log_targets_into
    >>> b, g, c = np.array([0.5, 0.5, 0.0]), np.array([1.0, -1.0, 0.0]), np.empty(3)
    >>> with np.errstate(divide="ignore"):
    ...     log_targets_into(c, np.log(b), g, 1.0, 1.0, zero=np.array([2]))
    >>> tb = torch.tensor(b)
    >>> bool(np.array_equal(c, log_targets(tb.log(), torch.tensor(g), 1.0, 1.0, tb > 0).numpy()))
    True
    """
    with np.errstate(invalid="ignore"):   # -inf - (-inf) at a zero mass, set to -inf below
        np.subtract(log_b, g / (rho + gamma), out=c)
    if zero is not None:
        c[zero] = -np.inf


def column_scalings(c, KTu, p: float, floor: float):
    """The plain column update t = exp(c - phi log K^T u), held at floor or above (torch; 0 where c = -inf is
    not held up: the caller zeroes the points without mass). It solves the column condition: with v = t, the
    column sums q = v K^T u and the potentials g + gamma log v satisfy g + gamma log v = gamma log b - rho log(q / b).

    >>> import torch
    >>> from wviz.ot.semirelaxed import column_scalings, log_targets, phi
    >>> b, g, KTu = torch.tensor([0.25, 0.75]), torch.tensor([0.1, -0.2]), torch.tensor([0.4, 1.1])
    >>> gamma, rho = 0.5, 2.0
    >>> v = column_scalings(log_targets(b.log(), g, rho, gamma, b > 0), KTu, phi(rho, gamma), 1e-30)
    >>> q = v * KTu
    >>> torch.allclose(g + gamma * v.log(), gamma * b.log() - rho * (q / b).log())
    True
    """
    return torch.add(c, KTu.log(), alpha=-p).exp_().clamp_(min=floor)


def column_scalings_into(t, c, KTu, p: float, floor: float, zero=None):
    """:func:`column_scalings` in numpy, written into t (wviz.ot.lean's buffers); zero: the indices of the points
    without mass, set to 0.

    >>> import numpy as np, torch
    >>> from wviz.ot.semirelaxed import column_scalings, column_scalings_into
    >>> c, KTu, t = np.array([-1.2, -0.2, -80.0]), np.array([0.4, 1.1, 2.0]), np.empty(3)
    >>> column_scalings_into(t, c, KTu, 0.8, 1e-30)
    >>> bool(np.allclose(t, column_scalings(torch.tensor(c), torch.tensor(KTu), 0.8, 1e-30).numpy(), rtol=1e-15))
    True
    """
    with np.errstate(divide="ignore", invalid="ignore"):   # log 0, then -inf + inf, at a point without mass
        np.log(KTu, out=t)
        np.multiply(t, -p, out=t)
        np.add(t, c, out=t)
        np.exp(t, out=t)
        np.maximum(t, floor, out=t)
    if zero is not None:
        t[zero] = 0.0


def translation(t, KTu, total, rho: float):
    """lambda = rho log(sum_j q*_j / sum a) with q* = t K^T u, the column sums of the column condition: the dual
    translation f - lambda, g + lambda that solves the mass mode (Séjourné et al. 2022). Torch batches t, KTu
    (B, m, 1), total = sum a (B, 1, 1), giving (B, 1, 1); or numpy vectors t, KTu (m,) and a float total.

    >>> import numpy as np
    >>> from wviz.ot.semirelaxed import translation
    >>> round(translation(np.array([0.3, 0.9]), np.array([1.0, 1.0]), 1.0, 2.0), 4)   # 2 log 1.2
    0.3646
    """
    if torch.is_tensor(t):
        return torch.bmm(t.mT, KTu).div_(total).log_().mul_(rho)
    return rho * math.log(float(np.dot(t, KTu)) / total)


def kl(x, y, pos):
    """The generalised KL(x | y) = sum x log(x / y) - x + y over the last axis, where pos (y > 0; x is 0 elsewhere).

    >>> import torch
    >>> from wviz.ot.semirelaxed import kl
    >>> x, y = torch.tensor([0.5, 0.5]), torch.tensor([0.25, 0.75])
    >>> round(float(kl(x, y, y > 0)), 4), float(kl(y, y, y > 0))
    (0.1438, 0.0)
    """
    return torch.where(pos, torch.xlogy(x, x) - x * torch.where(pos, y, 1).log() - x + y, 0).sum(-1)


def objective(f, g, rows, columns, a, b, pos_a, pos_b, gamma: float, rho: float):
    """<C, P> + gamma KL(P | a b^T) + rho KL(P^T 1 | b) from the absorbed potentials f (B, n), g (B, m) and the
    plan's marginals rows (B, n), columns (B, m): with P_ij = exp((f_i + g_j - C_ij) / gamma),
    sum_ij P_ij (C_ij + gamma log(P_ij / (a_i b_j))) = <f - gamma log a, P 1> + <g - gamma log b, P^T 1>.

    >>> import torch
    >>> from wviz.ot.semirelaxed import objective, prior_softmax_plan
    >>> a, b = torch.tensor([[0.5, 0.5]]), torch.tensor([[0.25, 0.75]])
    >>> C = torch.tensor([[[0.0, 1.0], [1.0, 0.0]]])
    >>> P, f, g = prior_softmax_plan(a, b, C, 0.5)   # rho = 0: the objective is <C, P> + gamma KL(P | a b^T)
    >>> direct = (C * P).sum() + 0.5 * (P * (P / (a[:, :, None] * b[:, None, :])).log()).sum()
    >>> torch.allclose(objective(f, g, P.sum(-1), P.sum(-2), a, b, a > 0, b > 0, 0.5, 0.0), direct)
    True
    """
    ft = torch.where(pos_a, f - gamma * torch.where(pos_a, a, 1).log(), 0)
    gt = torch.where(pos_b, g - gamma * torch.where(pos_b, b, 1).log(), 0)
    mass = a.sum(-1) * b.sum(-1) - rows.sum(-1)
    return (ft * rows).sum(-1) + (gt * columns).sum(-1) + gamma * mass + rho * kl(columns, b, pos_b)


def prior_softmax_plan(a, b, C, gamma: float):
    """The rho -> 0 end in closed form: P_ij = a_i b_j exp(-C_ij / gamma) / sum_k b_k exp(-C_ik / gamma) (each row
    a_i times the prior-softmax of -C_i / gamma with prior b, 001 eq. (13)), and its potentials
    f_i = gamma log a_i - gamma log sum_k b_k exp(-C_ik / gamma), g_j = gamma log b_j. Batches a (B, n), b (B, m),
    C (B, n, m); the keys with b_j = 0 get nothing.

    >>> import torch
    >>> from wviz.attention import prior_softmax
    >>> from wviz.ot.semirelaxed import prior_softmax_plan
    >>> a, b = torch.tensor([[0.5, 0.5]]), torch.tensor([[0.25, 0.75]])
    >>> C = torch.tensor([[[0.0, 1.0], [1.0, 0.0]]])
    >>> P, f, g = prior_softmax_plan(a, b, C, 1.0)
    >>> [[round(p, 4) for p in row] for row in P[0].tolist()]   # rows sum to a; the columns to whatever they get
    [[0.2377, 0.2623], [0.0546, 0.4454]]
    >>> torch.allclose(P, a[:, :, None] * prior_softmax(-C, b[:, None, :], tau=1.0))
    True
    """
    log_b = torch.where(b > 0, torch.where(b > 0, b, 1).log(), -math.inf)[:, None, :]
    logits = log_b - C / gamma
    lse = torch.logsumexp(logits, dim=-1)
    P = a[:, :, None] * torch.exp(logits - lse[:, :, None])
    f = torch.where(a > 0, gamma * (torch.where(a > 0, a, 1).log() - lse), -math.inf)
    return P, f, gamma * log_b[:, 0]

