"""wviz.ot.semirelaxed through sinkhorn(rho=...): the semi-relaxed problem against POT's unbalanced solver, its two
ends (rho -> 0: the prior-softmax in closed form; rho -> infinity: the balanced problem), the optimality conditions
at the returned potentials, what the result reports, the translation of the dual point, epsilon scaling, the batch
path, and fuzzing over sizes, masses with zeros, gammas and rhos."""
from __future__ import annotations

import math
import warnings

import numpy as np
import ot as pot
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.ot_problems import F64, random_problem
from wviz import attention, ot
from wviz.ot import entropic, semirelaxed


def pot_semi(a, b, C, gamma, rho):
    """POT's unbalanced Sinkhorn with the rows held exactly (reg_m = (inf, rho)), reference measure a b^T (its
    default reg_type "kl"), run to machine precision: the plan and its log (potentials, total cost)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        P, log = pot.unbalanced.sinkhorn_unbalanced(a.numpy(), b.numpy(), C.numpy(), gamma, (math.inf, rho),
                                                    reg_type="kl", numItermax=400000, stopThr=1e-16, log=True)
    return torch.from_numpy(P), log


def column_condition_error(res, b, gamma, rho):
    """||q - q*||_1 for q = P^T 1 and q* = t K^T u, the column sums of the plain column update t of the plan
    P = diag(u) K diag(v) (module semirelaxed); written with the returned g (which carries gamma log v) and q,
    v drops out: q*_j = b_j exp((gamma log q_j - g_j) / (rho + gamma)). Computed here from the result (b > 0)."""
    q = res.plan.sum(-2)
    return float((q - b * torch.exp((gamma * q.log() - res.g) / (rho + gamma))).abs().sum())


def kl(x, y):
    """The generalised KL(x | y) = sum x log(x / y) - x + y, computed here (y > 0)."""
    return float((torch.xlogy(x, x) - x * y.log() - x + y).sum())


@pytest.mark.parametrize("gamma,rho", [(0.1, 0.01), (0.1, 1.0), (0.05, 0.1), (0.05, 10.0), (0.02, 1.0)])
@pytest.mark.parametrize("n,m,seed", [(12, 17, 0), (25, 9, 1)])
def test_matches_pot_unbalanced_with_rows_held(n, m, seed, gamma, rho):
    """POT's objective is this one (the same reference measure a b^T; its KL terms without - x + y, the same at
    the solution when sum a = sum b = 1), so plan, objective and column potentials agree to 1e-8."""
    a, b, C = random_problem(n, m, seed)
    res = ot.sinkhorn(a, b, C, gamma, rho=rho, tol=1e-13, max_iter=50000)
    assert bool(res.converged)
    P, log = pot_semi(a, b, C, gamma, rho)
    torch.testing.assert_close(res.plan, P, atol=1e-8, rtol=0)
    assert float(res.reg_cost) == pytest.approx(float(log["total_cost"]), abs=1e-8)
    assert float(res.cost) == pytest.approx(float(log["cost"]), abs=1e-8)
    # POT's v of the kernel a_i b_j exp(-C_ij / gamma) is the column potential relative to gamma log b (no
    # constant is free in the semi-relaxed problem): gamma log v_j = g_j - gamma log b_j
    torch.testing.assert_close(gamma * torch.from_numpy(log["logv"]), res.g - gamma * b.log(), atol=1e-8, rtol=0)


@pytest.mark.parametrize("lean", [True, False])
@pytest.mark.parametrize("gamma,rho", [(0.05, 0.1), (0.01, 1.0), (0.002, 10.0), (0.01, 1e-3)])
def test_optimality_conditions_at_the_returned_potentials(gamma, rho, lean, monkeypatch):
    """P_ij = exp((f_i + g_j - C_ij) / gamma), P 1 = a, and the column condition g_j = gamma log b_j -
    rho log(q_j / b_j), q = P^T 1, on the lean path and on the batch path."""
    if not lean:
        monkeypatch.setattr(entropic, "use_lean", lambda C, record: False)
    a, b, C = random_problem(40, 30, seed=3)
    res = ot.sinkhorn(a, b, C, gamma, rho=rho, tol=1e-12, max_iter=50000)
    assert bool(res.converged)
    P = res.plan
    torch.testing.assert_close(P, torch.exp((res.f[:, None] + res.g[None, :] - C) / gamma), rtol=1e-9, atol=1e-300)
    assert float((P.sum(1) - a).abs().sum()) <= 1e-14
    q = P.sum(0)
    torch.testing.assert_close(res.g, gamma * b.log() - rho * (q / b).log(), atol=1e-9, rtol=0)
    assert float(res.marginal_error) == pytest.approx(column_condition_error(res, b, gamma, rho), rel=1e-6,
                                                      abs=1e-14)


def test_rho_zero_is_the_prior_softmax_in_closed_form():
    """rho = 0: each row is a_i times the prior-softmax of -C_i / gamma with prior b (001, eq. (13)), computed by
    wviz.attention; a small rho solves to it, and the plan moves continuously."""
    a, b, C = random_problem(9, 7, seed=4)
    for gamma in (0.03, 0.3):
        want = a[:, None] * attention.prior_softmax(-C, b, tau=gamma)
        end = ot.sinkhorn(a, b, C, gamma, rho=0)
        torch.testing.assert_close(end.plan, want, rtol=1e-12, atol=1e-15)
        assert end.n_iter == 0 and bool(end.converged) and end.rho == 0.0
        torch.testing.assert_close(end.plan, torch.exp((end.f[:, None] + end.g[None, :] - C) / gamma))
        near = ot.sinkhorn(a, b, C, gamma, rho=1e-9, tol=1e-13)
        torch.testing.assert_close(near.plan, want, atol=1e-8, rtol=0)
    # uniform b: plain softmax attention, P_i = a_i softmax(-C_i / gamma)
    u = torch.full((7,), 1 / 7, dtype=F64)
    torch.testing.assert_close(ot.sinkhorn(a, u, C, 0.1, rho=0).plan, a[:, None] * torch.softmax(-C / 0.1, -1))


def test_rho_infinity_is_the_balanced_problem():
    """rho = inf is the balanced solver, bit for bit, with its column sums; a large rho comes within O(gamma / rho)
    of it, and the columns move monotonically towards b as rho grows."""
    a, b, C = random_problem(20, 15, seed=5)
    bal, inf = ot.sinkhorn(a, b, C, 0.05), ot.sinkhorn(a, b, C, 0.05, rho=math.inf)
    assert torch.equal(bal.plan, inf.plan) and torch.equal(bal.f, inf.f) and inf.rho == math.inf and bal.rho is None
    torch.testing.assert_close(inf.column_sums, inf.plan.sum(0))
    assert float(inf.column_kl) == pytest.approx(kl(inf.plan.sum(0), b), abs=1e-12)
    big = ot.sinkhorn(a, b, C, 0.05, rho=1e5, tol=1e-12)
    assert float((big.plan - bal.plan).abs().max()) < 1e-5
    kls = [float(ot.sinkhorn(a, b, C, 0.05, rho=rho).column_kl) for rho in (0.0, 1e-2, 0.1, 1.0, 10.0, 100.0)]
    assert all(x > y for x, y in zip(kls, kls[1:])) and kls[-1] < 1e-4


def test_the_result_reports_the_objective_and_the_columns():
    """reg_cost is <C, P> + gamma KL(P | a b^T) + rho KL(P^T 1 | b) computed from the plan; column_sums and
    column_kl are P^T 1 and KL(P^T 1 | b); marginal_error is the columns' L1 error against the column condition of
    the plan's rows, which hold a to rounding."""
    a, b, C = random_problem(14, 11, seed=6)
    gamma, rho = 0.04, 0.5
    for omega in (None, 1.0):
        res = ot.sinkhorn(a, b, C, gamma, rho=rho, tol=1e-11, omega=omega)
        P = res.plan
        want = float((C * P).sum()) + gamma * kl(P, a[:, None] * b[None, :]) + rho * kl(P.sum(0), b)
        assert float(res.reg_cost) == pytest.approx(want, abs=1e-10)
        torch.testing.assert_close(res.column_sums, P.sum(0))
        assert float(res.column_kl) == pytest.approx(kl(P.sum(0), b), abs=1e-12)
        assert res.rho == rho and res.gamma == gamma
        assert float((P.sum(1) - a).abs().sum()) <= 1e-15
        assert float(res.marginal_error) == pytest.approx(column_condition_error(res, b, gamma, rho), rel=1e-6)


@pytest.mark.parametrize("lean", [True, False])
@pytest.mark.parametrize("n,m", [(12, 12), (12, 17), (40, 9)])
def test_the_returned_rows_hold_a_to_rounding(n, m, lean, monkeypatch):
    """The rows are held exactly: the returned plan's rows sum to a to rounding, not only to tol (the iterations
    end on a column update; the plan is the one after a last row update), at the default tol, plain and
    over-relaxed, on both loops; marginal_error is then the columns' error against the column condition of these
    rows, within tol."""
    if not lean:
        monkeypatch.setattr(entropic, "use_lean", lambda C, record: False)
    a, b, C = random_problem(n, m, seed=n + m)
    for gamma in (0.01, 0.05, 0.3):
        for rho in (0.01, 0.1, 1.0, 10.0):
            for omega in (None, 1.0):
                res = ot.sinkhorn(a, b, C, gamma, rho=rho, omega=omega)
                assert bool(res.converged) and float(res.marginal_error) <= 1e-6
                assert float((res.plan.sum(1) - a).abs().sum()) <= 1e-12, (gamma, rho, omega)
                assert float(res.marginal_error) == pytest.approx(column_condition_error(res, b, gamma, rho),
                                                                  rel=1e-6, abs=1e-14)


def test_problems_that_leave_a_batch_early_hold_their_rows_to_rounding(monkeypatch):
    """The plans of problems that leave a batch early (wviz.ot.batch: the loop's plan_parts of some problems, the
    loop going on) also end on a row update, and the problem that stays is not disturbed: its plan is the one it
    has solved alone."""
    left, leave = [], entropic.leave
    monkeypatch.setattr(entropic, "leave", lambda *args: (left.append(1), leave(*args))[1])
    a, b, C = random_problem(12, 17, seed=2)
    scales = torch.tensor([0.05, 0.05, 0.05, 1.0], dtype=F64)[:, None, None]   # three easy problems, one hard
    res = ot.sinkhorn(a, b, C * scales, 2e-3, rho=1.0, max_iter=100000)
    assert left and bool(res.converged.all())
    assert float((res.plan.sum(-1) - a).abs().sum(-1).max()) <= 1e-12
    alone = ot.sinkhorn(a, b, C, 2e-3, rho=1.0, max_iter=100000)
    torch.testing.assert_close(res.plan[3], alone.plan, atol=1e-8, rtol=0)


def _untranslated_iterations(a, b, C, gamma, rho, tol):
    """Iterations of Chizat et al.'s scaling algorithm (rows exact, v <- (b / K^T u)^phi), plain, without the
    translation of the dual point, to an L1 row error <= tol: a numpy replica."""
    a, b, K = a.numpy(), b.numpy(), (a[:, None] * b[None, :] * torch.exp(-C / gamma)).numpy()
    p = rho / (rho + gamma)
    v = np.ones(len(b))
    for it in range(1, 200000):
        u = a / (K @ v)
        v = (b / (K.T @ u)) ** p
        if np.abs(u * (K @ v) - a).sum() <= tol:
            return it
    return 200000


def test_the_translation_solves_the_mass_mode():
    """At rho >> gamma the plain scaling algorithm contracts the plan's total mass by phi = rho / (rho + gamma) per
    iteration; the translation of the dual point (Séjourné et al. 2022) solves that direction, so even plain
    iterations (omega = 1) need a fraction of the untranslated ones, and the plans agree."""
    a, b, C = random_problem(30, 25, seed=7)
    gamma, rho = 0.02, 20.0
    res = ot.sinkhorn(a, b, C, gamma, rho=rho, omega=1.0, eps_scaling=False, tol=1e-9, max_iter=100000)
    plain = _untranslated_iterations(a, b, C, gamma, rho, 1e-9)
    assert bool(res.converged) and plain > 10 * res.n_iter, (plain, res.n_iter)
    P, _ = pot_semi(a, b, C, gamma, rho)
    torch.testing.assert_close(res.plan, P, atol=1e-8, rtol=0)


def test_epsilon_scaling_with_rho(monkeypatch):
    """Epsilon scaling starts at rho at the latest (a stage at gamma_k > rho is near the prior-softmax end): the
    plan is the one solved at gamma directly, and at rho >> gamma the schedule saves iterations."""
    a, b, C = random_problem(120, 100, seed=8)
    gamma = 2e-4
    stages, stage = [], entropic._stage
    monkeypatch.setattr(entropic, "_stage", lambda loop, run, gamma_k, final: (stages.append(gamma_k),
                                                                                stage(loop, run, gamma_k, final)))
    for rho, schedule in ((1e-3, [gamma]), (1.0, [10 * gamma, gamma])):
        stages.clear()
        scaled = ot.sinkhorn(a, b, C, gamma, rho=rho, tol=1e-10, max_iter=50000)
        assert stages == pytest.approx(schedule)
        direct = ot.sinkhorn(a, b, C, gamma, rho=rho, tol=1e-10, max_iter=50000, eps_scaling=False)
        assert bool(scaled.converged) and bool(direct.converged)
        torch.testing.assert_close(scaled.plan, direct.plan, atol=1e-9, rtol=0)
        if rho == 1.0:
            assert scaled.n_iter < direct.n_iter


def test_zero_masses_and_a_column_without_mass_worth_a_float():
    """Zero masses get empty rows and columns (no NaN); a key far from every query (its mass underflows at rho,
    gamma small) keeps a finite potential and no mass, and the rest is solved as without it."""
    a, b, C = random_problem(10, 8, seed=9)
    a[[2, 7]] = 0
    b[0] = 0
    a, b = a / a.sum(), b / b.sum()
    res = ot.sinkhorn(a, b, C, 0.05, rho=0.3, tol=1e-12)
    assert bool(res.converged) and float(res.plan[[2, 7]].abs().max()) == 0 and float(res.plan[:, 0].abs().max()) == 0
    keep_a, keep_b = a > 0, b > 0
    sub = ot.sinkhorn(a[keep_a], b[keep_b], C[keep_a][:, keep_b], 0.05, rho=0.3, tol=1e-12)
    torch.testing.assert_close(res.plan[keep_a][:, keep_b], sub.plan, atol=1e-11, rtol=0)
    assert math.isfinite(float(res.reg_cost)) and math.isfinite(float(res.column_kl))
    g = torch.Generator().manual_seed(3)
    x = torch.rand(30, 2, generator=g, dtype=F64)
    y = torch.cat([torch.rand(19, 2, generator=g, dtype=F64), torch.tensor([[3.0, 3.0]], dtype=F64)])
    C = ot.cost_matrix(x, y)
    a, b = torch.full((30,), 1 / 30, dtype=F64), torch.full((20,), 1 / 20, dtype=F64)
    gamma, rho = 1e-3 * float(C.max()), 1e-3
    res = ot.sinkhorn(a, b, C, gamma, rho=rho, tol=1e-12)
    assert bool(res.converged) and bool(torch.isfinite(res.g).all()) and bool(torch.isfinite(res.plan).all())
    assert float(res.plan[:, -1].sum()) < 1e-40   # exp(-2500) in exact arithmetic
    q = res.plan.sum(0)[:-1]   # the column condition holds on the other columns
    torch.testing.assert_close(res.g[:-1], gamma * b[:-1].log() - rho * (q / b[:-1]).log(), atol=1e-9, rtol=0)
    low = ot.sinkhorn(a.float(), b.float(), C.float(), gamma, rho=rho)
    assert bool(low.converged) and bool(torch.isfinite(low.g).all()) and float(low.plan[:, -1].sum()) < 1e-9
    torch.testing.assert_close(low.plan.double(), res.plan, atol=1e-6, rtol=0)


@pytest.mark.parametrize("dtype", [F64, torch.float32])
def test_no_nan_from_rho_1e_minus_4_to_1e4_down_to_gamma_1e_minus_4(dtype):
    """gamma down to 1e-4 max C, rho from 1e-4 to 1e4, float32 and float64, shifted costs: never NaN or inf; the
    rows sum to a within the reported error; converged wherever the balanced solver converges at that gamma."""
    a, b, C = random_problem(60, 50, seed=10, dtype=dtype)
    C = 3 * C + 2
    for rel in (1e-4, 1e-2):
        gamma = rel * float(C.max())
        balanced = bool(ot.sinkhorn(a, b, C, gamma).converged)
        for rho in (1e-4, 1e-2, 1.0, 1e2, 1e4):
            res = ot.sinkhorn(a, b, C, gamma, rho=rho)
            for t in (res.plan, res.cost, res.reg_cost, res.marginal_error, res.f, res.g, res.column_sums,
                      res.column_kl):
                assert bool(torch.isfinite(t).all()), (rel, rho, t)
            err = float((res.plan.double().sum(1) - a.double()).abs().sum())
            assert err <= float(res.marginal_error) * 1.01 + 1e-6 * (dtype == torch.float32), (rel, rho)
            if balanced and (dtype == F64 or rho != 1.0):
                assert bool(res.converged), (rel, rho)


def test_a_batch_is_solved_as_its_problems_alone():
    """The batch path, converged problems leaving the batch early (wviz.ot.batch) included, gives each problem's
    plan and parts as solved alone."""
    probs = [random_problem(12, 12, seed) for seed in range(6)]
    a, b, C = (torch.stack([p[i] for p in probs]) for i in range(3))
    res = ot.sinkhorn(a, b, C, 2e-3, rho=1.0, tol=1e-10, max_iter=100000)
    assert bool(res.converged.all())
    for k, p in enumerate(probs):
        alone = ot.sinkhorn(*p, 2e-3, rho=1.0, tol=1e-10, max_iter=100000)
        torch.testing.assert_close(res.plan[k], alone.plan, atol=1e-9, rtol=0)
        assert float(res.reg_cost[k]) == pytest.approx(float(alone.reg_cost), abs=1e-9)
        torch.testing.assert_close(res.column_sums[k], alone.column_sums, atol=1e-9, rtol=0)


def test_warm_start_from_another_rho():
    """A slider over rho warm-starts from the previous value's result: the same plan, in fewer iterations."""
    a, b, C = random_problem(80, 70, seed=11)
    previous = ot.sinkhorn(a, b, C, 0.002, rho=1.0)
    cold = ot.sinkhorn(a, b, C, 0.002, rho=1.26, tol=1e-10)
    warm = ot.sinkhorn(a, b, C, 0.002, rho=1.26, tol=1e-10, init=previous)
    assert bool(warm.converged) and warm.n_iter < cold.n_iter
    torch.testing.assert_close(warm.plan, cold.plan, atol=1e-9, rtol=0)


def test_bad_rho_raises_value_error():
    a, b, C = random_problem(4, 3)
    for rho in (-1.0, float("nan"), "much"):
        with pytest.raises(ValueError, match="rho"):
            ot.sinkhorn(a, b, C, 0.1, rho=rho)
    with pytest.raises(ValueError, match="give b"):
        ot.sinkhorn(a, None, C, 0.1, rho=1.0)
    assert semirelaxed.check_rho(None) is None and semirelaxed.check_rho(2) == 2.0


masses = st.lists(st.one_of(st.just(0.0), st.floats(1e-3, 1.0)), min_size=1, max_size=7).filter(
    lambda w: sum(w) > 0)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(wa=masses, wb=masses, seed=st.integers(0, 2 ** 16), rel=st.sampled_from([1e-3, 1e-2, 0.1, 1.0, 10.0]),
       rho=st.sampled_from([1e-4, 1e-2, 0.3, 3.0, 1e2, 1e4]), scale=st.sampled_from([1e-3, 1.0, 1e3]),
       batch=st.integers(1, 3))
def test_fuzz_semi_relaxed(wa, wb, seed, rel, rho, scale, batch):
    g = torch.Generator().manual_seed(seed)
    a, b = torch.tensor(wa, dtype=F64), torch.tensor(wb, dtype=F64)
    a, b = a / a.sum(), b / b.sum()
    C = torch.randn(batch, len(wa), len(wb), generator=g, dtype=F64) * scale
    gamma = rel * float(C.abs().max() or 1.0)
    res = ot.sinkhorn(a, b, C, gamma, rho=rho * float(C.abs().max() or 1.0), tol=1e-8, max_iter=3000)
    assert res.plan.shape == (batch, len(wa), len(wb))
    for t in (res.plan, res.reg_cost, res.column_sums, res.column_kl, res.marginal_error):
        assert bool(torch.isfinite(t).all())
    assert float(res.plan.min()) >= 0
    assert float(res.plan[:, a == 0].abs().sum()) == 0 and float(res.plan[:, :, b == 0].abs().sum()) == 0
    rows = (res.plan.sum(-1) - a).abs().sum(-1)
    assert bool((rows <= res.marginal_error * (1 + 1e-6) + 1e-15).all())
    assert bool((rows[res.converged] <= 1e-8 * (1 + 1e-6)).all())
    if rel >= 1.0 or rho <= 1e-2:   # fast there: by phi = rho / (rho + gamma) at least per iteration
        assert bool(res.converged.all())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
@pytest.mark.parametrize("dtype", [F64, torch.float32])
def test_semi_relaxed_cuda_matches_cpu(dtype):
    """The batch loop on CUDA (checks every 10 iterations, the translation on the device; route=False keeps this
    small problem there) gives the CPU's plan."""
    a, b, C = random_problem(300, 200, seed=14, dtype=dtype)
    for rho in (0.05, 5.0):
        cpu = ot.sinkhorn(a, b, C, 0.01, rho=rho)
        gpu = ot.sinkhorn(a.cuda(), b.cuda(), C.cuda(), 0.01, rho=rho, route=False)
        assert gpu.plan.is_cuda and bool(gpu.converged) and gpu.column_sums.is_cuda and gpu.solved_on == "cuda"
        torch.testing.assert_close(gpu.plan.cpu(), cpu.plan, atol=1e-6 if dtype == F64 else 1e-5, rtol=0)
