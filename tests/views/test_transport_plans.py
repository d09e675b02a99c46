"""The Transport plans page's computations against POT and closed forms."""
import numpy as np
import ot as pot
import pytest
import torch
from scipy.special import logsumexp

from wviz import samples
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


def test_entropy_and_sparsity_closed_forms():
    P = torch.tensor([[0.5, 0.0], [0.25, 0.25]], dtype=torch.float64)
    assert abs(tv.entropy(P) - (0.5 * np.log(2) + 0.5 * np.log(4))) < 1e-12
    assert tv.sparsity(P) == 0.25
