"""The Transport plans page's computations against POT and closed forms."""
import numpy as np
import ot as pot
import pytest
import torch

from wviz import samples
from wviz import transport_views as tv


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


def test_entropy_and_sparsity_closed_forms():
    P = torch.tensor([[0.5, 0.0], [0.25, 0.25]], dtype=torch.float64)
    assert abs(tv.entropy(P) - (0.5 * np.log(2) + 0.5 * np.log(4))) < 1e-12
    assert tv.sparsity(P) == 0.25
