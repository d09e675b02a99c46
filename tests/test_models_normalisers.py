"""wviz.models.normalisers: the prefix-balanced (causal) Sinkhorn against its equation, solved independently per
prefix (a numpy Sinkhorn loop, and wviz's encoder Sinkhorn, which runs POT-checked wviz.ot.sinkhorn), the identity
that plain Sinkhorn drifts to under a causal mask, and the masks."""
import math

import numpy as np
import pytest
import torch

from wviz.models.normalisers import causal_sinkhorn_attention, make_normaliser, sinkhorn_attention

T = 7
CAUSAL = torch.ones(T, T, dtype=torch.bool).tril()


def scores(seed=0, shape=(T, T)):
    return torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)) * 2


def prefix_np(S, gamma, n_iter, rho=math.inf):
    """Row i of A: n_i P^(i)_i for the prefix problem on tokens 0..i, by n_iter plain iterations in numpy (column
    update raised to phi = rho / (rho + gamma) for a finite rho, then the row update), the kernel exp(S / gamma)."""
    phi = 1.0 if math.isinf(rho) else rho / (rho + gamma)
    out = np.zeros_like(S)
    for i in range(S.shape[0]):
        K = np.exp(S[:i + 1, :i + 1] / gamma)
        u, v = np.ones(i + 1), np.ones(i + 1)
        for _ in range(n_iter):
            v = (1.0 / (K.T @ u)) ** phi
            u = 1.0 / (K @ v)
        P = u[:, None] * K * v[None, :]
        out[i, :i + 1] = P[i] / P[i].sum()
    return out


@pytest.mark.parametrize("gamma, n_iter, rho", [(1.0, 1, math.inf), (1.0, 5, math.inf), (0.5, 30, math.inf),
                                                (1.0, 5, 0.3), (2.0, 8, 5.0)])
def test_each_row_is_its_prefix_problem(gamma, n_iter, rho):
    S = scores()
    A = causal_sinkhorn_attention(S, CAUSAL, gamma, n_iter, rho)
    np.testing.assert_allclose(A.numpy(), prefix_np(S.numpy(), gamma, n_iter, rho), atol=1e-12)
    for i in range(T):   # and wviz's encoder Sinkhorn (wviz.ot) on the prefix alone gives the same row
        alone = sinkhorn_attention(S[:i + 1, :i + 1], gamma, n_iter, rho)[i]
        np.testing.assert_allclose(A[i, :i + 1].numpy(), alone.numpy(), atol=1e-9)
    assert float(A.triu(1).abs().max()) == 0.0                       # no weight on a future token
    np.testing.assert_allclose(A.sum(-1).numpy(), np.ones(T), atol=1e-12)


def test_prefix_plans_are_doubly_stochastic_when_converged():
    """The marginals of the equation: with many iterations each prefix plan n_i P^(i) has rows and columns summing
    to 1, and row i of the causal attention is its last row."""
    S = scores(1)
    A = causal_sinkhorn_attention(S, CAUSAL, 1.0, 300)
    for i in range(T):
        plan = sinkhorn_attention(S[:i + 1, :i + 1], 1.0, 300)
        np.testing.assert_allclose(plan.sum(-2).numpy(), np.ones(i + 1), atol=1e-8)
        np.testing.assert_allclose(A[i, :i + 1].numpy(), plan[i].numpy(), atol=1e-10)


def test_plain_sinkhorn_under_a_causal_mask_drifts_to_the_identity():
    """With uniform marginals the only doubly-stochastic lower-triangular matrix is the identity: plain Sinkhorn on
    the causally masked kernel gets there, the prefix-balanced one does not."""
    K = scores(2).exp().numpy() * CAUSAL.numpy()
    for _ in range(3000):
        K = K / K.sum(0, keepdims=True)
        K = K / K.sum(1, keepdims=True)
    np.testing.assert_allclose(K, np.eye(T), atol=0.02)
    A = causal_sinkhorn_attention(scores(2), CAUSAL, 1.0, 3000)
    assert float(A.diagonal()[1:].max()) < 0.9


def test_padding_and_batches():
    """Right padding: a padded key gets 0, a padded query's row is 0, the real block equals the text alone; the
    batch of heads is solved as each head alone (the prefixes are batched within a memory budget)."""
    S = scores(3, (2, 3, T, T))
    keep = CAUSAL.expand(2, 3, T, T).clone()
    keep[1, :, :, 5:] = False                                        # sentence 1 has 5 real tokens
    A = causal_sinkhorn_attention(S, keep, 1.0, 5)
    assert float(A[1, :, :, 5:].abs().max()) == 0.0 and float(A[1, :, 5:].abs().max()) == 0.0
    np.testing.assert_allclose(A[1, :, :5, :5].numpy(),
                               causal_sinkhorn_attention(S[1, :, :5, :5], CAUSAL[:5, :5], 1.0, 5).numpy(), atol=1e-12)
    np.testing.assert_allclose(A[0, 2].numpy(), causal_sinkhorn_attention(S[0, 2], CAUSAL).numpy(), atol=1e-12)


def test_the_normaliser_dispatches_causal_sinkhorn_and_masks_the_row_normalisers():
    S = scores(4).float()
    assert torch.equal(make_normaliser("sinkhorn")(S, CAUSAL, causal=True), causal_sinkhorn_attention(S, CAUSAL))
    for name in ("softmax", "sparsemax", "entmax"):
        A = make_normaliser(name)(S, CAUSAL)
        assert float(A.triu(1).abs().max()) == 0.0
        np.testing.assert_allclose(A.sum(-1).numpy(), np.ones(T), atol=1e-6)
    with pytest.raises(ValueError, match="every token of a row is masked"):
        causal_sinkhorn_attention(S, torch.zeros(T, T, dtype=torch.bool))


def test_scores_spread_over_many_gammas_fall_back_to_the_log_domain():
    """exp(S / gamma) leaves the float64 range here (S / gamma spans thousands): the prefix problems are then solved
    in the log domain, and still match wviz's stabilised encoder Sinkhorn on each prefix; right padding included."""
    S = scores(5) * 10
    keep = CAUSAL.clone()
    keep[:, 6:] = False                                              # the last token is padding
    A = causal_sinkhorn_attention(S, keep, 0.02, 5)
    assert bool(torch.isfinite(A).all()) and float(A[:, 6].abs().max()) == 0.0 and float(A[6].abs().max()) == 0.0
    for i in range(6):
        want = sinkhorn_attention(S[:i + 1, :i + 1], 0.02, 5)[i]
        np.testing.assert_allclose(A[i, :i + 1].numpy(), want.numpy(), atol=1e-9)
