"""The page-level computations: grid, landscape and tau sweep agree with the maps they are built on."""
import pytest
import torch

from wviz.views import attention_transport as av


def test_simplex_grid_covers_the_simplex():
    g = av.simplex_grid(10)
    assert g.shape == (66, 3)  # (r + 1)(r + 2) / 2 points
    assert torch.allclose(g.sum(-1), torch.ones(66, dtype=torch.float64)) and (g >= 0).all()
    assert len(torch.unique(g, dim=0)) == 66


@pytest.mark.parametrize("mechanism", list(av.MECHANISMS))
def test_tau_sweep_equals_one_call_per_tau(mechanism):
    s = torch.tensor([1.3, -0.2, 0.4, 0.9], dtype=torch.float64)
    prior = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    taus = torch.logspace(-2, 2, 9, dtype=torch.float64)
    sweep = av.tau_sweep(mechanism, s, taus, alpha=1.3, prior=prior)
    for t, row in zip(taus.tolist(), sweep):
        torch.testing.assert_close(row, av.attend(mechanism, s, t, alpha=1.3, prior=prior), atol=1e-10, rtol=0)


@pytest.mark.parametrize("mechanism", list(av.MECHANISMS))
def test_landscape_minimum_is_the_closed_form(mechanism):
    s = torch.tensor([0.7, 0.1, -0.5], dtype=torch.float64)
    land = av.landscape(mechanism, s, 0.5, alpha=1.5, prior=torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64))
    assert land.closed_value <= float(land.values.min()) + 1e-12  # no grid point beats the closed form
    assert abs(land.closed_value - land.numerical_value) < 1e-9
    torch.testing.assert_close(land.closed_form, land.numerical, atol=1e-5, rtol=0)


def test_landscape_needs_three_keys_and_prior_softmax_a_prior():
    with pytest.raises(ValueError, match="exactly 3 keys"):
        av.landscape("softmax", torch.zeros(4, dtype=torch.float64), 1.0)
    with pytest.raises(ValueError, match="needs a prior"):
        av.attend("prior-softmax", torch.zeros(3), 1.0)
    with pytest.raises(ValueError, match="unknown mechanism"):
        av.attend("hardmax", torch.zeros(3), 1.0)


def test_dot_scores_single_and_many_queries():
    q, k = av.random_queries_keys(5, 7, 3, seed=1, dtype=torch.float64)
    torch.testing.assert_close(av.dot_scores(q, k), q @ k.T)
    torch.testing.assert_close(av.dot_scores(q[2], k).squeeze(-1), k @ q[2])
