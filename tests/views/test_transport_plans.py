"""The Transport plans page's computations against POT and closed forms."""
import numpy as np
import ot as pot
import pytest
import torch
from scipy.special import logsumexp

from wviz import samples
from wviz.io import parse_numbers as io_numbers
from wviz.views import transport_plans as tv


@pytest.fixture
def problem():
    x, y = samples.point_clouds("moons", 25, 20, seed=2)
    C = torch.cdist(x, y) ** 2
    return torch.full((25,), 1 / 25, dtype=torch.float64), torch.full((20,), 1 / 20, dtype=torch.float64), C


def test_gamma_sweep_matches_pot_and_approaches_the_exact_cost(problem):
    a, b, C = problem
    gammas = torch.tensor([1.0, 0.1, 0.01, 0.3], dtype=torch.float64) * C.max()
    costs = tv.gamma_sweep(a, b, C, gammas)
    for g, c in zip(gammas.tolist(), costs.tolist()):
        P = pot.bregman.sinkhorn_log(a.numpy(), b.numpy(), C.numpy(), g, stopThr=1e-13, numItermax=200000)
        assert abs(c - (P * C.numpy()).sum()) < 1e-5
    exact = pot.emd2(a.numpy(), b.numpy(), C.numpy())
    order = torch.argsort(gammas)
    assert (costs[order].diff() >= -1e-9).all()  # cost grows with gamma...
    assert 0 <= float(costs.min()) - exact < 0.05 * float(C.max())  # ...and is close to exact at small gamma


def test_solvers_dispatch(problem):
    a, b, C = problem
    exact = tv.solve("exact", a, b, C, 1.0)
    assert abs(float(exact.cost) - pot.emd2(a.numpy(), b.numpy(), C.numpy())) < 1e-10
    assert tv.sparsity(exact.plan) > 0.9  # at most n + m - 1 non-zeros out of n m
    quad = tv.solve("quadratic", a, b, C, 0.05 * float(C.max()))
    assert 0 < tv.sparsity(quad.plan) < 1 and float(quad.marginal_error) < 1e-5
    with pytest.raises(ValueError, match="unknown solver"):
        tv.solve("greedy", a, b, C, 1.0)


def test_snapshots_are_sinkhorn_iterates_ending_at_the_solution(problem):
    a, b, C = problem
    gamma = 0.05 * float(C.max())
    first = tv.solve("sinkhorn", a, b, C, gamma)
    snap = tv.sinkhorn_snapshots(a, b, C, gamma, n_iter=first.n_iter, snapshots=10)
    iters = [it for it, _ in snap.plans]
    assert iters == sorted(iters) and len(iters) >= 2
    torch.testing.assert_close(snap.plans[-1][1], first.plan, atol=1e-6, rtol=0)


def test_scrubber_run_is_capped_and_says_when_it_is_truncated():
    """The page's default problem at gamma = 1e-4 max C: the main solve stops at max_iter = 10000 unconverged and
    plain Sinkhorn needs more than 10^5 iterations. The scrubber stops at its budget and says converged=False."""
    x, y = samples.point_clouds("gaussians", 40, 30, seed=0)
    C = torch.cdist(x, y) ** 2
    a, b = torch.full((40,), 1 / 40, dtype=torch.float64), torch.full((30,), 1 / 30, dtype=torch.float64)
    every, budget = tv.scrub_schedule(10000)
    assert budget == tv.SCRUB_MAX_ITER and budget % every == 0 and budget // every == 40
    snap = tv.sinkhorn_snapshots(a, b, C, 1e-4 * float(C.max()), n_iter=10000)
    assert snap.n_iter == budget and not bool(snap.converged) and float(snap.marginal_error) > 1e-6
    iters = [it for it, _ in snap.plans]
    assert iters[0] == 0 and iters[-1] == budget and all(i % every == 0 for i in iters)
    assert (snap.history[:, 0] % every == 0).all() and int(snap.history[-1, 0]) == budget


@pytest.mark.parametrize("gamma_rel", [1e-3, 1e-4])
def test_scrubber_plans_are_plain_sinkhorn_iterates(gamma_rel):
    """A truncated run records exactly the textbook iterates u = a / K v, v = b / K^T u from v = 1 (here in numpy,
    in the log domain), every ``every`` iterations up to the budget. At 1e-4 max C whole columns of the kernel
    exp(-C / gamma) lie below the solver's clamp: its iterates must still be the textbook ones."""
    x, y = samples.point_clouds("gaussians", 40, 30, seed=0)
    C = torch.cdist(x, y) ** 2
    a, b = torch.full((40,), 1 / 40, dtype=torch.float64), torch.full((30,), 1 / 30, dtype=torch.float64)
    gamma = gamma_rel * float(C.max())    # plain Sinkhorn needs about 400 iterations at 1e-3
    every, budget = tv.scrub_schedule(400, snapshots=20, max_iter=200)
    assert (every, budget) == (10, 200)
    snap = tv.sinkhorn_snapshots(a, b, C, gamma, n_iter=400, snapshots=20, max_iter=200)
    assert snap.n_iter == 200 and not bool(snap.converged)
    plans = dict(snap.plans)
    assert set(plans) == set(range(0, 201, 10))   # absorptions included
    Cn, la, lb = C.numpy() / gamma, np.log(a.numpy()), np.log(b.numpy())
    f, g = np.zeros(40), np.zeros(30)
    for it in range(1, budget + 1):
        f = la - logsumexp(g[None, :] - Cn, axis=1)
        g = lb - logsumexp(f[:, None] - Cn, axis=0)
        if it in plans:
            P = np.exp(f[:, None] + g[None, :] - Cn)
            np.testing.assert_allclose(plans[it].numpy(), P, atol=1e-12, rtol=0, err_msg=f"iteration {it}")
    err = max(np.abs(P.sum(1) - a.numpy()).sum(), np.abs(P.sum(0) - b.numpy()).sum())
    assert float(snap.marginal_error) == pytest.approx(err, rel=1e-6) and err > 1e-6


def test_scrub_schedule_for_fast_solves():
    every, budget = tv.scrub_schedule(20)
    assert every == 1 and budget == 1000
    every, budget = tv.scrub_schedule(276)
    assert every == 6 and budget == 2760


def test_plan_numbers_closed_forms():
    """H(P) = -sum P log P (0 log 0 = 0), ||P||^2 and the zero fraction of a small plan, by hand."""
    P = torch.tensor([[0.5, 0.0], [0.25, 0.25]], dtype=torch.float64)
    problem = tv.Problem(np.array([0.5, 0.5]), np.array([0.75, 0.25]), np.zeros((2, 2)))
    t = tv.Transport(problem, "exact", 0.0, P, 0.0, 0.0, 0, 0.0, True)
    assert abs(t.entropy - (0.5 * np.log(2) + 0.5 * np.log(4))) < 1e-12
    assert t.sq_norm == pytest.approx(0.25 + 2 * 0.0625, abs=1e-15)
    assert tv.sparsity(P) == t.sparsity == 0.25
    assert problem.scale == 1.0   # all costs 0: gamma is then in the units of C itself


# ---- the problem as the page reads it -----------------------------------------------------------------------------

def test_points_table_holds_the_preset_and_becomes_the_problem():
    x, y = samples.point_clouds("moons", 25, 20, seed=2)
    table = tv.points_table("moons", 25, 20, 2)
    assert list(table.columns) == ["cloud", "x", "y", "mass"] and len(table) == 45
    assert (table["cloud"] == ["source"] * 25 + ["target"] * 20).all() and (table["mass"] == 1.0).all()
    np.testing.assert_array_equal(table[["x", "y"]].to_numpy(), np.vstack([x.numpy(), y.numpy()]))
    p = tv.clouds_from_table(table, "sqeuclidean")
    assert p.clouds
    np.testing.assert_array_equal(p.x, x.numpy())
    np.testing.assert_array_equal(p.y, y.numpy())
    np.testing.assert_allclose(p.a, np.full(25, 1 / 25), rtol=1e-15)
    np.testing.assert_allclose(p.b, np.full(20, 1 / 20), rtol=1e-15)
    np.testing.assert_allclose(p.C, pot.dist(x.numpy(), y.numpy()), atol=1e-12)   # squared Euclidean
    euclid = tv.clouds_from_table(table, "euclidean")
    np.testing.assert_allclose(euclid.C, pot.dist(x.numpy(), y.numpy(), metric="euclidean"), atol=1e-12)
    assert p.scale == pytest.approx(float(pot.dist(x.numpy(), y.numpy()).max()), rel=1e-12)


def test_edited_masses_are_normalised_per_cloud_and_match_the_csv_reading():
    table = tv.points_table("gaussians", 3, 2, 0)
    table.loc[[0, 1, 2, 3, 4], "mass"] = [1.0, 0.0, 3.0, 2.0, 6.0]
    p = tv.clouds_from_table(table, "l1")
    np.testing.assert_allclose(p.a, [0.25, 0.0, 0.75], rtol=1e-15)
    np.testing.assert_allclose(p.b, [0.25, 0.75], rtol=1e-15)
    xy = table[["x", "y"]].to_numpy()
    np.testing.assert_allclose(p.C, np.abs(xy[:3, None, :] - xy[None, 3:, :]).sum(-1), atol=1e-12)
    q = tv.clouds_from_csv(table.to_csv(index=False).encode(), "l1")
    for name in ("a", "b", "C", "x", "y"):
        np.testing.assert_array_equal(getattr(p, name), getattr(q, name))


def test_cost_problem_uniform_and_typed_masses():
    C = tv.cost_from_text("0 2 4\n2 0 2\n4 2 0\n1 1 3")
    p = tv.cost_problem(C)
    assert not p.clouds and p.C.shape == (4, 3) and p.scale == 4.0
    np.testing.assert_array_equal(p.a, np.full(4, 0.25))
    np.testing.assert_array_equal(p.b, np.full(3, 1 / 3))
    a_text, b_text = tv.default_masses(4, 3)
    q = tv.cost_problem(C, a_text, b_text)
    np.testing.assert_array_equal(q.a, np.full(4, 3.0))   # 4 / 3 has no short decimal: whole masses 3 and 4
    np.testing.assert_array_equal(q.b, np.full(3, 4.0))
    assert tv.default_masses(2, 2) == ("1, 1", "1, 1") and tv.default_masses(2, 4) == ("1, 1", "0.5, 0.5, 0.5, 0.5")
    for n, m in [(4, 3), (7, 5), (6, 4), (5, 7), (512, 3)]:
        a, b = (np.array(io_numbers(t)) for t in tv.default_masses(n, m))
        assert len(a) == n and len(b) == m and abs(a.sum() - b.sum()) <= 1e-12 * a.sum()
    with pytest.raises(ValueError, match=r"b needs 3 masses \(one per column\), got 2"):
        tv.cost_problem(C, a_text, "1, 1")
    with pytest.raises(ValueError, match=r"mass of a 2 \('x'\) is not a number"):
        tv.cost_problem(C, "1 x 1 1", b_text)
    np.testing.assert_array_equal(tv.cost_from_csv(b"0,1\n1,0\n").numpy(), [[0.0, 1.0], [1.0, 0.0]])


# ---- the plan at the slider's gamma, against POT ----------------------------------------------------------------

@pytest.fixture
def clouds():
    return tv.clouds_from_table(tv.points_table("moons", 25, 20, 2), "sqeuclidean")


@pytest.mark.parametrize("gamma_rel", [0.1, 0.01])
def test_sinkhorn_transport_is_pots_entropic_plan_with_its_objective(clouds, gamma_rel):
    p = clouds
    t = tv.transport(p, "sinkhorn", gamma_rel)
    assert t.gamma == pytest.approx(gamma_rel * np.abs(p.C).max(), rel=1e-15)
    ref = pot.bregman.sinkhorn_log(p.a, p.b, p.C, t.gamma, stopThr=1e-13, numItermax=200000)
    np.testing.assert_allclose(t.plan.numpy(), ref, atol=1e-7)
    assert t.converged and t.n_iter > 0 and t.marginal_error <= tv.TOL
    P = t.plan.numpy()
    assert max(np.abs(P.sum(1) - p.a).sum(), np.abs(P.sum(0) - p.b).sum()) == pytest.approx(t.marginal_error,
                                                                                          abs=1e-12)
    assert t.cost == pytest.approx((P * p.C).sum(), rel=1e-12)
    H = -np.sum(P[P > 0] * np.log(P[P > 0]))
    assert t.entropy == pytest.approx(H, rel=1e-10)
    assert t.reg_cost == pytest.approx(t.cost - t.gamma * H, rel=1e-10)   # eq. (23) of 002 at P
    assert t.sparsity == pytest.approx((P <= 1e-8 * P.max()).mean())   # positive, but tiny far away


def test_exact_transport_is_pots_linear_programme(clouds):
    p = clouds
    t = tv.transport(p, "exact", 0.01)
    assert t.cost == pytest.approx(pot.emd2(p.a, p.b, p.C), abs=1e-12) and t.reg_cost == t.cost
    P = t.plan.numpy()
    np.testing.assert_allclose(P.sum(1), p.a, atol=1e-12)
    np.testing.assert_allclose(P.sum(0), p.b, atol=1e-12)
    assert (P > 0).sum() <= 25 + 20 - 1   # a vertex of the transport polytope
    assert t.sparsity == pytest.approx(1 - (P > 1e-8 * P.max()).mean())


def test_quadratic_transport_is_pots_smooth_ot(clouds):
    """Squared-L2 OT, <C, P> + gamma/2 ||P||^2: POT's smooth_ot_dual (L-BFGS on the dual, Blondel et al. 2018)."""
    p = clouds
    t = tv.transport(p, "quadratic", 0.05)
    ref = pot.smooth.smooth_ot_dual(p.a, p.b, p.C, t.gamma, reg_type="l2", stopThr=1e-12, numItermax=10000)
    np.testing.assert_allclose(t.plan.numpy(), ref, atol=1e-5)
    P = t.plan.numpy()
    assert t.sq_norm == pytest.approx((P ** 2).sum(), rel=1e-12)
    assert t.reg_cost == pytest.approx(t.cost + t.gamma / 2 * t.sq_norm, rel=1e-10)
    ref_obj = (ref * p.C).sum() + t.gamma / 2 * (ref ** 2).sum()
    assert t.reg_cost == pytest.approx(ref_obj, rel=1e-5)   # POT's plan meets the marginals to ~1e-6 only
    assert 0.5 < t.sparsity < 1 and t.sparsity == pytest.approx((P <= 1e-8 * P.max()).mean())


def test_scrub_frames_are_plain_sinkhorn_iterates_with_their_marginals(clouds):
    p = clouds
    t = tv.transport(p, "sinkhorn", 0.05)
    s = tv.scrub(p, t.gamma, t.n_iter)
    every, budget = tv.scrub_schedule(t.n_iter)
    assert s.every == every and s.converged and s.n_iter <= budget and s.tol == tv.TOL
    its = s.iterations
    assert its == sorted(its) and its[0] == 0 and s.plan_every == min(np.diff(its))
    last = s.frame()
    assert last.step == its[-1]
    np.testing.assert_allclose(last.plan.numpy(), t.plan.numpy(), atol=1e-6)   # the same optimum
    first = s.frame(its[1])
    np.testing.assert_allclose(first.rows.numpy(), first.plan.numpy().sum(1), rtol=1e-14)
    np.testing.assert_allclose(first.columns.numpy(), first.plan.numpy().sum(0), rtol=1e-14)
    # each iteration of plain Sinkhorn ends with the column scaling v = b / K^T u: the columns then sum to b
    np.testing.assert_allclose(first.columns.numpy(), p.b, atol=1e-12)
    assert np.abs(first.rows.numpy() - p.a).sum() > 1e-6   # ...while the rows are still off
    assert s.errors[-1] <= tv.TOL < s.errors[0] and (s.checked.diff() > 0).all()
    assert s.marginal_error == pytest.approx(float(s.errors[-1]))


def test_sweep_costs_are_pots_entropic_costs_tending_to_the_exact_one(clouds):
    p = clouds
    sw = tv.sweep(p)
    np.testing.assert_allclose(sw.gammas.numpy(), tv.SWEEP.numpy() * np.abs(p.C).max(), rtol=1e-15)
    assert sw.exact == pytest.approx(pot.emd2(p.a, p.b, p.C), abs=1e-12)
    for g, c in zip(sw.gammas.tolist()[::4], sw.costs.tolist()[::4]):
        P = pot.bregman.sinkhorn_log(p.a, p.b, p.C, g, stopThr=1e-13, numItermax=200000)
        assert c == pytest.approx((P * p.C).sum(), abs=1e-5)
    assert (sw.costs.diff() >= -1e-9).all() and 0 <= float(sw.costs[0]) - sw.exact < 0.01 * p.scale
