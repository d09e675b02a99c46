"""The page-level computations: grid, landscape and tau sweep agree with the maps they are built on."""
import numpy as np
import pandas as pd
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


def test_scores_from_the_page_inputs_are_dot_products():
    keys = pd.DataFrame({"x": [1.0, 0.2, -0.8], "y": [0.2, 1.0, -0.4]})
    s = av.scores_from_points((1.0, 0.3), keys)
    np.testing.assert_allclose(s.numpy(), keys.to_numpy() @ np.array([1.0, 0.3]), atol=1e-15)
    with pytest.raises(ValueError, match="row 2, column y"):
        av.scores_from_points((1.0, 0.3), keys.assign(y=[0.2, None, 1.0]))
    with pytest.raises(ValueError, match="at least one key"):
        av.scores_from_points((1.0, 0.3), keys.iloc[:0])
    q, k = av.random_queries_keys(1, 6, 4, seed=3, dtype=torch.float64)
    torch.testing.assert_close(av.scores_random(6, 4, 3), k @ q[0])
    assert av.scores_typed("2, -inf 0.5").tolist() == [2.0, float("-inf"), 0.5]


def numpy_sparsemax(z):
    """Euclidean projection onto the simplex by sorting (Martins & Astudillo 2016, Algorithm 1)."""
    zs = np.sort(z)[::-1]
    k = np.arange(1, len(z) + 1)
    support = 1 + k * zs > np.cumsum(zs)
    theta = (np.cumsum(zs)[support][-1] - 1) / k[support][-1]
    return np.maximum(z - theta, 0)


@pytest.mark.parametrize("tau", [0.5, 1.0, 3.0])
def test_weights_and_summary_against_numpy(tau):
    s = torch.tensor([1.06, 0.5, -0.92], dtype=torch.float64)
    w = av.weights(av.Inputs(s, None, ("softmax", "sparsemax"), 1.5), tau)
    e = np.exp((s.numpy() - s.numpy().max()) / tau)
    p = e / e.sum()
    np.testing.assert_allclose(w.p["softmax"].numpy(), p, atol=1e-15)
    np.testing.assert_allclose(w.p["sparsemax"].numpy(), numpy_sparsemax(s.numpy() / tau), atol=1e-12)
    table = av.summary(w)
    assert table["support size"].tolist() == [3, int((numpy_sparsemax(s.numpy() / tau) > 0).sum())]
    assert table["entropy (nats)"][0] == pytest.approx(-(p * np.log(p)).sum(), abs=1e-12)
    assert table["objective"][0] == pytest.approx(-(s.numpy() @ p) + tau * (p * np.log(p)).sum(), abs=1e-12)
    with pytest.raises(ValueError, match="at least one mechanism"):
        av.Inputs(s, None, (), 1.5)


def test_a_uniform_prior_table_gives_softmax_and_many_queries_rows_sum_to_one():
    s = torch.tensor([0.3, -0.2, 1.0], dtype=torch.float64)
    prior = av.prior_from_table(av.prior_table(3))
    w = av.weights(av.Inputs(s, prior, ("softmax", "prior-softmax"), 1.5), 1.0)
    torch.testing.assert_close(w.p["prior-softmax"], w.p["softmax"])
    res = av.many_queries("sparsemax", 64, 1024, 8, 0, 1.0, 1.5)
    assert res.block == (1, 2) and tuple(res.pooled.shape) == (64, 512)
    # block means of rows that sum to 1 over 1024 keys: each pooled row sums to 1 / 2
    np.testing.assert_allclose(res.pooled.sum(-1).numpy(), 0.5, atol=1e-5)
    assert 1 <= res.mean_support <= 1024
