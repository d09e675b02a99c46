"""Attention rollout (abnar2020) against hand computations and an explicit numpy product: the heads averaged, the
residual path counted as (A + I) / 2, later layers on the left; rows summing to one."""

import numpy as np
import pytest
import torch

from wviz.vit.rollout import rollout

# Two layers of two heads over two tokens, with the product worked out by hand:
#   layer 1: heads [[1, 0], [.5, .5]] and [[0, 1], [.5, .5]]; their mean [[.5, .5], [.5, .5]];
#            A'_1 = (mean + I) / 2 = [[.75, .25], [.25, .75]]
#   layer 2: heads [[0, 1], [0, 1]] and [[0, 1], [1, 0]]; their mean [[0, 1], [.5, .5]];
#            A'_2 = (mean + I) / 2 = [[.5, .5], [.25, .75]]
#   R = A'_2 A'_1 = [[.5 * .75 + .5 * .25, .5 * .25 + .5 * .75], [.25 * .75 + .75 * .25, .25 * .25 + .75 * .75]]
#     = [[.5, .5], [.375, .625]]
LAYER_1 = torch.tensor([[[1.0, 0.0], [0.5, 0.5]], [[0.0, 1.0], [0.5, 0.5]]])
LAYER_2 = torch.tensor([[[0.0, 1.0], [0.0, 1.0]], [[0.0, 1.0], [1.0, 0.0]]])


def test_two_layers_by_hand():
    assert rollout([LAYER_1, LAYER_2]).tolist() == [[0.5, 0.5], [0.375, 0.625]]
    # the order of the layers matters: the first layer's attention acts first (rightmost)
    assert rollout([LAYER_2, LAYER_1]).tolist() == [[0.4375, 0.5625], [0.3125, 0.6875]]
    # one layer: just (mean of the heads + I) / 2
    assert rollout([LAYER_1]).tolist() == [[0.75, 0.25], [0.25, 0.75]]


def test_attention_to_oneself_leaves_every_token_itself():
    eye = torch.eye(5).expand(3, 5, 5)
    torch.testing.assert_close(rollout([eye] * 4), torch.eye(5), rtol=0, atol=0)


def _random_attention(*shape, generator):
    return torch.softmax(3 * torch.randn(*shape, generator=generator, dtype=torch.float64), dim=-1)


def test_batched_against_an_explicit_numpy_product():
    """(B, H, N, N) per layer: each image's rollout is the numpy product of its layers, rows summing to one."""
    g = torch.Generator().manual_seed(0)
    layers = [_random_attention(2, 3, 6, 6, generator=g) for _ in range(4)]
    R = rollout(layers)
    assert R.shape == (2, 6, 6) and R.dtype == torch.float64
    for b in range(2):
        want = np.eye(6)
        for A in layers:
            want = 0.5 * (A[b].numpy().mean(axis=0) + np.eye(6)) @ want
        np.testing.assert_allclose(R[b].numpy(), want, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(R.sum(-1).numpy(), 1.0, atol=1e-12)
    # the residual path keeps at least (1/2)^L of every token in itself
    assert bool((torch.diagonal(R, dim1=-2, dim2=-1) >= 0.5 ** 4).all())


def test_the_bundled_models_rollout_is_the_product_over_their_blocks():
    """On a test digit through the bundled ViTs (004): the class token's row over the patches, as the inspector
    draws it, is that of the numpy product; with its own share it sums to one."""
    from wviz.vit import data
    from wviz.vit.demo import load_bundled

    x, _ = data.load_dataset("digits", "test")
    for kind in ("stochastic", "deterministic"):
        with torch.no_grad():
            out = load_bundled(kind, "cpu", "digits").model(x[1:2])
        attn = [A[0].double().numpy() for A in out.attentions]
        n = attn[0].shape[-1]
        want = np.eye(n)
        for A in attn:
            want = 0.5 * (A.mean(axis=0) + np.eye(n)) @ want
        got = rollout(out.attentions)[0].double().numpy()
        np.testing.assert_allclose(got[0, 1:], want[0, 1:], atol=1e-6)
        assert abs(got[0].sum() - 1) < 1e-5


def test_bad_input_says_what_is_wrong():
    with pytest.raises(ValueError, match="at least one layer"):
        rollout([])
    with pytest.raises(ValueError, match=r"layer 1's attention has shape \(2, 3, 3\)"):
        rollout([LAYER_1, torch.ones(2, 3, 3) / 3])
    with pytest.raises(ValueError, match="layer 0's attention"):
        rollout([torch.ones(2, 2)])
