"""The Transport plans page's computations against POT and closed forms."""
import math

import numpy as np
import ot as pot
import pytest
import torch
from scipy.special import logsumexp

from wviz import sample_data
from wviz.figures import common
from wviz.figures import transport_plans as tplot
from wviz.io import parse_numbers as io_numbers
from wviz.views import transport_plans as tv


@pytest.fixture
def problem():
    x, y = sample_data.point_clouds("moons", 25, 20, seed=2)
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
    x, y = sample_data.point_clouds("gaussians", 40, 30, seed=0)
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
    x, y = sample_data.point_clouds("gaussians", 40, 30, seed=0)
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
    x, y = sample_data.point_clouds("moons", 25, 20, seed=2)
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


# ---- the ordered presets ----------------------------------------------------------------------------------------

def test_line_preset_is_sorted_and_its_exact_plan_is_the_monotone_map():
    x, y = tv.preset_clouds("line", 40, 30, 0)
    assert (np.diff(x[:, 0].numpy()) >= 0).all() and (np.diff(y[:, 0].numpy()) >= 0).all()
    assert (x[:, 1] == 0).all() and (y[:, 1] == 0.5).all() and x[:, 0].abs().max() <= 1
    p = tv.clouds_from_table(tv.points_table("line", 40, 30, 0), "sqeuclidean")
    P = pot.emd(p.a, p.b, p.C)
    # the north-west corner rule on sorted points is the 1-D optimum: the same plan, a staircase down the diagonal
    nw, i, j, ra, rb = np.zeros((40, 30)), 0, 0, p.a.copy(), p.b.copy()
    while i < 40 and j < 30:
        moved = min(ra[i], rb[j])
        nw[i, j], ra[i], rb[j] = moved, ra[i] - moved, rb[j] - moved
        i, j = (i + 1, j) if ra[i] <= 1e-15 else (i, j + 1)
    np.testing.assert_allclose(P, nw, atol=1e-12)
    assert tv.transport(p, "exact", 0.01).cost == pytest.approx((nw * p.C).sum(), abs=1e-12)


def test_two_clusters_preset_gives_two_blocks():
    """Each cloud lists its top cluster first (20 of 40 sources, 15 of 30 targets, half the mass each): the exact
    plan and the entropic plan at gamma = 0.01 max C stay within the two diagonal blocks."""
    x, y = tv.preset_clouds("two clusters", 40, 30, 3)
    assert (x[:20, 1].mean() > 0.5) and (x[20:, 1].mean() < -0.5) and (y[:15, 1].mean() > 0.5)
    assert (np.diff(x[:20, 1].numpy()) <= 0).all() and (np.diff(y[15:, 1].numpy()) <= 0).all()
    p = tv.clouds_from_table(tv.points_table("two clusters", 40, 30, 3), "sqeuclidean")
    for solver in ("exact", "sinkhorn"):
        P = tv.transport(p, solver, 0.01).plan.numpy()
        assert P[:20, :15].sum() + P[20:, 15:].sum() > 0.999, solver
    np.testing.assert_array_equal(tv.preset_clouds("moons", 5, 4, 1)[0].numpy(),
                                  sample_data.point_clouds("moons", 5, 4, 1)[0].numpy())   # the old presets as before
    assert tv.PRESETS[0] == "line" and set(sample_data.PRESETS) < set(tv.PRESETS)


# ---- example uploads and the user's errors ----------------------------------------------------------------------

def test_example_points_file_goes_through_the_pages_parser():
    p = tv.clouds_from_csv(tv.example_points_csv(), "sqeuclidean")
    np.testing.assert_array_equal(p.x, [[0, 0], [1, 0], [2, 0], [3, 0]])
    np.testing.assert_array_equal(p.y, [[0.5, 1], [1.5, 1], [2.5, 1]])
    np.testing.assert_allclose(p.a, [0.25] * 4, rtol=1e-15)
    np.testing.assert_allclose(p.b, [0.25, 0.25, 0.5], rtol=1e-15)
    np.testing.assert_allclose(p.C, pot.dist(p.x, p.y), atol=1e-15)


def test_example_cost_file_goes_through_the_pages_parser():
    C = tv.cost_from_csv(tv.example_cost_csv())
    np.testing.assert_array_equal(C.numpy(), np.abs(np.arange(3)[:, None] - np.arange(4)[None, :]))
    p = tv.cost_problem(C)
    assert tv.transport(p, "exact", 0.01).cost == pytest.approx(pot.emd2(p.a, p.b, p.C), abs=1e-12)


def test_typed_masses_report_every_problem_at_once_and_what_would_do():
    C = tv.cost_from_text("0 2 4\n2 0 2\n4 2 0\n1 1 3")
    with pytest.raises(ValueError) as err:
        tv.cost_problem(C, "1 x 1 1", "1, 1")
    assert "mass of a 2 ('x') is not a number" in str(err.value)
    assert "b needs 3 masses (one per column), got 2" in str(err.value)
    with pytest.raises(ValueError, match=r"the masses a total 4 but the masses b total 6: .*both totals must be "
                                         r"equal \(for example a = 3, 3, 3, 3 and b = 4, 4, 4\)"):
        tv.cost_problem(C, "1, 1, 1, 1", "2, 2, 2")
    a_text, b_text = tv.default_masses(4, 3)
    q = tv.cost_problem(C, a_text, b_text)   # the example the message gives is accepted
    assert q.a.sum() == q.b.sum()


# ---- the Sinkhorn animation -------------------------------------------------------------------------------------

def test_animation_frames_are_sinkhorn_iterates_with_their_marginal_error(clouds):
    p = clouds
    t = tv.transport(p, "sinkhorn", 0.01)
    s = tv.scrub(p, t.gamma, t.n_iter)
    frames = tv.animation_frames(s)
    steps = [f.step for f in frames]
    assert 12 <= len(frames) <= tv.ANIMATION_FRAMES and steps == sorted(set(steps))
    assert steps[0] == s.iterations[1] and steps[-1] == s.iterations[-1]     # not the unscaled kernel at 0
    errors = dict(zip(s.checked.tolist(), s.errors.tolist()))
    previous = None
    for f in frames:
        np.testing.assert_array_equal(f.plan.numpy(), s.plans[f.step].numpy())   # the plan after iteration k
        np.testing.assert_allclose(f.columns.numpy(), p.b, atol=1e-12)          # its columns: scaled last
        P = f.plan.numpy()
        err = max(np.abs(P.sum(1) - p.a).sum(), np.abs(P.sum(0) - p.b).sum())
        assert f.marginal_error(p.a, p.b) == pytest.approx(err, rel=1e-12)
        if f.step in errors:
            assert f.marginal_error(p.a, p.b) == pytest.approx(errors[f.step], rel=1e-9)
        if previous is not None:
            assert np.abs(P - previous).max() > 0                                 # every frame differs
        previous = P
    assert frames[-1].marginal_error(p.a, p.b) <= tv.TOL < frames[0].marginal_error(p.a, p.b)


def test_animation_figures_share_one_colour_scale(clouds):
    p = clouds
    t = tv.transport(p, "sinkhorn", 0.05)
    frames = tv.animation_frames(tv.scrub(p, t.gamma, t.n_iter))
    figs = tplot.plan_frames([(f.plan, f.rows, f.columns, f"iteration {f.step}") for f in frames], "Plain Sinkhorn")
    top = max(float(f.plan.max()) for f in frames)
    assert len(figs) == len(frames)
    for fig, f in zip(figs, frames):
        heat = next(tr for tr in fig.data if tr.type == "heatmap")
        np.testing.assert_array_equal(heat.z, f.plan.numpy())
        assert (heat.zmin, heat.zmax) == (0, top) and fig.layout.title.text == f"Plain Sinkhorn: iteration {f.step}"


# ---- readable figures -------------------------------------------------------------------------------------------

def test_every_heatmap_has_a_titled_colour_bar_and_titled_axes():
    P = torch.full((4, 3), 1 / 12, dtype=torch.float64)
    fig = tplot.plan_with_marginals(P, P.sum(1), P.sum(0), "plan")
    heats = [tr for tr in fig.data if tr.type == "heatmap"]
    assert heats and all(h.showscale and h.colorbar.title.text for h in heats)
    layout = fig.layout
    assert layout.xaxis4.title.text == "target j" and layout.yaxis3.title.text == "source i"   # the plan's row
    assert layout.xaxis3.title.text == "a_i" and layout.yaxis2.title.text == "b_j"            # the two marginals
    x, y = sample_data.point_clouds("moons", 4, 3, 0)
    lines = tplot.plan_lines(x, y, P, P.sum(1), P.sum(0), "lines")
    assert lines.layout.xaxis.title.text and lines.layout.yaxis.title.text


@pytest.mark.parametrize("lo, hi, texts", [
    (1e-7, 3.0, ["10<sup>-7</sup>", "10<sup>-6</sup>", "10<sup>-5</sup>", "10<sup>-4</sup>", "0.001", "0.01", "0.1",
                 "1"]),
    (0.0012, 0.9, ["0.01", "0.1"]),
    (0.05, 0.3, ["0.05", "0.1", "0.2"]),                        # less than two decades: 1, 2, 5 in full
    (3e-6, 2e-5, ["5·10<sup>-6</sup>", "10<sup>-5</sup>", "2·10<sup>-5</sup>"]),
])
def test_log_axes_are_labelled_in_full(lo, hi, texts):
    """The labels of the ticks between lo and hi: every power of ten, or 1, 2, 5 times them on a short range."""
    ticks = tplot.decade_ticks(lo, hi)
    assert ticks["tickmode"] == "array" and ticks["type"] == "log"
    assert [t for v, t in zip(ticks["tickvals"], ticks["ticktext"]) if lo <= v <= hi] == texts
    leading = np.asarray(ticks["tickvals"]) / 10.0 ** np.floor(np.log10(ticks["tickvals"]) + 1e-9)
    assert set(np.round(leading, 9)) <= {1.0, 2.0, 5.0}
    many = tplot.decade_ticks(1e-20, 1e20)   # 41 decades: every 4th labelled, still one label per tick
    assert len(many["tickvals"]) <= common.MAX_DECADE_LABELS and len(many["ticktext"]) == len(many["tickvals"])


def test_error_curve_and_cost_sweep_use_decade_ticks():
    errors = tplot.marginal_error_curve([1, 10, 20], [0.5, 1e-3, 1e-7], 1e-6, "errors")
    assert list(errors.layout.yaxis.ticktext) == ["10<sup>-7</sup>", "10<sup>-6</sup>", "10<sup>-5</sup>",
                                                  "10<sup>-4</sup>", "0.001", "0.01", "0.1", "1"]
    sweep = tplot.cost_against_gamma(tv.SWEEP * 2, torch.linspace(1, 2, 13), 0.9, 0.02, "sweep")
    assert list(sweep.layout.xaxis.ticktext) == ["0.001", "0.01", "0.1", "1", "10", "100"]
    assert sweep.layout.xaxis.type == "log" and errors.layout.yaxis.type == "log"


def test_cost_against_gamma_is_drawn_in_the_sliders_unit_with_its_labels_on_their_lines():
    """The x axis is gamma / max C, as the slider; the slider's line and its label stand at the same place (on a log
    axis Plotly reads an annotation's x as log10 of the value), as do the error curve's tolerance and its label."""
    problem = link_state({})[0]
    s = tv.sweep(problem)
    np.testing.assert_allclose(s.gammas_rel.numpy(), tv.SWEEP.numpy())
    fig = tplot.cost_against_gamma(s.gammas_rel, s.costs, s.exact, 0.0355, "sweep")
    (line,) = [sh for sh in fig.layout.shapes if sh.x0 == sh.x1 == 0.0355]
    (label,) = [a for a in fig.layout.annotations if a.text.startswith("the slider")]
    assert 10 ** label.x == pytest.approx(line.x0) and fig.layout.xaxis.title.text == "gamma / max C"
    np.testing.assert_allclose(fig.data[0].x, tv.SWEEP.numpy())
    errors = tplot.marginal_error_curve([1, 10, 20], [0.5, 1e-3, 1e-7], 1e-6, "errors")
    (tol,) = errors.layout.annotations
    assert 10 ** tol.y == pytest.approx(1e-6) and errors.layout.shapes[0].y0 == 1e-6


@pytest.mark.parametrize("current", [1, 3, 12, 20])
def test_the_tolerances_label_stays_off_the_current_iterations_line(current):
    """'tol = 1e-6' stood at the right end, under the current iteration's line (the last, by default): it sits on
    its line at the left end, where the error is far above it, and just right of the current line when that line is
    near the left end; either way it starts left of the line only when the line is further right than it reaches."""
    errors = tplot.marginal_error_curve(list(range(1, 21)), np.logspace(0, -7, 20), 1e-6, "errors", current=current)
    (tol,) = errors.layout.annotations
    (line,) = [sh for sh in errors.layout.shapes if sh.x0 == sh.x1]
    assert 10 ** tol.y == pytest.approx(1e-6) and tol.yanchor == "bottom" and tol.xanchor == "left"
    if line.x0 > 1 + tplot.TOL_LABEL_ROOM * 19:
        assert tol.x == 1 and not tol.xshift                       # at the left end, the line far to its right
    else:
        assert tol.x == line.x0 and tol.xshift > 0                 # starts just right of the line


def test_sources_and_targets_are_counted_from_1_in_the_axes_hover_and_csv():
    from wviz import export

    P = torch.tensor([[0.1, 0.2, 0.0], [0.3, 0.0, 0.4]], dtype=torch.float64)
    fig = tplot.plan_with_marginals(P, P.sum(1), P.sum(0), "plan")
    heat = next(t for t in fig.data if t.type == "heatmap")
    assert list(heat.x) == [1, 2, 3] and list(heat.y) == [1, 2] and "i = %{y}, j = %{x}" in heat.hovertemplate
    assert list(fig.layout.xaxis4.tickvals) == [1, 2, 3] and list(fig.layout.yaxis3.tickvals) == [1, 2]
    bars = {t.name: t for t in fig.data if t.type == "bar"}
    assert list(bars["b (target)"].x) == [1, 2, 3] and list(bars["a (source)"].y) == [1, 2]
    table = export.figure_table(fig)
    cells = table[table["type"] == "heatmap"]
    got = {(int(i), int(j)): z for i, j, z in zip(cells["y"], cells["x"], cells["z"])}
    assert got[(2, 3)] == 0.4 and got[(1, 1)] == 0.1


def test_zero_entries_count_what_the_metric_says():
    """The metric counts entries below 1e-8 times the largest: an entropic plan has none exactly 0 at a large gamma,
    and more and more below the threshold as gamma shrinks (never fewer than its exact zeros)."""
    problem = link_state({})[0]
    shares = []
    for gamma_rel in (1.0, 0.01, 0.001):
        P = tv.transport(problem, "sinkhorn", gamma_rel).plan
        want = float((P <= tv.SPARSE_BELOW * P.max()).double().mean())
        assert tv.transport(problem, "sinkhorn", gamma_rel).sparsity == pytest.approx(want)
        assert want >= float((P == 0).double().mean())
        shares.append(want)
    assert shares[0] == 0 and shares[0] < shares[1] < shares[2]


@pytest.mark.parametrize("x", [0.0, 1.0, 0.123456, 123456.789, -1.23456e-5, 9.87654e12, 1e-300])
def test_metric_numbers_fit_in_eight_characters(x):
    text = common.number_text(x, chars=8)
    assert len(text) <= 8 and float(text) == pytest.approx(x, rel=0.06)


def test_side_by_side_uses_a_regularised_solver_and_grid_gammas():
    assert [tv.side_solver(s) for s in tv.SOLVERS] == ["sinkhorn", "sinkhorn", "quadratic"]
    assert tv.SIDE_GAMMAS == (0.001, 0.1)


def test_a_large_gamma_blurs_the_plan_to_the_independent_coupling():
    line = tv.clouds_from_table(tv.points_table("line", 40, 30, 0), "sqeuclidean")
    blur = tv.transport(line, "sinkhorn", 3.16).plan.numpy()
    assert np.abs(blur - np.outer(line.a, line.b)).sum() < 0.03         # gamma large: a b^T


# ---- what each guided experiment says to watch, on the numbers of the state its link opens ------------------------

def link_state(params: dict):
    """The problem, solver, gamma / max C and rho / max C that the page reads when a link sets ``params`` (every
    other widget at its default: the "line" preset, 40 x 30 points, seed 0, the first ground cost, Sinkhorn,
    gamma = 0.01 max C, rho = infinity; the typed cost matrix DEFAULT_COST)."""
    if params.get(tv.Keys.PROBLEM) == "cost matrix":
        C = tv.cost_from_text(tv.DEFAULT_COST)
        n, m = C.shape
        edited = params.get(tv.Keys.MARGINALS) == "edited"
        masses = (params[tv.Keys.A.format(n)], params[tv.Keys.B.format(m)]) if edited else ()
        problem = tv.cost_problem(C, *masses)
    else:
        table = tv.points_table(params.get(tv.Keys.PRESET, tv.PRESETS[0]), *tv.DEFAULT_SIZES, 0)
        problem = tv.clouds_from_table(table, tv.COST_KINDS[0])
    return (problem, params.get(tv.Keys.SOLVER, "sinkhorn"), params.get(tv.Keys.GAMMA_REL, 0.01),
            params.get(tv.Keys.RHO_REL, float("inf")))


def band_width(P: np.ndarray) -> np.ndarray:
    """Per source, the standard deviation of the target index its mass goes to (in targets)."""
    rows = P / P.sum(1, keepdims=True)
    j = np.arange(P.shape[1])
    return np.sqrt(np.maximum(rows @ j ** 2 - (rows @ j) ** 2, 0))


def watch_small_gamma(params):
    problem, solver, gamma_rel, _ = link_state(params)
    narrow = band_width(tv.transport(problem, solver, gamma_rel).plan.numpy()).mean()
    wide = band_width(tv.transport(problem, solver, 0.01).plan.numpy()).mean()
    assert narrow < 1.2 and 2.5 < wide < 3.5                              # about one target either side vs three
    s = tv.sweep(problem)
    at = int(np.argmin(np.abs(s.gammas_rel.numpy() - gamma_rel)))
    assert s.gammas_rel[at] == pytest.approx(gamma_rel)
    assert 0 < s.costs[at] - s.exact < 0.003 * s.exact                   # down to the dashed line
    assert (np.diff(s.costs.numpy()) > 0).all()                          # coming down as gamma shrinks


def watch_loose_targets(params):
    problem, solver, gamma_rel, rho_rel = link_state(params)
    loose = tv.transport(problem, solver, gamma_rel, rho_rel=rho_rel)
    balanced = tv.transport(problem, solver, gamma_rel)
    nearest = np.argsort(problem.C, axis=1)[:, :3]
    share = [np.take_along_axis(t.plan.numpy(), nearest, 1).sum(1).mean() / problem.a.mean() for t in (loose, balanced)]
    assert share[0] > 0.5 and share[1] < 1 / 5                          # to their nearest targets
    np.testing.assert_allclose(loose.columns.numpy(), loose.plan.numpy().sum(0))   # the black marks
    assert np.abs(loose.columns.numpy() - problem.b).sum() > 0.3         # the columns leave b
    sweep = tv.rho_sweep(problem, gamma_rel)
    assert loose.cost < balanced.cost and sweep.ends[1][0] == pytest.approx(balanced.cost, rel=1e-6)


def watch_exact(params):
    problem, solver, _, _ = link_state(params)
    P = tv.transport(problem, solver, 0.01).plan.numpy()
    n, m = P.shape
    assert (P > 0).sum() <= n + m - 1                                     # a vertex of U(a, b)
    assert P[:n // 2, :m // 2].sum() + P[n // 2:, m // 2:].sum() == pytest.approx(1, abs=1e-12)   # the two blocks
    C = problem.C
    top, bottom = C[:n // 2], C[n // 2:]
    assert top[:, :m // 2].mean() < top[:, m // 2:].mean() and bottom[:, m // 2:].mean() < bottom[:, :m // 2].mean()


def watch_uneven_masses(params):
    problem, solver, _, _ = link_state(params)
    a, b, C = problem.a / problem.a.sum(), problem.b / problem.b.sum(), problem.C
    assert a[0] == pytest.approx(1 / 2) and b[2] == pytest.approx(2 / 3)   # source 1, target 3 (counted from 1)
    assert a[1:].sum() < b[2]                                             # the others cannot fill target 3
    P = tv.transport(problem, solver, 0.01).plan.numpy() / problem.a.sum()
    assert P[0, 2] >= b[2] - a[1:].sum() - 1e-12 and C[0, 2] == C.max() == 4


def watch_sinkhorn_converge(params):
    problem, solver, gamma_rel, _ = link_state(params)
    iterations = []
    for g in (gamma_rel, 0.01):
        t = tv.transport(problem, solver, g)
        run = tv.scrub(problem, t.gamma, t.n_iter)
        errors = run.errors.numpy()
        assert run.converged and errors[-1] <= tv.TOL and (np.diff(errors) < 0).all()   # shrinks at every step
        ratios = errors[1:] / errors[:-1]
        late = ratios[len(ratios) // 2:]
        assert late.max() - late.min() < 0.01                             # by a steady factor at the end
        for step in run.iterations[1:]:
            assert np.abs(run.frame(step).columns.numpy() - problem.b).sum() < 1e-12   # the columns match b
        iterations.append(run.n_iter)
    assert iterations[0] > 5 * iterations[1]                             # more slowly the smaller gamma


WATCH = {"Send gamma to 0.001": watch_small_gamma, "Hold the targets loosely": watch_loose_targets,
         "Solve exactly": watch_exact, "Uneven masses": watch_uneven_masses,
         "Watch Sinkhorn converge": watch_sinkhorn_converge}


@pytest.mark.parametrize("item", tv.TRY_THIS, ids=lambda t: t.label)
def test_each_guided_experiment_shows_what_its_sentence_says(item):
    """Every Try link's sentence, checked on the numbers of the state the link opens; a new link needs its check."""
    assert item.label in WATCH, f"Try {item.label!r} has no check of what its sentence says"
    WATCH[item.label](item.params)


# ---- semi-relaxed -------------------------------------------------------------------------------------------------

def default_problem():
    return tv.clouds_from_table(tv.points_table(tv.PRESETS[0], 20, 15, 0), tv.COST_KINDS[0])


def test_rho_infinity_is_the_balanced_page_and_a_finite_rho_is_pots_semi_relaxed_plan():
    problem = default_problem()
    balanced, default = tv.transport(problem, "sinkhorn", 0.01, rho_rel=float("inf")), tv.transport(problem,
                                                                                                    "sinkhorn", 0.01)
    assert torch.equal(balanced.plan, default.plan) and not balanced.semi and balanced.columns is None
    t = tv.transport(problem, "sinkhorn", 0.01, rho_rel=0.1)
    a, b, C = problem.a, problem.b, problem.C
    gamma, rho = 0.01 * C.max(), 0.1 * C.max()
    assert t.semi and t.rho == pytest.approx(rho) and t.rho_rel == pytest.approx(0.1)
    ref = pot.unbalanced.sinkhorn_unbalanced(a, b, C, gamma, (np.inf, rho), numItermax=100000, stopThr=1e-14)
    np.testing.assert_allclose(t.plan.numpy(), ref, atol=1e-6)
    np.testing.assert_allclose(t.columns.numpy(), t.plan.sum(0).numpy(), atol=1e-12)
    q = t.plan.sum(0).numpy()
    assert t.column_kl == pytest.approx((q * np.log(q / b)).sum(), abs=1e-9)
    # the objective the page's equation splits: <C, P> + gamma KL(P | a b^T) + rho KL(P^T 1 | b)
    assert t.reg_cost == pytest.approx(t.cost + gamma * t.plan_kl + rho * t.column_kl, abs=1e-8)
    P = t.plan.numpy()
    assert t.plan_kl == pytest.approx((P * np.log(P / np.outer(a, b))).sum(), abs=1e-8)
    assert tv.transport(problem, "exact", 0.01, rho_rel=0.1).rho == float("inf")   # rho is Sinkhorn's


def test_cost_against_rho_runs_from_the_prior_softmax_to_the_balanced_plan():
    problem = default_problem()
    s = tv.rho_sweep(problem, 0.01)
    assert len(s.rhos) == len(tv.RHO_SWEEP) and s.gamma == pytest.approx(0.01 * problem.scale)
    assert (s.kls.diff() <= 1e-12).all()   # the columns' distance from b falls as rho grows
    (cost0, kl0), (cost_inf, kl_inf) = s.ends
    assert kl_inf < 1e-10 and kl0 > float(s.kls[0]) - 1e-9
    assert float(s.costs[0]) == pytest.approx(cost0, abs=1e-3) and float(s.costs[-1]) == pytest.approx(cost_inf,
                                                                                                       abs=1e-5)
    assert cost0 < cost_inf   # holding the targets costs transport
    fig = tplot.cost_against_rho(s, 0.1, "Cost and columns")
    assert fig.layout.yaxis2.type == "log" and len(fig.data) == 2


def test_the_semi_relaxed_scrubber_reports_the_rows_error():
    problem = default_problem()
    t = tv.transport(problem, "sinkhorn", 0.05, rho_rel=0.3)
    s = tv.scrub(problem, t.gamma, t.n_iter, rho=t.rho)
    assert s.converged and s.rho == t.rho
    frame = s.frame()
    assert frame.marginal_error(problem.a, problem.b) == pytest.approx(
        float(np.abs(frame.rows.numpy() - problem.a).sum()), abs=1e-15)
    np.testing.assert_allclose(frame.plan.numpy(), t.plan.numpy(), atol=1e-5)
    fig = tplot.main_figure(t)
    assert [tr.name for tr in fig.data if tr.type == "scatter"] == ["P^T 1 (column sums)", "P 1 (row sums)"]


def test_live_inputs_carry_the_released_plans_potentials_and_none_off_sinkhorn():
    """The browser re-solves the plan during a gamma or rho drag from the masses, the costs, the rho slider's
    options and the released plan's potentials: exp((f_i + g_j - C_ij) / gamma) is that plan, balanced or
    semi-relaxed. The exact solver has no gamma, the quadratic one runs in Python: nothing to follow."""
    problem = tv.cost_problem(tv.cost_from_text(tv.DEFAULT_COST))
    for rho_rel in (math.inf, 0.1):
        t = tv.transport(problem, "sinkhorn", 0.05, rho_rel=rho_rel)
        live = tv.live_inputs(t)
        f, g = torch.as_tensor(live["f"])[:, None], torch.as_tensor(live["g"])[None, :]
        gamma = 0.05 * live["scale"]
        assert live["scale"] == 4.0 and live["tol"] == tv.TOL and live["rhos"] == tv.RHOS
        assert torch.allclose(((f + g - torch.as_tensor(live["C"])) / gamma).exp(), t.plan, atol=1e-15, rtol=0)
    for solver in ("exact", "quadratic"):
        assert tv.live_inputs(tv.transport(problem, solver, 0.05)) is None
