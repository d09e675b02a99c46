"""wviz.ot.batch: a batch solves each problem as if alone, and converged problems leave it early."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tests.ot_problems import l1_errors, random_problem
from wviz import ot
from wviz.ot import scaling
from wviz.ot.batch import iterations_left, worth_leaving


def test_batched_equals_looped():
    probs = [random_problem(15, 11, seed=s) for s in range(6)]
    a = torch.stack([p[0] for p in probs]).reshape(2, 3, 15)
    b = torch.stack([p[1] for p in probs]).reshape(2, 3, 11)
    C = torch.stack([p[2] * (1 + s) for s, p in enumerate(probs)]).reshape(2, 3, 15, 11)
    res = ot.sinkhorn(a, b, C, 0.05, tol=1e-11, max_iter=50000)
    assert res.plan.shape == (2, 3, 15, 11) and res.cost.shape == (2, 3) and res.f.shape == (2, 3, 15)
    assert bool(res.converged.all())
    for k in range(6):
        i, j = divmod(k, 3)
        one = ot.sinkhorn(a[i, j], b[i, j], C[i, j], 0.05, tol=1e-11, max_iter=50000)
        torch.testing.assert_close(res.plan[i, j], one.plan, atol=1e-10, rtol=0)
        torch.testing.assert_close(res.cost[i, j], one.cost, atol=1e-10, rtol=1e-9)
    # broadcasting: one cost matrix, a batch of masses
    shared = ot.sinkhorn(a, b, C[0, 0], 0.05, tol=1e-11)
    torch.testing.assert_close(shared.plan[1, 2], ot.sinkhorn(a[1, 2], b[1, 2], C[0, 0], 0.05, tol=1e-11).plan,
                               atol=1e-10, rtol=0)


def test_converged_problems_leave_the_batch(monkeypatch):
    """A batch with one slow problem (its costs 40x the others' at the same gamma): the converged problems leave
    the batch early (their plans are written out by a separate _plan_parts call) and every result still equals
    the problem solved alone, at the problem's original index."""
    calls = []
    real = scaling._plan_parts
    monkeypatch.setattr(scaling, "_plan_parts", lambda *args: calls.append(args[0].shape[0]) or real(*args))
    probs = [random_problem(12, 9, seed=s) for s in range(6)]
    scale = [1, 1, 40, 1, 1, 1]
    a, b = torch.stack([p[0] for p in probs]), torch.stack([p[1] for p in probs])
    C = torch.stack([p[2] * k for p, k in zip(probs, scale)])
    res = ot.sinkhorn(a, b, C, 0.02, tol=1e-10, max_iter=100000)
    assert len(calls) >= 2 and calls[-1] < 6, calls   # some left early; the slow one finished in a smaller batch
    assert bool(res.converged.all())
    for k in range(6):
        one = ot.sinkhorn(a[k], b[k], C[k], 0.02, tol=1e-10, max_iter=100000)
        torch.testing.assert_close(res.plan[k], one.plan, atol=1e-9, rtol=0)
        for field in ("cost", "reg_cost"):
            torch.testing.assert_close(getattr(res, field)[k], getattr(one, field), atol=1e-9, rtol=1e-8)
        # potentials are defined up to (f + c, g - c): compare f_i + g_j
        torch.testing.assert_close(res.f[k][:, None] + res.g[k][None], one.f[:, None] + one.g[None], atol=1e-7,
                                   rtol=0)
        assert max(l1_errors(res.plan[k], a[k], b[k])) <= 1e-10
        assert float(res.marginal_error[k]) == pytest.approx(max(l1_errors(res.plan[k], a[k], b[k])), abs=1e-13)


def test_leaving_is_worth_it_only_for_half_a_batch_with_a_slow_rest():
    """iterations_left: log(tol / err) / log(rate) at the measured rate; worth_leaving: half of the batch has
    converged and the rest needs more than ten more iterations."""
    err, rate = np.array([1e-8, 1e-2, 1e-2]), np.array([0.5, 0.5, 0.9])
    conv = err <= 1e-6
    assert iterations_left(err, rate, ~conv, 1e-6) == pytest.approx(math.log(1e-4) / math.log(0.9))
    assert iterations_left(err, None, ~conv, 1e-6) == 0.0   # no rate measured yet
    assert iterations_left(err, np.array([0.5, 1.0, 0.5]), ~conv, 1e-6) > 1e300   # not converging
    assert not worth_leaving(conv, err, rate, 1e-6)   # one of three has converged
    conv = np.array([True, True, False])
    assert worth_leaving(conv, err, rate, 1e-6)
    assert not worth_leaving(conv, err, np.array([0.5, 0.5, 0.1]), 1e-6)   # the rest is 6 iterations away
