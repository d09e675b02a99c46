"""wviz.ot.entropic: sinkhorn against POT and the math (marginals, the limit gamma -> 0, the one-sided closed form),
its options, warm starts and recorded plans, its stopping rule (_Run.stop), and fuzzing."""
from __future__ import annotations

import math
import warnings

import numpy as np
import ot as pot
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.ot_problems import F64, l1_errors, pot_log, random_problem, separated_clouds
from wviz import ot
from wviz.ot import entropic
from wviz.ot.relaxation import OverRelaxation


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


def plain_sinkhorn_plan(a, b, C, gamma, k):
    """k plain Sinkhorn iterations (u = a / K v, then v = b / K^T u) from v = 1, in numpy: the textbook loop."""
    K = np.exp(-C.numpy() / gamma)
    v = np.ones(K.shape[-1])
    for _ in range(k):
        u = a.numpy() / (K @ v)
        v = b.numpy() / (K.T @ u)
    return u[:, None] * K * v[None, :]


@pytest.mark.parametrize("batch", [False, True])
def test_n_iter_runs_exactly_that_many_plain_iterations(batch):
    """n_iter=k (omega=1) is the plan of k textbook Sinkhorn iterations, also where tol would have stopped it earlier
    (an easy problem) and where it has not converged (k = 2, reported so); one problem (the lean loop) or a batch."""
    a, b, C = random_problem(9, 7, seed=3)
    for k, gamma in ((200, 0.5), (2, 0.05)):
        res = ot.sinkhorn(a.expand(2, -1) if batch else a, b, C, gamma, n_iter=k, omega=1.0)
        plans = res.plan if batch else res.plan[None]
        assert res.n_iter == k and bool(res.converged.all()) == (k == 200)
        for P in plans:
            np.testing.assert_allclose(P.numpy(), plain_sinkhorn_plan(a, b, C, gamma, k), rtol=0, atol=1e-13)
    assert ot.sinkhorn(a, b, C, 0.5).n_iter < 200   # tol alone stops that problem far earlier
    with pytest.raises(ValueError, match="n_iter must be a positive integer"):
        ot.sinkhorn(a, b, C, 0.5, n_iter=0)


def test_float32_interactive_size():
    a, b, C = random_problem(256, 256, seed=9, dtype=torch.float32, uniform=True)
    res = ot.sinkhorn(a, b, C, 0.01)
    assert res.plan.dtype == torch.float32 and bool(torch.isfinite(res.plan).all())
    assert float(res.marginal_error) < 1e-5


# ---- the stopping rule (_Run.stop) and overflow recovery ------------------------------------------------------------

def _run(tol=1e-6, max_iter=100, dtype=F64):
    """A _Run as sinkhorn makes it, for a 3 x 3 problem of dtype."""
    return entropic._Run(tol, max_iter, 1, 0, OverRelaxation(1, None), torch.zeros(1, 3, 3, dtype=dtype))


def test_stopping_rule_stage_tolerances():
    """A stage stops at its tolerance: tol at the final gamma, max(tol, _STAGE_TOL) before it (it only hands a warm
    start over)."""
    run = _run(tol=1e-6)
    run.start_stage(final=False)
    assert run.stop(0.9 * entropic._STAGE_TOL) == "tol" and run.stop(1.1 * entropic._STAGE_TOL) is None
    run.start_stage(final=True)
    assert run.stop(1e-6) == "tol" and run.stop(2e-6) is None
    run = _run(tol=0.5)   # a tol above _STAGE_TOL holds in every stage
    run.start_stage(final=False)
    assert run.stop(0.4) == "tol" and run.stop(0.6) is None


def test_stopping_rule_ends_the_run_at_max_iter_and_after_repeated_overflows():
    """max_iter counts the iterations of all stages; more than _MAX_FAILURES overflow recoveries end the run; both
    whatever the error, and also asked without one (after a stage, after an overflow)."""
    run = _run(max_iter=100)
    run.start_stage(final=True)
    run.it = 99
    assert run.stop(1.0) is None and run.stop() is None
    run.it = 100
    assert run.stop(1.0) == "max_iter" and run.stop() == "max_iter"
    run.it = 10
    run.failures = entropic._MAX_FAILURES
    assert run.stop(1.0) is None and run.stop() is None
    run.failures += 1
    assert run.stop() == "overflow" and run.stop(0.0) == "overflow"


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_stopping_rule_rounding_floor(dtype):
    """At the final gamma an error below the rounding floor, 1000 eps of the dtype, that has not fallen by 10 % in
    _FLOOR_ITERS iterations ends the stage; one that fell, one above the floor, or one too recent does not."""
    tiny = 1000 * torch.finfo(dtype).eps
    run = _run(tol=1e-30, max_iter=10 ** 6, dtype=dtype)
    run.start_stage(final=True)
    assert run.tiny == tiny
    run.it = 10
    assert run.stop(0.5 * tiny) is None
    run.progress(0.5 * tiny)   # the best error so far, at iteration 10
    run.it = 10 + entropic._FLOOR_ITERS - 1
    assert run.stop(0.5 * tiny) is None
    run.it = 10 + entropic._FLOOR_ITERS
    assert run.stop(0.5 * tiny) == "floor" and run.stop(0.46 * tiny) == "floor"
    assert run.stop(0.44 * tiny) is None   # 10 % below the best: progress
    assert run.stop(2 * tiny) is None      # above the floor
    run.progress(0.44 * tiny)
    assert run.best == 0.44 * tiny and run.stop(0.44 * tiny) is None   # the clock starts again


@pytest.mark.parametrize("batch", [1, 2])
def test_float32_below_its_rounding_floor_stops_there_not_converged(batch):
    """A tol that float32 cannot reach: the run stops at the floor long before max_iter, honestly not converged,
    with its marginal error below the floor."""
    a, b, C = random_problem(40, 30, seed=2, dtype=torch.float32)
    res = ot.sinkhorn(a.expand(batch, -1), b, C, 0.05, tol=1e-10, max_iter=5000)
    assert not bool(res.converged.any()) and res.n_iter < 500
    assert float(res.marginal_error.max()) < 1000 * torch.finfo(torch.float32).eps


@pytest.mark.parametrize("lean", [True, False])
def test_an_overflow_is_recovered_and_repeated_ones_end_the_run(lean, monkeypatch):
    """An inf in the scalings (an overflow the bounds did not prevent): the run goes back to the last good
    scalings and still converges to the same plan; if it keeps coming back, the run gives up after _MAX_FAILURES
    recoveries and returns the last good plan, finite and not converged."""
    from wviz.ot import lean as lean_module, scaling
    cls = lean_module.LeanScalings if lean else scaling.Scalings
    a, b, C = random_problem(30, 20, seed=5)
    a, b, C = (a, b, C) if lean else (a[None].expand(2, -1), b, C)
    clean = ot.sinkhorn(a, b, C, 0.01, tol=1e-10)
    calls, poison = [], {"from": 3, "every": False}
    real = cls.iterate

    def iterate(self, steps):
        real(self, steps)
        calls.append(steps)
        if len(calls) == poison["from"] or (poison["every"] and len(calls) > poison["from"]):
            if lean:
                self.u[0] = np.inf
            else:
                self.u = self.u.clone()
                self.u[0, 0, 0] = torch.inf

    recoveries = []
    real_recover = entropic._recover
    monkeypatch.setattr(cls, "iterate", iterate)
    monkeypatch.setattr(entropic, "_recover", lambda *args: recoveries.append(1) or real_recover(*args))
    res = ot.sinkhorn(a, b, C, 0.01, tol=1e-10)
    assert len(recoveries) == 1 and bool(res.converged.all())
    torch.testing.assert_close(res.plan, clean.plan, atol=1e-9, rtol=0)
    calls.clear(), recoveries.clear()
    poison["every"] = True
    res = ot.sinkhorn(a, b, C, 0.01, tol=1e-10)
    assert len(recoveries) == entropic._MAX_FAILURES + 1 and not bool(res.converged.any())
    assert bool(torch.isfinite(res.plan).all())
    # the result says honestly how far its plan is from U(a, b)
    P = res.plan
    err = torch.maximum((P.sum(-1) - a).abs().sum(-1), (P.sum(-2) - b).abs().sum(-1))
    torch.testing.assert_close(res.marginal_error, err, rtol=1e-9, atol=0)


# ---- options ------------------------------------------------------------------------------------------------------

def test_bad_options_raise_value_error():
    a, b, C = random_problem(4, 3)
    for kw in (dict(tol=0), dict(max_iter=0), dict(omega=2.5), dict(check_every=0)):
        with pytest.raises(ValueError):
            ot.sinkhorn(a, b, C, 0.1, **kw)
    with pytest.raises(ValueError, match="init"):
        ot.sinkhorn(a, b, C, 0.1, init=(torch.zeros(5), torch.zeros(3)))
    with pytest.raises(ValueError, match="total mass"):
        ot.sinkhorn(a * 0, None, C, 0.1)


# ---- fuzz -----------------------------------------------------------------------------------------------------------

masses = st.lists(st.one_of(st.just(0.0), st.floats(1e-3, 1.0)), min_size=1, max_size=7).filter(
    lambda w: sum(w) > 0)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(wa=masses, wb=masses, seed=st.integers(0, 2 ** 16), rel=st.sampled_from([1e-3, 1e-2, 0.1, 1.0, 10.0]),
       scale=st.sampled_from([1e-3, 1.0, 1e3]), batch=st.integers(1, 3))
def test_fuzz_sinkhorn(wa, wb, seed, rel, scale, batch):
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


# ---- CUDA -----------------------------------------------------------------------------------------------------------

@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("route", [False, True])
def test_sinkhorn_cuda_matches_cpu(dtype, route):
    """The batch loop on CUDA (route=False), and the same small problem routed to the CPU (the default), give the
    CPU's plan, on the GPU."""
    a, b, C = random_problem(300, 200, seed=14, dtype=dtype)
    cpu = ot.sinkhorn(a, b, C, 0.01)
    gpu = ot.sinkhorn(a.cuda(), b.cuda(), C.cuda(), 0.01, route=route)
    assert gpu.plan.is_cuda and gpu.f.is_cuda and bool(gpu.converged)
    assert gpu.solved_on == ("cpu" if route else "cuda")
    torch.testing.assert_close(gpu.plan.cpu(), cpu.plan, atol=1e-6 if dtype == torch.float64 else 1e-5, rtol=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
def test_cuda_routes_only_small_problems():
    """CPU_ROUTE_SIZE counts the entries of the whole batch: 4 problems of 256 x 256 (2^18) go to the CPU, 5 stay on
    the GPU; a warm start from a GPU result works either way."""
    a, b, C = random_problem(256, 256, seed=3)
    for B, where in ((4, "cpu"), (5, "cuda")):
        Cb = C.cuda().expand(B, 256, 256)
        res = ot.sinkhorn(a.cuda(), b.cuda(), Cb, 0.01)
        assert res.solved_on == where and res.plan.shape == (B, 256, 256) and res.plan.is_cuda
        warm = ot.sinkhorn(a.cuda(), b.cuda(), Cb, 0.008, init=res)
        assert bool(warm.converged.all()) and warm.solved_on == where
        torch.testing.assert_close(warm.plan[0].cpu(), ot.sinkhorn(a, b, C, 0.008).plan, atol=1e-6, rtol=0)


