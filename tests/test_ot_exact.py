"""wviz.ot.exact: emd against scipy's linear programme (cost, duality), its iteration budget and batches."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import linprog

from tests.ot_problems import l1_errors, random_problem
from wviz import ot


def lp_transport(a, b, C):
    """The transport LP solved by scipy's HiGHS: min <C, P> s.t. P 1 = a, P^T 1 = b, P >= 0."""
    n, m = C.shape
    A = np.vstack([np.kron(np.eye(n), np.ones(m)), np.kron(np.ones(n), np.eye(m))])
    res = linprog(C.ravel(), A_eq=A, b_eq=np.concatenate([a, b]), bounds=(0, None), method="highs")
    return res.fun


@pytest.mark.parametrize("seed", range(4))
def test_emd_matches_linprog(seed):
    a, b, C = random_problem(5 + seed, 7, seed=seed)
    if seed == 3:
        a[1] = 0
        a = a / a.sum()
    res = ot.emd(a, b, C)
    assert bool(res.converged) and res.gamma == 0 and res.n_iter == 0
    assert float(res.cost) == pytest.approx(lp_transport(a.numpy(), b.numpy(), C.numpy()), rel=1e-9, abs=1e-12)
    assert float(res.reg_cost) == float(res.cost)
    assert max(l1_errors(res.plan, a, b)) < 1e-12
    # dual feasibility and complementary slackness of the potentials
    keep = (a > 0)[:, None] & (b > 0)[None, :]
    slack = (C - res.f[:, None] - res.g[None, :])[keep]
    assert float(slack.min()) > -1e-9
    assert float((res.plan[keep] * slack).abs().max()) < 1e-12


def test_emd_out_of_iterations_is_not_converged():
    a, b, C = random_problem(60, 60, seed=1, uniform=True)
    res = ot.emd(a, b, C, max_iter=10)
    assert not bool(res.converged)
    assert bool(ot.emd(a, b, C).converged)


def test_emd_batched():
    a, b, C = random_problem(8, 6, seed=2)
    res = ot.emd(a, b, torch.stack([C, 2 * C]))
    assert res.plan.shape == (2, 8, 6)
    assert float(res.cost[1]) == pytest.approx(2 * float(res.cost[0]), rel=1e-12)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
def test_emd_on_cuda():
    a, b, C = random_problem(300, 200, seed=14)
    e = ot.emd(a.cuda(), b.cuda(), C.cuda())
    assert e.plan.is_cuda and bool(e.converged)
