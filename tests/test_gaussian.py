"""wviz.gaussian against independent references: scipy.linalg.sqrtm and POT's bures_wasserstein_distance on random
SPD matrices; metric properties; diagonal vs full path; pairwise vs looped; rank-deficient limits and exact
degenerate cases; gradients; the 2-D helpers; bad input."""
import dataclasses
import math

import numpy as np
import ot
import pytest
import scipy.linalg
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from wviz import gaussian as G

F64 = torch.float64
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def gen(seed):
    return torch.Generator().manual_seed(seed)


def spd(*lead, d, seed=0, rank=None, dtype=F64):
    """Random symmetric PSD matrices (..., d, d) of the given rank (full rank: + 0.1 I)."""
    A = torch.randn(*lead, d, rank or d, generator=gen(seed), dtype=dtype)
    S = A @ A.mT
    return S if rank else S + 0.1 * torch.eye(d, dtype=dtype)


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=gen(seed), dtype=F64)


def w2_sqrtm(m1, S1, m2, S2):
    """The closed form with scipy's matrix square roots (numpy, one pair)."""
    r2 = scipy.linalg.sqrtm(S2)
    cross = scipy.linalg.sqrtm(r2 @ S1 @ r2)
    return float(((m1 - m2) ** 2).sum() + np.trace(S1 + S2 - 2 * cross).real)


# ------------------------------------------------------------------------------------------------ references

@pytest.mark.parametrize("d", [1, 2, 3, 8])
def test_w2_matches_scipy_sqrtm_and_pot(d):
    m1, m2 = randn(6, d, seed=1), randn(6, d, seed=2)
    S1, S2 = spd(6, d=d, seed=3), spd(6, d=d, seed=4)
    got = G.w2_squared(m1, S1, m2, S2)
    for b in range(6):
        a = [x[b].numpy() for x in (m1, S1, m2, S2)]
        assert got[b].item() == pytest.approx(w2_sqrtm(*a), rel=1e-9, abs=1e-10)
        # POT returns W2 itself, not W2^2
        pot = ot.gaussian.bures_wasserstein_distance(a[0], a[2], a[1], a[3])
        assert got[b].item() == pytest.approx(pot ** 2, rel=1e-9, abs=1e-10)


def test_parts_split_mean_and_covariance():
    m1, m2, S1, S2 = randn(4, 3, seed=1), randn(4, 3, seed=2), spd(4, d=3, seed=3), spd(4, d=3, seed=4)
    parts = G.w2_squared_parts(m1, S1, m2, S2)
    torch.testing.assert_close(parts.mean, ((m1 - m2) ** 2).sum(-1))
    torch.testing.assert_close(parts.covariance, G.w2_squared(m1 * 0, S1, m2 * 0, S2))
    torch.testing.assert_close(parts.total, G.w2_squared(m1, S1, m2, S2))
    with pytest.raises(dataclasses.FrozenInstanceError):
        parts.mean = parts.covariance


def test_diagonal_closed_form_and_full_path_agree():
    m1, m2 = randn(5, 4, seed=1), randn(5, 4, seed=2)
    v1, v2 = torch.rand(5, 4, generator=gen(3), dtype=F64), torch.rand(5, 4, generator=gen(4), dtype=F64)
    diag = G.w2_squared(m1, v1, m2, v2)
    torch.testing.assert_close(diag, ((m1 - m2) ** 2).sum(-1) + ((v1.sqrt() - v2.sqrt()) ** 2).sum(-1))
    torch.testing.assert_close(G.w2_squared(m1, torch.diag_embed(v1), m2, torch.diag_embed(v2)), diag)
    torch.testing.assert_close(G.w2_squared(m1, v1, m2, torch.diag_embed(v2)), diag)  # mixed sides
    torch.testing.assert_close(G.pairwise_w2_squared(m1, v1, m2, v2),
                               G.pairwise_w2_squared(m1, torch.diag_embed(v1), m2, torch.diag_embed(v2)))


def test_broadcasting_over_leading_dims():
    m1, S1 = randn(3, 1, 2, seed=1), spd(3, 1, d=2, seed=2)
    m2, S2 = randn(4, 2, seed=3), spd(4, d=2, seed=4)
    got = G.w2_squared(m1, S1, m2, S2)
    assert got.shape == (3, 4)
    assert got[2, 1].item() == pytest.approx(G.w2_squared(m1[2, 0], S1[2, 0], m2[1], S2[1]).item(), rel=1e-12)


# ------------------------------------------------------------------------------------------ metric properties

@pytest.mark.parametrize("diagonal", [True, False])
def test_symmetric_zero_on_identical_and_triangle_inequality(diagonal):
    d, n = 3, 40
    ms = [randn(n, d, seed=s) * 2 for s in (1, 2, 3)]
    Ss = [torch.rand(n, d, generator=gen(s), dtype=F64) * 3 if diagonal else spd(n, d=d, seed=s, rank=1 + s % 3)
          for s in (4, 5, 6)]
    w = lambda i, j: G.w2_squared(ms[i], Ss[i], ms[j], Ss[j])  # noqa: E731
    # rank-deficient covariances: a zero eigenvalue computed as +-eps * |S| becomes sqrt(eps * |S|) ~ 1e-8 |S| in
    # the trace of the square root, so agreement is to about sqrt(eps), not eps
    torch.testing.assert_close(w(0, 1), w(1, 0), rtol=1e-6, atol=1e-6)
    assert float(w(0, 0).abs().max()) < 1e-6
    a, b, c = w(0, 1).sqrt(), w(1, 2).sqrt(), w(0, 2).sqrt()
    assert bool((c <= a + b + 1e-6).all())


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(0, 4), st.integers(0, 4), st.floats(1e-3, 1e3), st.integers(0, 10 ** 6))
def test_never_nan_on_any_psd_input(d, r1, r2, scale, seed):
    """Any PSD covariances (any rank, any scale, float32 or float64) give a finite W2^2 >= 0."""
    for dtype in (torch.float32, F64):
        S1 = spd(d=d, seed=seed, rank=min(r1, d) or None, dtype=dtype) * scale if r1 else torch.zeros(d, d, dtype=dtype)
        S2 = spd(d=d, seed=seed + 1, rank=min(r2, d) or None, dtype=dtype) * scale
        m = torch.zeros(d, dtype=dtype)
        w = G.w2_squared(m, S1, m + 1, S2)
        assert bool(torch.isfinite(w)) and float(w) >= 0


# ----------------------------------------------------------------------------------------------- pairwise

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("diagonal", [True, False])
def test_pairwise_equals_looped(diagonal, device):
    n, m, d = 5, 7, 3
    mq, mk = randn(2, n, d, seed=1), randn(2, m, d, seed=2)
    if diagonal:
        Sq, Sk = torch.rand(2, n, d, generator=gen(3), dtype=F64), torch.rand(2, m, d, generator=gen(4), dtype=F64)
    else:
        Sq, Sk = spd(2, n, d=d, seed=3), spd(2, m, d=d, seed=4)
    got = G.pairwise_w2_squared(*(x.to(device) for x in (mq, Sq, mk, Sk))).cpu()
    assert got.shape == (2, n, m)
    ref = torch.tensor([[[G.w2_squared(mq[b, i], Sq[b, i], mk[b, j], Sk[b, j]).item() for j in range(m)]
                         for i in range(n)] for b in range(2)], dtype=F64)
    torch.testing.assert_close(got, ref, rtol=1e-9, atol=1e-9)
    parts = G.pairwise_w2_parts(mq, Sq, mk, Sk)
    torch.testing.assert_close(parts.total, ref, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(parts.mean, ((mq[:, :, None] - mk[:, None]) ** 2).sum(-1))


def test_w2_attention_is_softmax_of_minus_w2_over_tau():
    mq, Sq = randn(4, 2, seed=1), spd(4, d=2, seed=2)
    A = G.w2_attention(mq, Sq, mq, Sq, tau=0.7)
    torch.testing.assert_close(A, torch.softmax(-G.pairwise_w2_squared(mq, Sq, mq, Sq) / 0.7, -1))
    torch.testing.assert_close(A.sum(-1), torch.ones(4, dtype=F64))
    assert bool((A.argmax(-1) == torch.arange(4)).all())  # each Gaussian is closest to itself


# --------------------------------------------------------------------------------- rank-deficient covariances

def test_rank_deficient_exact_cases():
    m1, m2 = randn(3, seed=1), randn(3, seed=2)
    Z, S = torch.zeros(3, 3, dtype=F64), spd(d=3, seed=3)
    mean = float(((m1 - m2) ** 2).sum())
    assert G.w2_squared(m1, Z, m2, Z).item() == pytest.approx(mean, rel=1e-12)          # two point masses
    assert G.w2_squared(m1, Z, m2, S).item() == pytest.approx(mean + float(S.trace()), rel=1e-12)
    assert G.w2_squared(m1, S, m2, Z).item() == pytest.approx(mean + float(S.trace()), rel=1e-12)
    # rank one: a a^T and b b^T have Bures part |a|^2 + |b|^2 - 2 |a.b|
    a, b = randn(3, seed=4), randn(3, seed=5)
    want = float(a @ a + b @ b - 2 * (a @ b).abs())
    assert G.w2_squared(m1 * 0, torch.outer(a, a), m2 * 0, torch.outer(b, b)).item() == pytest.approx(want, abs=1e-7)


def test_rank_deficient_equals_the_limit():
    m1, m2 = randn(4, seed=1), randn(4, seed=2)
    S1, S2 = spd(d=4, seed=3, rank=2), spd(d=4, seed=4, rank=1)
    at = G.w2_squared(m1, S1, m2, S2).item()
    assert math.isfinite(at)
    I = torch.eye(4, dtype=F64)
    near = [G.w2_squared(m1, S1 + e * I, m2, S2 + e * I).item() for e in (1e-6, 1e-8, 1e-10)]
    assert [abs(x - at) for x in near] == sorted([abs(x - at) for x in near], reverse=True)
    assert near[-1] == pytest.approx(at, abs=1e-4)
    # and scipy's sqrtm agrees on the nearly singular neighbour
    assert near[-1] == pytest.approx(w2_sqrtm(m1.numpy(), (S1 + 1e-10 * I).numpy(), m2.numpy(),
                                              (S2 + 1e-10 * I).numpy()), abs=1e-6)


# --------------------------------------------------------------------------------------------------- gradients

def test_gradcheck_diagonal_path():
    m1, m2 = randn(3, 4, seed=1).requires_grad_(), randn(3, 4, seed=2).requires_grad_()
    v1 = (torch.rand(3, 4, generator=gen(3), dtype=F64) + 0.1).requires_grad_()
    v2 = (torch.rand(3, 4, generator=gen(4), dtype=F64) + 0.1).requires_grad_()
    assert torch.autograd.gradcheck(G.w2_squared, (m1, v1, m2, v2))
    assert torch.autograd.gradcheck(G.pairwise_w2_squared, (m1, v1, m2, v2))


def test_gradcheck_full_path_distinct_eigenvalues():
    m1, m2 = randn(2, 3, seed=1).requires_grad_(), randn(2, 3, seed=2).requires_grad_()
    S1, S2 = spd(2, d=3, seed=3).requires_grad_(), spd(2, d=3, seed=4).requires_grad_()
    sym = lambda S: (S + S.mT) / 2  # noqa: E731  (gradcheck perturbs one entry at a time: keep S symmetric)
    assert torch.autograd.gradcheck(lambda a, A, b, B: G.w2_squared(a, sym(A), b, sym(B)), (m1, S1, m2, S2))
    assert torch.autograd.gradcheck(lambda a, A, b, B: G.pairwise_w2_squared(a, sym(A), b, sym(B)), (m1, S1, m2, S2))


def test_gradient_finite_at_zero_variance():
    v = torch.tensor([0.0, 1.0], dtype=F64, requires_grad=True)
    G.w2_squared(torch.zeros(2, dtype=F64), v, torch.ones(2, dtype=F64), torch.ones(2, dtype=F64)).backward()
    assert bool(torch.isfinite(v.grad).all())


# ----------------------------------------------------------------------------------------------- 2-D helpers

def test_gaussian_from_params_and_ellipse():
    means = torch.tensor([[0.0, 0.0], [1.0, -1.0], [2.0, 0.5]], dtype=F64)
    S = G.gaussian_from_params(means, torch.tensor([1.0, 0.5, 2.0], dtype=F64), 0.3,
                               torch.tensor([0.0, -0.6, 1.0], dtype=F64))
    assert S.shape == (3, 2, 2)
    torch.testing.assert_close(S[1], torch.tensor([[0.25, -0.6 * 0.5 * 0.3], [-0.6 * 0.5 * 0.3, 0.09]], dtype=F64))
    E = G.ellipse(means[:2], S[:2], n_sigma=2.0, n_points=50)
    assert E.shape == (2, 50, 2)
    torch.testing.assert_close(E[:, 0], E[:, -1])  # closed
    for i in range(2):  # every point lies on (x - m)^T S^{-1} (x - m) = n_sigma^2
        x = E[i] - means[i]
        torch.testing.assert_close((x @ torch.linalg.inv(S[i]) * x).sum(-1), torch.full((50,), 4.0, dtype=F64))
    E = G.ellipse(means[2], S[2], 1.0, 20)  # rho = 1: a segment along (2, 0.3)
    assert bool(torch.isfinite(E).all())
    d = E - means[2]
    torch.testing.assert_close(d[:, 0] * 0.3 - d[:, 1] * 2.0, torch.zeros(20, dtype=F64), atol=1e-12, rtol=0)
    torch.testing.assert_close(G.ellipse(means[0], torch.tensor([4.0, 1.0], dtype=F64), 1, 5)[1],
                               torch.tensor([0.0, 1.0], dtype=F64), atol=1e-12, rtol=0)  # variances accepted


def test_float32_close_to_float64():
    mq, Sq = randn(8, 3, seed=1), spd(8, d=3, seed=2)
    w64 = G.pairwise_w2_squared(mq, Sq, mq, Sq)
    w32 = G.pairwise_w2_squared(mq.float(), Sq.float(), mq.float(), Sq.float())
    assert w32.dtype == torch.float32 and bool(torch.isfinite(w32).all())
    torch.testing.assert_close(w32.double(), w64, rtol=1e-3, atol=1e-3)


def test_float32_pairwise_diagonal_cancellation_bound_and_exact_zero():
    """The diagonal path expands ||x_i - y_j||^2 = ||x_i||^2 + ||y_j||^2 - 2 x_i.y_j over x = [m, sigma] (width
    2d): every entry lies within (2d + 2) eps (||x_i||^2 + ||y_j||^2) of the exact value, and identical tokens give
    exactly 0 (not ~eps ||x||^2) although ||x||^2 ~ 1e5 here. Keys: the queries, slightly moved copies, others."""
    d = 8
    mq = (randn(6, d, seed=1) * 100).float()
    vq = torch.rand(6, d, generator=gen(2)).float() * 4
    mk = torch.cat([mq, mq + 1e-3 * randn(6, d, seed=3).float(), (randn(4, d, seed=4) * 100).float()])
    vk = torch.cat([vq, vq * 1.001, torch.rand(4, d, generator=gen(5)).float()])
    W = G.pairwise_w2_squared(mq, vq, mk, vk)
    assert W.dtype == torch.float32
    assert bool((W.diagonal() == 0).all())  # the first 6 keys are the queries
    x, y = (torch.cat([m.double(), v.double().sqrt()], -1) for m, v in ((mq, vq), (mk, vk)))
    exact = ((x[:, None] - y[None]) ** 2).sum(-1)
    bound = (2 * d + 2) * torch.finfo(torch.float32).eps * ((x * x).sum(-1)[:, None] + (y * y).sum(-1)[None])
    assert bool(((W.double() - exact).abs() <= bound).all())
    assert bool((W >= 0).all())
    # the parts path too
    parts = G.pairwise_w2_parts(mq, vq, mq, vq)
    assert bool((parts.mean.diagonal() == 0).all()) and bool((parts.covariance.diagonal() == 0).all())


# ----------------------------------------------------------------------------------------------- bad input

M2, S22 = torch.zeros(4, 2, dtype=F64), torch.eye(2, dtype=F64).expand(4, 2, 2).clone()


def _with(S, i, value):
    S = S.clone()
    S[i] = value
    return S


@pytest.mark.parametrize("args, message", [
    ((M2, _with(S22, 3, torch.tensor([[1.0, 0.0], [0.0, -0.2]])), M2, S22),
     "covariance of query token 3 is not positive semi-definite (smallest eigenvalue -0.2)"),
    ((M2, S22, M2, _with(S22, 1, torch.tensor([[1.0, 0.3], [0.5, 1.0]]))),
     "covariance of key token 1 is not symmetric"),
    ((M2, S22, M2, _with(S22, 2, torch.tensor([[1.0, math.nan], [math.nan, 1.0]]))),
     "covariance of key token 2 contains NaN or inf"),
    ((_with(M2, 0, torch.tensor([math.inf, 0.0])), S22, M2, S22), "mean of query token 0 contains NaN or inf"),
    ((M2, S22, _with(M2, 3, torch.tensor([0.0, math.nan])), S22), "mean of key token 3 contains NaN or inf"),
    ((M2, _with(torch.ones(4, 2, dtype=F64), 1, torch.tensor([math.nan, 1.0])), M2, torch.ones(4, 2, dtype=F64)),
     "covariance of query token 1 contains NaN or inf"),
    ((M2, torch.ones(4, 2, dtype=F64), M2[:0], torch.ones(0, 2, dtype=F64)),
     "the key means hold no tokens (shape (0, 2)); give at least one token"),
    ((M2[:0], S22[:0], M2, S22), "the query means hold no tokens (shape (0, 2))"),
    ((M2, _with(torch.ones(4, 2, dtype=F64), 2, torch.tensor([1.0, -0.5])), M2, S22),
     "variance of query token 2 is negative (-0.5)"),
    ((M2, S22[:3], M2, S22), "has shape (3, 2, 2) but the mean has (4, 2)"),
    ((M2, S22, torch.zeros(4, 3, dtype=F64), torch.ones(4, 3, dtype=F64)), "different dimensions: d = 2 and d = 3"),
    ((M2.expand(2, 4, 2), S22.expand(2, 4, 2, 2), torch.zeros(3, 4, 2, dtype=F64), torch.ones(3, 4, 2, dtype=F64)),
     "do not broadcast"),
    ((M2.numpy(), S22, M2, S22), "must be a torch tensor"),
    ((M2.long(), S22, M2, S22), "must be float32 or float64"),
    ((M2[0], S22[0], M2, S22), "need shape (..., n, d)"),
])
def test_pairwise_bad_input_raises(args, message):
    with pytest.raises(ValueError) as err:
        G.pairwise_w2_squared(*args)
    assert message in str(err.value)


def test_bad_input_other_functions():
    m, S = torch.zeros(2, dtype=F64), torch.tensor([[1.0, 0.0], [0.0, -3.0]], dtype=F64)
    with pytest.raises(ValueError,
                       match=r"covariance of Gaussian 2 is not positive semi-definite \(smallest eigenvalue -3\)"):
        G.w2_squared(m, torch.eye(2, dtype=F64), m, S)
    with pytest.raises(ValueError, match="tau must be a positive"):
        G.w2_attention(M2, S22, M2, S22, tau=0)
    means = torch.zeros(3, 2, dtype=F64)
    with pytest.raises(ValueError, match=r"rho of token 1 is 1.5; a correlation must lie in \[-1, 1\]"):
        G.gaussian_from_params(means, 1.0, 1.0, torch.tensor([0.0, 1.5, 0.0]))
    with pytest.raises(ValueError, match="sigma_y of token 2 is -1; a standard deviation must be >= 0"):
        G.gaussian_from_params(means, 1.0, torch.tensor([1.0, 1.0, -1.0]), 0.0)
    with pytest.raises(ValueError, match="sigma_x of token 0 is NaN"):
        G.gaussian_from_params(means, torch.tensor([math.nan, 1.0, 1.0]), 1.0, 0.0)
    with pytest.raises(ValueError, match="does not match"):
        G.gaussian_from_params(means, torch.ones(4), 1.0, 0.0)
    with pytest.raises(ValueError, match=r"covariance of token 1 is not positive semi-definite"):
        G.ellipse(means[:2], torch.stack([torch.eye(2, dtype=F64), -torch.eye(2, dtype=F64)]))
    with pytest.raises(ValueError, match="ellipses are drawn in 2-D"):
        G.ellipse(torch.zeros(3, dtype=F64), torch.eye(3, dtype=F64))
    with pytest.raises(ValueError, match="n_points"):
        G.ellipse(m, torch.eye(2, dtype=F64), 1.0, 2)
    with pytest.raises(ValueError, match="n_sigma"):
        G.ellipse(m, torch.eye(2, dtype=F64), -1.0)


@pytest.mark.parametrize("diagonal", [True, False])
def test_overflow_raises_instead_of_nan_or_a_wrong_number(diagonal):
    """float32 squares overflow above ~1.8e19: means of 1e20 made the matrix-product expansion NaN, and full
    covariances 1e20 I made S_2^{1/2} S_1 S_2^{1/2} inf, silently read as W2^2 = 4e20 between identical Gaussians
    (true value 0). Both are ValueErrors now; float64 handles the same inputs."""
    m = torch.full((3, 2), 1e20)
    S = torch.ones(3, 2) if diagonal else torch.eye(2).expand(3, 2, 2).clone()
    with pytest.raises(ValueError, match=r"W2\^2 overflows float32"):
        G.pairwise_w2_squared(m, S, m, S)
    with pytest.raises(ValueError, match=r"W2\^2 overflows float32"):
        G.pairwise_w2_parts(m, S, -m, S)
    with pytest.raises(ValueError, match=r"W2\^2 overflows float32"):
        G.w2_squared(m, S, -m, S)
    with pytest.raises(ValueError, match=r"W2\^2 overflows float32"):
        G.w2_attention(m, S, m, S)
    big = S * 1e20
    zero = torch.zeros(3, 2)
    if diagonal:  # variances 1e20 have sigma 1e10: no overflow, identical Gaussians at exactly 0
        assert bool((G.pairwise_w2_squared(zero, big, zero, big).diagonal() == 0).all())
    else:
        with pytest.raises(ValueError, match="covariances are too large for float32"):
            G.pairwise_w2_squared(zero, big, zero, big)
        with pytest.raises(ValueError, match="covariances are too large for float32"):
            G.w2_squared(zero, big, zero, big)
    w = G.pairwise_w2_squared(zero.double(), big.double(), zero.double(), big.double())
    assert bool((w == 0).all())  # identical Gaussians (all tokens equal): exactly 0 in float64
