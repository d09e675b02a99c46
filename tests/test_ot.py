"""Tests of wviz.ot against POT, scipy and the math (KKT conditions, bounds), plus bad input and fuzzing."""
from __future__ import annotations

import math
import warnings

import numpy as np
import ot as pot
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog
from scipy.spatial.distance import cdist

from wviz import ot
from wviz.ot import entropic, scaling

F64 = torch.float64


def random_problem(n, m, seed=0, dtype=F64, uniform=False):
    """Random masses (or uniform ones) and a squared-Euclidean cost between points in [0, 1]^2, max 1."""
    g = torch.Generator().manual_seed(seed)
    x, y = torch.rand(n, 2, generator=g, dtype=dtype), torch.rand(m, 2, generator=g, dtype=dtype)
    C = ot.cost_matrix(x, y)
    C = C / C.max()
    if uniform:
        a, b = torch.full((n,), 1 / n, dtype=dtype), torch.full((m,), 1 / m, dtype=dtype)
    else:
        a, b = torch.rand(n, generator=g, dtype=dtype) + 0.1, torch.rand(m, generator=g, dtype=dtype) + 0.1
        a, b = a / a.sum(), b / b.sum()
    return a, b, C


def separated_clouds(n, dtype=F64):
    """Two clouds 10 apart: min cost / gamma is huge, where POT's kernel solver returns an all-zero plan."""
    g = torch.Generator().manual_seed(1)
    x = torch.rand(n, 2, generator=g, dtype=dtype)
    y = torch.rand(n, 2, generator=g, dtype=dtype) + 10
    C = ot.cost_matrix(x, y)
    a = torch.full((n,), 1 / n, dtype=dtype)
    return a, a.clone(), C


def l1_errors(P, a, b):
    return float((P.sum(-1) - a).abs().sum()), float((P.sum(-2) - b).abs().sum())


def pot_log(a, b, C, gamma):
    """POT's log-domain Sinkhorn run to (near) machine precision."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pot.bregman.sinkhorn_log(a.numpy(), b.numpy(), C.numpy(), gamma, stopThr=1e-15, numItermax=100000)


# ---- cost matrices --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind,metric", [("sqeuclidean", "sqeuclidean"), ("euclidean", "euclidean"),
                                         ("l1", "cityblock"), ("cosine", "cosine")])
def test_cost_matrix_matches_scipy(kind, metric):
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(7, 5, generator=g, dtype=F64), torch.randn(9, 5, generator=g, dtype=F64)
    C = ot.cost_matrix(x, y, kind)
    assert C.shape == (7, 9)
    np.testing.assert_allclose(C.numpy(), cdist(x.numpy(), y.numpy(), metric), rtol=1e-10, atol=1e-12)


def test_cost_matrix_dot_and_batches():
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(3, 4, 6, 2, generator=g, dtype=F64), torch.randn(6, 2, generator=g, dtype=F64)
    C = ot.cost_matrix(x, y, "dot")
    assert C.shape == (3, 4, 6, 6)
    torch.testing.assert_close(C, -(x @ y.T))
    Cb = ot.cost_matrix(x, y)
    torch.testing.assert_close(Cb[2, 1], ot.cost_matrix(x[2, 1], y))


def test_cost_matrix_bad_input():
    x = torch.zeros(3, 2)
    with pytest.raises(ValueError, match="unknown cost kind"):
        ot.cost_matrix(x, x, "manhattan")
    with pytest.raises(ValueError, match="same dimension"):
        ot.cost_matrix(x, torch.zeros(3, 4))
    with pytest.raises(ValueError, match="non-zero vectors"):
        ot.cost_matrix(x, x, "cosine")
    with pytest.raises(ValueError, match="NaN or inf"):
        ot.cost_matrix(torch.tensor([[float("nan"), 0.0]]), x)


# ---- Sinkhorn against POT and the math -----------------------------------------------------------------------------

@pytest.mark.parametrize("gamma", [1.0, 0.1, 0.02])
@pytest.mark.parametrize("n,m,seed", [(12, 17, 0), (25, 9, 1)])
def test_sinkhorn_matches_pot_sinkhorn_log(n, m, seed, gamma):
    a, b, C = random_problem(n, m, seed)
    res = ot.sinkhorn(a, b, C, gamma, tol=1e-13, max_iter=50000)
    assert bool(res.converged)
    np.testing.assert_allclose(res.plan.numpy(), pot_log(a, b, C, gamma), atol=1e-8, rtol=0)
    # the plan is the log-domain plan of the returned potentials
    torch.testing.assert_close(res.plan, torch.exp((res.f[:, None] + res.g[None, :] - C) / gamma),
                               rtol=1e-9, atol=1e-300)
    P = res.plan
    H = -(P * P.log()).sum()
    assert float(res.cost) == pytest.approx(float((C * P).sum()), rel=1e-12)
    assert float(res.reg_cost) == pytest.approx(float((C * P).sum() - gamma * H), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("rel", [5e-4, 2e-4])
def test_epsilon_scaling_matches_pot_sinkhorn_log(rel):
    """Below 1e-3 max C the solver runs several epsilon-scaling stages (gamma_k = 10^k gamma from _EPS_START times
    the cost range down); its final plan must still be the entropic plan for gamma itself. POT's plain log-domain
    Sinkhorn (on torch tensors, one thread: 10^4 iterations take about two seconds) is the reference."""
    a, b, C = random_problem(100, 90, seed=1)
    gamma = rel * float(C.max())
    assert 10 * gamma < entropic._EPS_START * float(C.max() - C.min())   # at least two stages
    res = ot.sinkhorn(a, b, C, gamma, tol=1e-12, max_iter=50000)
    assert bool(res.converged)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # 10^4 small iterations: a second thread costs ten times the CPU time
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref, log = pot.bregman.sinkhorn_log(a, b, C, gamma, stopThr=1e-12, numItermax=50000, log=True)
    finally:
        torch.set_num_threads(threads)
    assert log["niter"] < 50000 - 1   # POT converged too
    torch.testing.assert_close(res.plan, ref, atol=1e-9, rtol=0)


@pytest.mark.parametrize("gamma", [0.05, 0.01, 0.001])
@pytest.mark.parametrize("n", [64, 200])
def test_sinkhorn_marginals_within_tol(n, gamma):
    a, b, C = random_problem(n, n + 7, seed=n, uniform=False)
    res = ot.sinkhorn(a, b, C, gamma, tol=1e-6)
    assert bool(res.converged)
    err_a, err_b = l1_errors(res.plan, a, b)
    assert max(err_a, err_b) <= 1e-6
    assert float(res.marginal_error) == pytest.approx(max(err_a, err_b), rel=1e-6, abs=1e-15)
    assert res.history.shape[1] == 2 and res.history[-1, 1] <= 1e-6
    assert res.n_iter == int(res.history[-1, 0])


def test_sinkhorn_options_agree():
    """Epsilon scaling, fixed omega, plain Sinkhorn and CPU check intervals reach the same plan."""
    a, b, C = random_problem(40, 30, seed=3)
    ref = pot_log(a, b, C, 0.01)
    for kw in (dict(), dict(eps_scaling=False), dict(omega=1.0), dict(omega=1.5), dict(check_every=7)):
        res = ot.sinkhorn(a, b, C, 0.01, tol=1e-12, max_iter=50000, **kw)
        assert bool(res.converged), kw
        np.testing.assert_allclose(res.plan.numpy(), ref, atol=1e-8, rtol=0, err_msg=str(kw))


def test_entropic_cost_approaches_exact_cost():
    """<C, P_gamma> decreases with gamma to the exact cost W, with 0 <= <C, P_gamma> - W <= gamma log(n m)."""
    n, m = 30, 40
    a, b, C = random_problem(n, m, seed=5)
    exact = float(ot.emd(a, b, C).cost)
    previous = math.inf
    for gamma in [1.0, 0.3, 0.1, 0.03, 0.01, 3e-3, 1e-3]:
        cost = float(ot.sinkhorn(a, b, C, gamma, tol=1e-10, max_iter=50000).cost)
        assert cost <= previous + 1e-9
        assert -1e-9 <= cost - exact <= gamma * (math.log(n) + math.log(m))
        previous = cost
    assert previous - exact < 0.01 * exact


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("problem", ["random", "separated"])
def test_no_nan_over_gamma_sweep(dtype, problem):
    a, b, C = random_problem(30, 30, seed=2, dtype=dtype) if problem == "random" else separated_clouds(30, dtype)
    scale = float(C.abs().max())
    for rel in [1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0]:
        res = ot.sinkhorn(a, b, C, rel * scale, max_iter=3000)
        for t in (res.plan, res.cost, res.reg_cost, res.marginal_error, res.f, res.g):
            assert bool(torch.isfinite(t).all()), (rel, t)
        assert float(res.plan.min()) >= 0
        err = max(l1_errors(res.plan.double(), a.double(), b.double()))
        if bool(res.converged):
            assert err <= 1e-6 + 1e-5 * (dtype == torch.float32)
        elif rel >= 1e-2 or dtype == torch.float64 and rel >= 1e-3:
            pytest.fail(f"did not converge at gamma = {rel} max C ({dtype}, {problem})")
        if dtype == torch.float64 and rel >= 1e-3:
            assert bool(res.converged)


def test_separated_clouds_where_pot_kernel_returns_zeros():
    """The silent failure of OT-NOTES: POT's kernel solver returns an all-zero plan; wviz solves it."""
    a, b, C = separated_clouds(20)
    gamma = 5e-4 * float(C.max())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        P_pot = pot.sinkhorn(a.numpy(), b.numpy(), C.numpy(), gamma)
    assert float(np.nan_to_num(P_pot).sum()) < 1e-3   # POT's failure mode (the reason for this test)
    res = ot.sinkhorn(a, b, C, gamma)
    assert bool(res.converged) and max(l1_errors(res.plan, a, b)) <= 1e-6


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


def test_one_sided_is_softmax_scaled_by_a():
    """001 eqs. (4)-(5): with rows constrained only, P_i = a_i softmax(-C_i / gamma)."""
    a, _, C = random_problem(6, 9, seed=4)
    for gamma in (0.01, 0.3, 5.0):
        res = ot.sinkhorn(a, None, C, gamma)
        torch.testing.assert_close(res.plan, a[:, None] * torch.softmax(-C / gamma, dim=-1), rtol=1e-12, atol=0)
        assert bool(res.converged) and float(res.marginal_error) < 1e-14
        torch.testing.assert_close(res.plan, torch.exp((res.f[:, None] - C) / gamma), rtol=1e-10, atol=0)
    # attention: C_j = -<q, k_j>, a = 1 gives softmax(<q, k> / tau)
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(4, 8, generator=g, dtype=F64), torch.randn(5, 8, generator=g, dtype=F64)
    res = ot.sinkhorn(torch.ones(4, dtype=F64), None, ot.cost_matrix(q, k, "dot"), 8 ** 0.5)
    torch.testing.assert_close(res.plan, torch.softmax(q @ k.T / 8 ** 0.5, dim=-1))


def test_zero_masses_are_masked():
    """Zero entries in a or b get empty rows / columns, no NaN (POT issue 552), and the rest is solved exactly."""
    a, b, C = random_problem(10, 8, seed=6)
    a[[2, 7]] = 0
    b[0] = 0
    a, b = a / a.sum(), b / b.sum()
    res = ot.sinkhorn(a, b, C, 0.05, tol=1e-12)
    assert bool(res.converged) and bool(torch.isfinite(res.plan).all())
    assert float(res.plan[[2, 7]].abs().max()) == 0 and float(res.plan[:, 0].abs().max()) == 0
    keep_a, keep_b = a > 0, b > 0
    sub = ot.sinkhorn(a[keep_a], b[keep_b], C[keep_a][:, keep_b], 0.05, tol=1e-12)
    torch.testing.assert_close(res.plan[keep_a][:, keep_b], sub.plan, atol=1e-11, rtol=0)
    assert bool(torch.isinf(res.f[~keep_a]).all()) and bool(torch.isfinite(res.f[keep_a]).all())
    assert math.isfinite(float(res.reg_cost))
    # with over-relaxation and epsilon scaling too
    res2 = ot.sinkhorn(a, b, C, 1e-3, tol=1e-9)
    assert bool(res2.converged) and bool(torch.isfinite(res2.plan).all())


def test_warm_start_and_record_plans():
    a, b, C = random_problem(50, 50, seed=7)
    cold = ot.sinkhorn(a, b, C, 2e-3, tol=1e-9)
    prev = ot.sinkhorn(a, b, C, 4e-3, tol=1e-9)
    warm = ot.sinkhorn(a, b, C, 2e-3, tol=1e-9, init=prev)
    assert bool(warm.converged) and warm.gamma == 2e-3
    torch.testing.assert_close(warm.plan, cold.plan, atol=1e-9, rtol=0)
    pair = ot.sinkhorn(a, b, C, 2e-3, tol=1e-9, init=(cold.f, cold.g), check_every=1)
    assert pair.n_iter <= 3
    rec = ot.sinkhorn(a, b, C, 0.05, record_plans=1)
    its = [it for it, _ in rec.plans]
    assert its[0] == 0 and its == sorted(its) and its[-1] == rec.n_iter
    torch.testing.assert_close(rec.plans[-1][1], rec.plan)
    assert rec.history.shape == (rec.n_iter, 2)
    assert ot.sinkhorn(a, b, C, 0.05).plans == ()


def test_not_converged_is_reported():
    a, b, C = random_problem(40, 40, seed=8)
    res = ot.sinkhorn(a, b, C, 1e-3, max_iter=5)
    assert not bool(res.converged) and float(res.marginal_error) > 1e-6
    assert bool(torch.isfinite(res.plan).all())


def test_float32_interactive_size():
    a, b, C = random_problem(256, 256, seed=9, dtype=torch.float32, uniform=True)
    res = ot.sinkhorn(a, b, C, 0.01)
    assert res.plan.dtype == torch.float32 and bool(torch.isfinite(res.plan).all())
    assert float(res.marginal_error) < 1e-5


# ---- exact OT -------------------------------------------------------------------------------------------------------

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


# ---- quadratic OT ---------------------------------------------------------------------------------------------------

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


def test_bad_options_raise_value_error():
    a, b, C = random_problem(4, 3)
    for kw in (dict(tol=0), dict(max_iter=0), dict(omega=2.5), dict(check_every=0)):
        with pytest.raises(ValueError):
            ot.sinkhorn(a, b, C, 0.1, **kw)
    with pytest.raises(ValueError, match="init"):
        ot.sinkhorn(a, b, C, 0.1, init=(torch.zeros(5), torch.zeros(3)))
    with pytest.raises(ValueError, match="total mass"):
        ot.sinkhorn(a * 0, None, C, 0.1)


def test_nearly_equal_totals_are_accepted():
    a, b, C = random_problem(6, 5, seed=3)
    res = ot.sinkhorn(a, b * (1 + 1e-9), C, 0.1, tol=1e-10)
    assert bool(res.converged)


# ---- fuzz -----------------------------------------------------------------------------------------------------------

masses = st.lists(st.one_of(st.just(0.0), st.floats(1e-3, 1.0)), min_size=1, max_size=7).filter(
    lambda w: sum(w) > 0)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(wa=masses, wb=masses, seed=st.integers(0, 2 ** 16), rel=st.sampled_from([1e-3, 1e-2, 0.1, 1.0, 10.0]),
       scale=st.sampled_from([1e-3, 1.0, 1e3]), batch=st.integers(1, 3))
def test_fuzz_sinkhorn_and_quadratic(wa, wb, seed, rel, scale, batch):
    g = torch.Generator().manual_seed(seed)
    a = torch.tensor(wa, dtype=F64)
    b = torch.tensor(wb, dtype=F64)
    a, b = a / a.sum(), b / b.sum()
    C = (torch.randn(batch, len(wa), len(wb), generator=g, dtype=F64) * scale)
    gamma = rel * float(C.abs().max() or 1.0)
    res = ot.sinkhorn(a, b, C, gamma, tol=1e-8, max_iter=3000)
    assert res.plan.shape == (batch, len(wa), len(wb))
    assert bool(torch.isfinite(res.plan).all()) and float(res.plan.min()) >= 0
    assert float(res.plan[:, a == 0].abs().sum()) == 0 and float(res.plan[:, :, b == 0].abs().sum()) == 0
    err = torch.maximum((res.plan.sum(-1) - a).abs().sum(-1), (res.plan.sum(-2) - b).abs().sum(-1))
    torch.testing.assert_close(err, res.marginal_error, rtol=1e-6, atol=1e-15)
    assert bool((err[res.converged] <= 1e-8 * (1 + 1e-6)).all())
    # Sinkhorn's rate on an n x m problem can be as slow as 1 - exp(-(C_ik + C_jl - C_il - C_jk) / gamma): this
    # test found a 2 x 2 cost at gamma = 0.1 max|C| where plain Sinkhorn needs > 10^5 iterations. Above max|C|
    # every instance converges quickly; below, only honesty (converged => error <= tol) is required
    if rel >= 1.0:
        assert bool(res.converged.all())
    q = ot.quadratic_ot(a, b, C, gamma * len(wa) * len(wb), tol=1e-8)
    assert bool(torch.isfinite(q.plan).all()) and float(q.plan.min()) >= 0
    assert float(q.plan[:, a == 0].abs().sum()) == 0
    q_err = torch.maximum((q.plan.sum(-1) - a).abs().sum(-1), (q.plan.sum(-2) - b).abs().sum(-1))
    assert bool((q_err[q.converged] <= 1e-8 * (1 + 1e-6)).all())
    if rel >= 1.0:
        assert bool(q.converged.all())


# ---- CUDA -----------------------------------------------------------------------------------------------------------

@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_cuda_matches_cpu(dtype):
    a, b, C = random_problem(300, 200, seed=14, dtype=dtype)
    cpu = ot.sinkhorn(a, b, C, 0.01)
    gpu = ot.sinkhorn(a.cuda(), b.cuda(), C.cuda(), 0.01)
    assert gpu.plan.is_cuda and bool(gpu.converged)
    torch.testing.assert_close(gpu.plan.cpu(), cpu.plan, atol=1e-6 if dtype == torch.float64 else 1e-5, rtol=0)
    q = ot.quadratic_ot(a.cuda(), b.cuda(), C.cuda(), 1.0)
    assert q.plan.is_cuda and bool(torch.isfinite(q.plan).all())
    e = ot.emd(a.cuda(), b.cuda(), C.cuda())
    assert e.plan.is_cuda and bool(e.converged)


@pytest.mark.parametrize("iters", [1, 2, 5])
def test_plain_iterations_with_a_zero_mass_are_the_textbook_iterations_on_the_support(iters):
    """omega = 1 without epsilon scaling is Sinkhorn's iteration, step for step, also when a point has no mass:
    that point's row and column stay 0 (no 0 / 0), and exactly max_iter iterations are taken."""
    a, b, C = random_problem(5, 4, seed=3)
    a = torch.cat([a[:4], a.new_zeros(1)])
    a = a / a.sum()
    res = ot.sinkhorn(a, b, C, 0.5, tol=1e-14, max_iter=iters, eps_scaling=False, omega=1.0)
    K = torch.exp(-C[:4] / 0.5)
    u, v = torch.ones(4, dtype=F64), torch.ones(4, dtype=F64)
    for _ in range(iters):
        u = a[:4] / (K @ v)
        v = b / (K.T @ u)
    assert res.n_iter == iters
    torch.testing.assert_close(res.plan[:4], u[:, None] * K * v[None], rtol=1e-12, atol=1e-15)
    assert torch.equal(res.plan[4], torch.zeros(4, dtype=F64))


# ---- the lean path (one problem on the CPU, wviz.ot.lean) ---------------------------------------------------------

def _general(monkeypatch, *args, **kw):
    """sinkhorn through the general path (wviz.ot.scaling.Scalings), the lean one switched off."""
    with monkeypatch.context() as m:
        m.setattr(entropic, "use_lean", lambda C, record: False)
        return ot.sinkhorn(*args, **kw)


LEAN_CASES = [(60, 50, 0.05, False), (120, 100, 0.01, False),
              (80, 90, 1e-3, False),                          # a normalised kernel (cost range / gamma > CLAMP)
              (40, 30, 0.02, True), (64, 64, 2e-4, True),     # zero masses; 2e-4: two stages of epsilon scaling
              (520, 512, 0.01, False), (512, 600, 2e-3, True)]   # float32 start


@pytest.mark.parametrize("n,m,gamma,zeros", LEAN_CASES)
def test_lean_path_equals_the_general_path(n, m, gamma, zeros, monkeypatch):
    """The lean path solves the same problem: at a tight tolerance its plan, costs and potentials (up to the
    constant that f + c, g - c leaves free) equal the general path's, and its marginals are within tol."""
    a, b, C = random_problem(n, m, seed=n)
    if zeros:
        a[[1, n // 2]] = 0
        b[[0]] = 0
        a, b = a / a.sum(), b / b.sum()
    lean = ot.sinkhorn(a, b, C, gamma, tol=1e-12, max_iter=50000)
    gen = _general(monkeypatch, a, b, C, gamma, tol=1e-12, max_iter=50000)
    assert bool(lean.converged) and bool(gen.converged)
    assert lean.plan.dtype == F64 and lean.f.dtype == F64 and lean.marginal_error.dtype == F64
    torch.testing.assert_close(lean.plan, gen.plan, rtol=0, atol=1e-9 * float(gen.plan.max()))
    for field in ("cost", "reg_cost"):
        torch.testing.assert_close(getattr(lean, field), getattr(gen, field), rtol=1e-9, atol=1e-12)
    keep_a, keep_b = a > 0, b > 0
    fg = lambda r: r.f[keep_a][:, None] + r.g[keep_b][None]
    torch.testing.assert_close(fg(lean), fg(gen), rtol=0, atol=1e-9)
    assert max(l1_errors(lean.plan, a, b)) <= 1e-12
    assert float(lean.marginal_error) == pytest.approx(max(l1_errors(lean.plan, a, b)), abs=1e-14)
    # zero masses: empty rows and columns, potentials -inf there and finite elsewhere
    assert float(lean.plan[~keep_a].abs().sum()) == 0 and float(lean.plan[:, ~keep_b].abs().sum()) == 0
    assert bool(torch.isinf(lean.f[~keep_a]).all()) and bool(torch.isfinite(lean.f[keep_a]).all())
    # the potentials give the plan: P_ij = exp((f_i + g_j - C_ij) / gamma), up to the entries whose kernel sat at
    # the clamp (at most exp(-CLAMP + 2 ABSORB) = e^-500 each, wviz.ot.scaling), as on the general path
    torch.testing.assert_close(lean.plan, torch.exp((lean.f[:, None] + lean.g[None, :] - C) / gamma),
                               rtol=1e-9, atol=1e-200)


@pytest.mark.parametrize("gamma", [0.05, 0.01, 1e-3])
def test_lean_path_at_the_default_tolerance(gamma, monkeypatch):
    """At the default tol the lean path (float32 start, float64 finish) meets tol with float64 marginals, and its
    plan is the general path's up to that tolerance."""
    a, b, C = random_problem(520, 512, seed=4, uniform=True)
    lean = ot.sinkhorn(a, b, C, gamma)
    gen = _general(monkeypatch, a, b, C, gamma)
    assert bool(lean.converged) and max(l1_errors(lean.plan, a, b)) <= 1e-6
    assert float(lean.marginal_error) == pytest.approx(max(l1_errors(lean.plan, a, b)), rel=1e-9, abs=1e-15)
    assert float((lean.plan - gen.plan).abs().sum()) <= 4e-6
    torch.testing.assert_close(lean.plan, torch.exp((lean.f[:, None] + lean.g[None, :] - C) / gamma),
                               rtol=1e-9, atol=1e-200)
    # warm-starting from the potentials: already converged, nothing to do in float32
    again = ot.sinkhorn(a, b, C, gamma, init=lean, check_every=1)
    assert again.n_iter <= 2 and bool(again.converged)


def test_lean_float32_start_hands_over_to_float64(monkeypatch):
    """A float64 problem of at least 512 x 512 starts its stages on the float32 copy of the kernel and finishes in
    float64; a fixed omega (exact iterations asked for), a float32 problem and a smaller one never switch."""
    from wviz.ot import lean
    seen = []
    real = lean.LeanScalings.iterate
    monkeypatch.setattr(lean.LeanScalings, "iterate", lambda self, steps: seen.append(self.low) or real(self, steps))
    assert lean._LOW_SIZE == 512 * 512
    a, b, C = random_problem(512, 512, seed=2, uniform=True)
    res = ot.sinkhorn(a, b, C, 0.01)
    assert bool(res.converged) and seen[0] and not seen[-1] and seen == sorted(seen, reverse=True)
    a, b, C = a[:511], b[:511], C[:511, :511]   # below _LOW_SIZE entries
    a, b = a / a.sum(), b / b.sum()
    for kw, args in ((dict(omega=1.5), (a, b, C)), ({}, (a.float(), b.float(), C.float())), ({}, (a, b, C))):
        seen.clear()
        assert bool(ot.sinkhorn(*args, 0.01, **kw).converged) and not any(seen)


def test_lean_dispatch_rule(monkeypatch):
    """use_lean: a single problem (B = 1) on the CPU without record_plans; sinkhorn builds LeanScalings exactly
    then, Scalings for batches and recorded runs."""
    from wviz.ot import lean, scaling
    C = torch.zeros(1, 3, 4, dtype=F64)
    assert lean.use_lean(C, 0)
    assert not lean.use_lean(torch.zeros(2, 3, 4, dtype=F64), 0)
    assert not lean.use_lean(C, 1)
    assert not lean.use_lean(torch.zeros(1, 3, 4, dtype=F64, device="meta"), 0)
    built = []
    for cls in (lean.LeanScalings, scaling.Scalings):
        real = cls.__init__
        monkeypatch.setattr(cls, "__init__", lambda self, *a, real=real, cls=cls, **k: built.append(cls.__name__)
                            or real(self, *a, **k))
    a, b, C = random_problem(12, 10, seed=1)
    for args, kw, path in [((a, b, C), {}, "LeanScalings"), ((a[None], b[None], C[None]), {}, "LeanScalings"),
                           ((a, b, C.T.contiguous().T), {}, "LeanScalings"),
                           ((torch.stack([a, a]), b, C), {}, "Scalings"),
                           ((a, b, C), dict(record_plans=2), "Scalings")]:
        built.clear()
        res = ot.sinkhorn(*args, 0.05, **kw)
        assert built == [path] and bool(res.converged.all()), (path, built)
    # a cost that requires grad, a non-contiguous cost: the same plan
    Cg = C.clone().requires_grad_()
    torch.testing.assert_close(ot.sinkhorn(a, b, Cg, 0.05).plan, ot.sinkhorn(a, b, C, 0.05).plan)
    torch.testing.assert_close(ot.sinkhorn(a, b, C.T.contiguous().T, 0.05).plan, ot.sinkhorn(a, b, C, 0.05).plan)


def test_lean_path_runs_numpy_blas_on_one_thread_and_restores_it(monkeypatch):
    """While lean solves run (nested or concurrent ones too), numpy's BLAS has one thread; the caller's setting
    comes back when the last one ends."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from wviz.ot import lean

    def blas_threads():
        return [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]

    before = blas_threads()
    seen = []
    real = lean.LeanScalings.iterate
    monkeypatch.setattr(lean.LeanScalings, "iterate", lambda self, steps: seen.append(blas_threads())
                        or real(self, steps))
    a, b, C = random_problem(30, 20, seed=3)
    assert bool(ot.sinkhorn(a, b, C, 0.05).converged)
    assert seen and all(set(s) <= {1} for s in seen) and blas_threads() == before
    with lean.one_blas_thread():
        with lean.one_blas_thread():
            assert set(blas_threads()) <= {1}
        assert set(blas_threads()) <= {1}
    assert blas_threads() == before
