"""wviz.ot.quadratic: quadratic_ot against POT's smooth dual and its KKT conditions, zero masses, batches, fuzzing."""
from __future__ import annotations

import numpy as np
import ot as pot
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.ot_problems import F64, l1_errors, random_problem
from wviz import ot


@pytest.mark.parametrize("gamma", [10.0, 1.0, 0.1])
def test_quadratic_ot_matches_pot_smooth_dual(gamma):
    a, b, C = random_problem(20, 25, seed=11)
    res = ot.quadratic_ot(a, b, C, gamma, tol=1e-10)
    assert bool(res.converged)
    P_pot = pot.smooth.smooth_ot_dual(a.numpy(), b.numpy(), C.numpy(), gamma, reg_type="l2", stopThr=1e-15,
                                      numItermax=20000)
    # POT's L-BFGS-B stops at a marginal error around 1e-6: compare at that accuracy
    np.testing.assert_allclose(res.plan.numpy(), P_pot, atol=2e-6, rtol=0)
    assert float(res.cost) == pytest.approx(float((C * torch.as_tensor(P_pot)).sum()), rel=1e-4)


@pytest.mark.parametrize("gamma", [5.0, 0.5, 0.05])
def test_quadratic_ot_kkt(gamma):
    a, b, C = random_problem(30, 20, seed=12)
    res = ot.quadratic_ot(a, b, C, gamma, tol=1e-10)
    P, f, g = res.plan, res.f, res.g
    assert bool(res.converged) and float(P.min()) >= 0
    assert max(l1_errors(P, a, b)) <= 1e-10
    # stationarity / complementary slackness: gamma P = [f + g - C]_+
    torch.testing.assert_close(gamma * P, (f[:, None] + g[None, :] - C).clamp_min(0), atol=1e-14, rtol=0)
    # zero duality gap
    primal = float((C * P).sum() + gamma / 2 * (P * P).sum())
    dual = float(f @ a + g @ b - ((f[:, None] + g[None, :] - C).clamp_min(0) ** 2).sum() / (2 * gamma))
    assert primal == pytest.approx(float(res.reg_cost), rel=1e-12)
    assert abs(primal - dual) <= 1e-8 * max(1.0, abs(primal))
    assert float((P == 0).float().mean()) > 0.2 or gamma > 1   # sparse plans at small gamma


def test_quadratic_ot_zero_masses_and_batch():
    a, b, C = random_problem(9, 7, seed=13)
    a[3] = 0
    a = a / a.sum()
    res = ot.quadratic_ot(torch.stack([a, a]), b, C, 0.5, tol=1e-10)
    assert res.plan.shape == (2, 9, 7) and bool(res.converged.all())
    assert float(res.plan[:, 3].abs().max()) == 0 and bool(torch.isfinite(res.plan).all())


# ---- fuzz -----------------------------------------------------------------------------------------------------------

masses = st.lists(st.one_of(st.just(0.0), st.floats(1e-3, 1.0)), min_size=1, max_size=7).filter(
    lambda w: sum(w) > 0)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(wa=masses, wb=masses, seed=st.integers(0, 2 ** 16), rel=st.sampled_from([1e-3, 1e-2, 0.1, 1.0, 10.0]),
       scale=st.sampled_from([1e-3, 1.0, 1e3]), batch=st.integers(1, 3))
def test_fuzz_quadratic_ot(wa, wb, seed, rel, scale, batch):
    g = torch.Generator().manual_seed(seed)
    a = torch.tensor(wa, dtype=F64)
    b = torch.tensor(wb, dtype=F64)
    a, b = a / a.sum(), b / b.sum()
    C = (torch.randn(batch, len(wa), len(wb), generator=g, dtype=F64) * scale)
    gamma = rel * float(C.abs().max() or 1.0)
    q = ot.quadratic_ot(a, b, C, gamma * len(wa) * len(wb), tol=1e-8)
    assert bool(torch.isfinite(q.plan).all()) and float(q.plan.min()) >= 0
    assert float(q.plan[:, a == 0].abs().sum()) == 0
    q_err = torch.maximum((q.plan.sum(-1) - a).abs().sum(-1), (q.plan.sum(-2) - b).abs().sum(-1))
    assert bool((q_err[q.converged] <= 1e-8 * (1 + 1e-6)).all())
    if rel >= 1.0:
        assert bool(q.converged.all())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_quadratic_ot_on_cuda(dtype):
    a, b, C = random_problem(300, 200, seed=14, dtype=dtype)
    q = ot.quadratic_ot(a.cuda(), b.cuda(), C.cuda(), 1.0)
    assert q.plan.is_cuda and bool(torch.isfinite(q.plan).all())
