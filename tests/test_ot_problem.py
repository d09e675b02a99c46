"""wviz.ot.problem: what every solver shares: input checks (bad input raises a ValueError in plain words), the
problem's facts (ProblemFacts), and the marginal error, against sums computed here."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from tests.ot_problems import F64, random_problem
from wviz import ot
from wviz.ot.problem import ProblemFacts, prepare


# ---- bad input ------------------------------------------------------------------------------------------------------

def _bad_cases():
    a, b, C = random_problem(4, 3, seed=0)
    nan_C, inf_C = C.clone(), C.clone()
    nan_C[1, 2], inf_C[0, 0] = float("nan"), float("inf")
    neg_a, nan_a = a.clone(), a.clone()
    neg_a[0], nan_a[1] = -0.1, float("nan")
    return [
        ((neg_a, b, C, 0.1), "non-negative"),
        ((nan_a, b, C, 0.1), "NaN"),
        ((a, b * 0.5, C, 0.1), "same total mass"),
        ((a, b, nan_C, 0.1), "NaN"),
        ((a, b, inf_C, 0.1), "inf"),
        ((a[:3], b, C, 0.1), "one mass per row"),
        ((a, torch.ones(4, dtype=F64) / 4, C, 0.1), "one mass per column"),
        ((torch.stack([a, a]), b, torch.stack([C, C, C]), 0.1), "batch shapes"),
        ((a, b, C, 0.0), "gamma"),
        ((a, b, C, -1.0), "gamma"),
        ((a, b, C, float("nan")), "gamma"),
        ((a, b, C, float("inf")), "gamma"),
        ((a, b, C, "big"), "gamma"),
        ((a * 0, b * 0, C, 0.1), "total mass"),
        ((a, b, C[0], 0.1), "matrix"),
    ]


BAD = _bad_cases()
# emd takes no gamma: it meets every bad case but the gamma ones
CASES = [(solver, i) for solver in ("sinkhorn", "quadratic_ot") for i in range(len(BAD))] + \
    [("emd", i) for i, (_, match) in enumerate(BAD) if match != "gamma"]


@pytest.mark.parametrize("solver, case", CASES)
def test_bad_input_raises_value_error(solver, case):
    (a, b, C, gamma), match = BAD[case]
    args = (a, b, C) if solver == "emd" else (a, b, C, gamma)
    with pytest.raises(ValueError, match=match):
        getattr(ot, solver)(*args)


@pytest.mark.parametrize("solver", ["emd", "quadratic_ot"])
def test_b_none_is_only_for_sinkhorn(solver):
    """b=None means the one-sided problem, which only sinkhorn solves; the others say so plainly."""
    a, _, C = random_problem(4, 3)
    args = (a, None, C) if solver == "emd" else (a, None, C, 0.1)
    with pytest.raises(ValueError, match="needs both marginals a and b"):
        getattr(ot, solver)(*args)


def test_nearly_equal_totals_are_accepted():
    a, b, C = random_problem(6, 5, seed=3)
    res = ot.sinkhorn(a, b * (1 + 1e-9), C, 0.1, tol=1e-10)
    assert bool(res.converged)


# ---- the problem's facts --------------------------------------------------------------------------------------------

def test_prepare_gathers_the_facts_of_a_batch():
    """Row minima, the smallest and largest of them, the largest cost, and whether a mass is zero, over the whole
    broadcast batch; a frozen dataclass."""
    a, b, C = random_problem(5, 4, seed=1)
    C2 = torch.stack([C, 3 * C - 1])
    b0 = b.clone()
    b0[2] = 0
    b0 = b0 / b0.sum()
    a2, b2, C3, shape, facts = prepare(a, b0, C2)
    assert shape == (2,) and a2.shape == (2, 5) and b2.shape == (2, 4) and C3.shape == (2, 5, 4)
    assert isinstance(facts, ProblemFacts)
    torch.testing.assert_close(facts.row_min, C2.amin(-1), rtol=0, atol=0)
    assert facts.min_cost == float(C2.min()) and facts.max_cost == float(C2.max())
    assert facts.max_row_min == float(C2.amin(-1).max())
    assert facts.cost_range == float(C2.max()) - float(C2.min())
    assert not facts.zero_a and facts.zero_b
    with pytest.raises(AttributeError):
        facts.zero_a = True


# ---- the marginal error ---------------------------------------------------------------------------------------------

def _independent_error(P, a, b):
    """max(sum_i |sum_j P_ij - a_i|, sum_j |sum_i P_ij - b_j|) per problem, with Python loops on float64 numbers."""
    P, a, b = (np.asarray(t, dtype=np.float64) for t in (P, a, b))
    out = []
    for k in range(P.shape[0]):
        n, m = P[k].shape
        rows = sum(abs(math.fsum(P[k, i, j] for j in range(m)) - a[k, i]) for i in range(n))
        cols = sum(abs(math.fsum(P[k, i, j] for i in range(n)) - b[k, j]) for j in range(m))
        out.append(max(rows, cols))
    return np.array(out)


@pytest.mark.parametrize("library", ["torch", "numpy"])
def test_marginal_error_is_the_l1_error_of_the_worse_marginal(library):
    g = torch.Generator().manual_seed(0)
    P = torch.rand(3, 6, 5, generator=g, dtype=F64) / 30
    a, b = torch.full((3, 6), 1 / 6, dtype=F64), torch.full((3, 5), 1 / 5, dtype=F64)
    P[1] = a[1, :, None] * b[1, None, :]   # a feasible plan: error 0
    want = _independent_error(P, a, b)
    args = (a, b, P.sum(-1), P.sum(-2))
    if library == "numpy":
        args = tuple(t.numpy() for t in args)
    err = ot.marginal_error(*args)
    assert isinstance(err, torch.Tensor if library == "torch" else np.ndarray) and err.shape == (3,)
    np.testing.assert_allclose(np.asarray(err), want, rtol=1e-12, atol=1e-15)
    assert float(err[1]) < 1e-15
    # the one-sided problem: the rows alone
    one = ot.marginal_error(args[0], None, args[2])
    np.testing.assert_allclose(np.asarray(one), (P.sum(-1) - a).abs().sum(-1).numpy(), rtol=1e-12)


@pytest.mark.parametrize("library, dim", list(itertools.product(["torch", "numpy"], [-1, (1, 2)])))
def test_marginal_error_of_the_scaling_form_without_the_plan(library, dim):
    """P = diag(u) K diag(v) given K v, K^T u and the scalings (u, v): the marginals are not formed, the error is
    the plan's; work buffers (numpy) take the residuals in place and give the same numbers."""
    g = torch.Generator().manual_seed(1)
    B, n, m = 2, 7, 4
    K = torch.rand(B, n, m, generator=g, dtype=F64)
    u, v = torch.rand(B, n, generator=g, dtype=F64) + 0.5, torch.rand(B, m, generator=g, dtype=F64) + 0.5
    a, b = torch.full((B, n), 1 / n, dtype=F64), torch.full((B, m), 1 / m, dtype=F64)
    P = u[:, :, None] * K * v[:, None, :]
    want = _independent_error(P, a, b)
    Kv, KTu = (K @ v[:, :, None])[:, :, 0], (K.mT @ u[:, :, None])[:, :, 0]
    args = [a, b, Kv, KTu, u, v]
    if dim != -1:   # columns (B, n, 1), as wviz.ot.scaling keeps them
        args = [t[:, :, None] for t in args]
    if library == "numpy":
        args = [t.numpy() for t in args]
    a_, b_, Kv_, KTu_, u_, v_ = args
    err = ot.marginal_error(a_, b_, Kv_, KTu_, scalings=(u_, v_), dim=dim)
    np.testing.assert_allclose(np.asarray(err), want, rtol=1e-12)
    if library == "numpy":
        work = (np.empty_like(Kv_), np.empty_like(KTu_))
        again = ot.marginal_error(a_, b_, Kv_, KTu_, scalings=(u_, v_), work=work, dim=dim)
        np.testing.assert_array_equal(again, err)
        np.testing.assert_allclose(work[0], np.abs(u_ * Kv_ - a_), rtol=1e-12)   # the residuals, in place


def test_marginal_error_is_what_every_solver_reports():
    """Each solver's OTResult.marginal_error is its plan's marginal error."""
    a, b, C = random_problem(9, 7, seed=3)
    for res in (ot.sinkhorn(a, b, C, 0.05, tol=1e-3), ot.quadratic_ot(a, b, C, 0.5, tol=1e-3), ot.emd(a, b, C)):
        want = _independent_error(res.plan[None], a[None], b[None])
        assert float(res.marginal_error) == pytest.approx(float(want[0]), rel=1e-9, abs=1e-15)
