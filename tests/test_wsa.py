"""wviz.wsa against independent references: scipy.stats.wasserstein_distance and POT (empirical W_p), scipy's
linear_sum_assignment and POT's emd2 (clouds), a hand computation of the gaussian reading, plain softmax / sigmoid;
the module against the function; gradients; bad input."""
import dataclasses
import math

import numpy as np
import ot
import pytest
import scipy.stats
import torch
from scipy.optimize import linear_sum_assignment

from wviz import wsa

F64 = torch.float64
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
EYE = torch.eye(4, dtype=F64)


def randn(*shape, seed=0, dtype=F64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def run(X, rep="gaussian", **kw):
    d = X.shape[-1]
    I = torch.eye(d, dtype=X.dtype)
    return wsa.wasserstein_self_attention(X, I, I, I, rep, **kw)


# ------------------------------------------------------------------------------------------------ distances

@pytest.mark.parametrize("p", [1, 2, 3])
def test_empirical_wp_matches_scipy_and_pot(p):
    Q, K = randn(5, 7, seed=1), randn(6, 7, seed=2) * 2
    W = wsa.wasserstein_distances(Q, K, "empirical", p=p)
    assert W.shape == (5, 6)
    for i in range(5):
        for j in range(6):
            q, k = Q[i].numpy(), K[j].numpy()
            # W is the OT cost W_p^p; POT's wasserstein_1d returns the same, scipy returns W_1
            assert W[i, j].item() == pytest.approx(ot.wasserstein_1d(q, k, p=p), rel=1e-9)
            if p == 1:
                assert W[i, j].item() == pytest.approx(scipy.stats.wasserstein_distance(q, k), rel=1e-9)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("k, dim", [(2, 2), (4, 3), (6, 1), (8, 2)])
def test_cloud_matches_linear_sum_assignment(k, dim, device):
    n = 6
    Q, K = randn(2, n, k * dim, seed=k), randn(2, n, k * dim, seed=k + 1)
    W = wsa.wasserstein_distances(Q.to(device), K.to(device), "cloud", k=k).cpu()
    for b in range(2):
        for i in range(n):
            for j in range(n):
                x, y = Q[b, i].reshape(k, dim).numpy(), K[b, j].reshape(k, dim).numpy()
                C = ((x[:, None] - y[None]) ** 2).sum(-1)
                r, c = linear_sum_assignment(C)
                assert W[b, i, j].item() == pytest.approx(C[r, c].mean(), rel=1e-12, abs=1e-12)
                if i == j == 0:  # and exact OT of the uniform clouds (POT's network simplex)
                    u = np.full(k, 1 / k)
                    assert W[b, i, j].item() == pytest.approx(ot.emd2(u, u, C), rel=1e-9)


def test_assignment_ties_constants_and_shapes():
    C = torch.randint(0, 3, (300, 6, 6)).double()  # many ties
    s = wsa.assignment(C)
    assert s.shape == (300, 6) and bool((s.sort(-1).values == torch.arange(6)).all())  # permutations
    got = C.gather(-1, s[..., None]).squeeze(-1).sum(-1)
    ref = torch.tensor([C[b].numpy()[linear_sum_assignment(C[b].numpy())].sum() for b in range(300)], dtype=F64)
    torch.testing.assert_close(got, ref)
    assert bool((wsa.assignment(torch.ones(2, 3, 5, 5)).sort(-1).values == torch.arange(5)).all())
    assert wsa.assignment(torch.zeros(4, 1, 1)).tolist() == [[0]] * 4
    with pytest.raises(ValueError, match="NaN or inf"):
        wsa.assignment(torch.tensor([[0.0, math.inf], [1.0, 0.0]]))
    with pytest.raises(ValueError, match="square"):
        wsa.assignment(torch.zeros(2, 3))
    big = torch.full((4, 4), 1e6, dtype=F64)
    big[0, 2] = big[2, 0] = 0.0
    assert wsa.assignment(big)[[0, 2]].tolist() == [2, 0]  # a large offset does not swallow the increments


@pytest.mark.parametrize("rep", wsa.REPRESENTATIONS)
def test_distance_zero_to_itself_and_gradients_flow(rep):
    X = randn(2, 5, 8, seed=3, dtype=torch.float32)
    res = run(X, rep, k=4)
    assert float(res.W.diagonal(dim1=-2, dim2=-1).abs().max()) < 1e-4
    # exactly 0 even where ||q||^2 is large (gaussian: the matrix-product expansion's near-zero entries are
    # recomputed from differences)
    assert bool((run(X * 30, rep, k=4).W.diagonal(dim1=-2, dim2=-1) == 0).all())
    assert bool((res.W >= 0).all())
    W_Q = torch.eye(8).requires_grad_()
    wsa.wasserstein_self_attention(X, W_Q, torch.eye(8), torch.eye(8), rep, k=4).Y.square().sum().backward()
    assert bool(torch.isfinite(W_Q.grad).all()) and float(W_Q.grad.abs().sum()) > 0


def test_cloud_gradient_is_the_assignment_cost_gradient():
    """The cost of the optimal assignment is linear in C near a unique optimum: gradcheck holds there."""
    Q, K = randn(3, 6, seed=5).requires_grad_(), randn(4, 6, seed=6).requires_grad_()
    assert torch.autograd.gradcheck(lambda q, k: wsa.wasserstein_distances(q, k, "cloud", k=3), (Q, K))
    assert torch.autograd.gradcheck(lambda q, k: wsa.wasserstein_distances(q, k, "gaussian"), (Q, K))


# ---------------------------------------------------------------------------------------------- weight maps

def test_weight_maps_as_specified():
    W = randn(3, 5, seed=1).abs() * 3
    torch.testing.assert_close(wsa.weights(W, "softmax", tau=0.5), torch.softmax(-W / 0.5, -1))
    raw = wsa.weights(W, "sigmoid", b=1.0, s=0.5, normalize=False)
    torch.testing.assert_close(raw, 1 / (1 + torch.exp(-(1.0 - W) / 0.5)))
    norm = wsa.weights(W, "sigmoid", b=1.0, s=0.5)
    torch.testing.assert_close(norm, raw / raw.sum(-1, keepdim=True))
    torch.testing.assert_close(norm.sum(-1), torch.ones(3, dtype=F64))
    # far beyond b every sigmoid underflows; the normalised rows still sum to 1 (no 0 / 0)
    far = wsa.weights(W + 1e4, "sigmoid", b=0.0, s=0.01)
    assert bool(torch.isfinite(far).all())
    torch.testing.assert_close(far.sum(-1), torch.ones(3, dtype=F64))
    # smaller distance, larger weight
    assert bool((norm.argmax(-1) == W.argmin(-1)).all())


# -------------------------------------------------------------------------------------------- the mechanism

def test_gaussian_reading_with_identity_weights_by_hand():
    X = torch.tensor([[0.0, 1.0, 0.0, math.log(4.0)],
                      [1.0, 1.0, math.log(9.0), 0.0],
                      [0.5, -1.0, 0.0, 0.0]], dtype=F64)
    # by hand: mean = first half, sigma = exp(log-variance / 2) = second half's sqrt(exp)
    mu = [(0.0, 1.0), (1.0, 1.0), (0.5, -1.0)]
    sig = [(1.0, 2.0), (3.0, 1.0), (1.0, 1.0)]
    W = np.array([[sum((a - b) ** 2 for a, b in zip(mu[i], mu[j])) + sum((a - b) ** 2 for a, b in zip(sig[i], sig[j]))
                   for j in range(3)] for i in range(3)])
    assert W[0, 1] == 1 + 4 + 1  # (0-1)^2 + (1-1)^2 + (1-3)^2 + (2-1)^2
    tau = 2.0
    A = np.exp(-W / tau) / np.exp(-W / tau).sum(1, keepdims=True)
    res = run(X, "gaussian", tau=tau)
    np.testing.assert_allclose(res.W.numpy(), W, atol=1e-12)
    np.testing.assert_allclose(res.A.numpy(), A, rtol=1e-12)
    np.testing.assert_allclose(res.Y.numpy(), A @ X.numpy(), rtol=1e-12)
    sig = run(X, "gaussian", weight_map="sigmoid", b=3.0, s=0.5, normalize=False)
    np.testing.assert_allclose(sig.A.numpy(), 1 / (1 + np.exp(-(3.0 - W) / 0.5)), rtol=1e-12)
    np.testing.assert_allclose(sig.Y.numpy(), sig.A.numpy() @ X.numpy(), rtol=1e-12)


def test_projections_and_batch():
    X = randn(3, 5, 6, seed=1)
    W_Q, W_K, W_V = randn(6, 4, seed=2), randn(6, 4, seed=3), randn(6, 3, seed=4)
    res = wsa.wasserstein_self_attention(X, W_Q, W_K, W_V, "cloud", "sigmoid", k=2, b=1.0)
    assert res.Y.shape == (3, 5, 3) and res.A.shape == res.W.shape == (3, 5, 5)
    for b in range(3):
        one = wsa.wasserstein_self_attention(X[b], W_Q, W_K, W_V, "cloud", "sigmoid", k=2, b=1.0)
        torch.testing.assert_close(res.Y[b], one.Y)
        torch.testing.assert_close(res.W[b], wsa.wasserstein_distances(X[b] @ W_Q, X[b] @ W_K, "cloud", k=2))
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.A = res.W


def test_dot_product_attention():
    X, W_Q, W_K, W_V = randn(5, 4, seed=1), randn(4, 3, seed=2), randn(4, 3, seed=3), randn(4, 2, seed=4)
    res = wsa.dot_product_attention(X, W_Q, W_K, W_V)
    Q, K, V = X @ W_Q, X @ W_K, X @ W_V
    A = torch.softmax(Q @ K.T / math.sqrt(3), -1)
    torch.testing.assert_close(res.A, A)
    torch.testing.assert_close(res.Y, A @ V)
    torch.testing.assert_close(res.W, -Q @ K.T / math.sqrt(3))


@pytest.mark.parametrize("rep, wmap", [("gaussian", "softmax"), ("empirical", "sigmoid"), ("cloud", "softmax")])
def test_module_forward_equals_function(rep, wmap):
    torch.manual_seed(0)
    mod = wsa.WassersteinSelfAttention(8, d_k=6, d_v=5, representation=rep, weight_map=wmap, tau=0.7, b=0.5, s=2.0,
                                       normalize=False, k=3, p=1, dtype=F64)
    X = randn(2, 4, 8, seed=9)
    out = mod(X)
    ref = wsa.wasserstein_self_attention(X, mod.W_Q, mod.W_K, mod.W_V, rep, wmap, tau=0.7, b=0.5, s=2.0,
                                         normalize=False, k=3, p=1)
    for name in ("Y", "A", "W"):
        torch.testing.assert_close(getattr(out, name), getattr(ref, name))
    assert out.Y.shape == (2, 4, 5)
    out.Y.sum().backward()
    assert all(p.grad is not None and bool(torch.isfinite(p.grad).all()) for p in mod.parameters())


# ----------------------------------------------------------------------------------------------- bad input

X0 = randn(4, 4, seed=0)


@pytest.mark.parametrize("kwargs, message", [
    (dict(X=X0[:, :3]), "to multiply X of width d = 3"),
    (dict(X=X0[0]), "X must have shape (..., n, d)"),
    (dict(W_K=torch.eye(4, 2, dtype=F64)), "W_Q and W_K must have the same number of columns"),
    (dict(W_Q=torch.eye(4, 3, dtype=F64), W_K=torch.eye(4, 3, dtype=F64)), "its width must be even; got 3"),
    (dict(representation="cloud", k=3), "4 is not divisible by 3"),
    (dict(representation="cloud", k=0), "k (points per cloud) must be a positive integer"),
    (dict(representation="empirical", p=0.5), "p must be >= 1"),
    (dict(representation="histogram"), "unknown representation 'histogram'"),
    (dict(weight_map="relu"), "unknown weight_map 'relu'"),
    (dict(tau=0.0), "tau must be a positive finite number"),
    (dict(weight_map="sigmoid", s=-1.0), "s must be a positive finite number"),
    (dict(weight_map="sigmoid", b=math.nan), "b must be a finite number"),
    (dict(X=X0.clone().index_fill_(0, torch.tensor([2]), math.nan)), "X contains NaN or inf"),
    (dict(W_V=torch.full((4, 4), math.inf, dtype=F64)), "W_V contains NaN or inf"),
    (dict(X=X0.numpy()), "X must be a torch tensor"),
    (dict(X=X0 * 1e3), "the distances overflowed"),
    (dict(X=X0 * 1e200, representation="cloud"), "the distances overflowed"),
])
def test_bad_input_raises(kwargs, message):
    args = dict(X=X0, W_Q=EYE, W_K=EYE, W_V=EYE) | kwargs
    X, W_Q, W_K, W_V = args.pop("X"), args.pop("W_Q"), args.pop("W_K"), args.pop("W_V")
    with pytest.raises(ValueError) as err:
        wsa.wasserstein_self_attention(X, W_Q, W_K, W_V, **args)
    assert message in str(err.value)


def test_bad_module_config_and_dot_product_input():
    with pytest.raises(ValueError, match="width must be even"):
        wsa.WassersteinSelfAttention(4, d_k=3)
    with pytest.raises(ValueError, match="d_model must be a positive integer"):
        wsa.WassersteinSelfAttention(0)
    # 0 is not "the default width": only None is
    with pytest.raises(ValueError, match="d_k must be a positive integer, got 0"):
        wsa.WassersteinSelfAttention(4, d_k=0)
    with pytest.raises(ValueError, match="d_v must be a positive integer, got 0"):
        wsa.WassersteinSelfAttention(4, d_v=0)
    with pytest.raises(ValueError, match="d_k must be a positive integer, got True"):
        wsa.WassersteinSelfAttention(4, d_k=True)
    mod = wsa.WassersteinSelfAttention(4, d_k=None, d_v=2)
    assert mod.W_Q.shape == mod.W_K.shape == (4, 4) and mod.W_V.shape == (4, 2)
    with pytest.raises(ValueError, match="tau must be a positive"):
        wsa.WassersteinSelfAttention(4, tau=-1)
    with pytest.raises(ValueError, match="to multiply X"):
        wsa.dot_product_attention(X0, torch.eye(3, dtype=F64), EYE, EYE)
