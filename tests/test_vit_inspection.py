"""What one pass of 004's ViT says about each patch, against the pass itself read by numpy: tr(Sigma) summed per
patch token, a query's attention row (summing to one with the class token), every head of a block, the rollout."""

import numpy as np
import pytest
import torch

from wviz.vit import data
from wviz.vit.demo import load_bundled
from wviz.vit.inspection import block_of, head_maps, inspect_image, patch_map, query_attention
from wviz.vit.rollout import rollout


@pytest.fixture(scope="module")
def runs():
    """Test digit 1 through the bundled stochastic ViT and its deterministic twin (4 x 4 patches, 3 blocks)."""
    x, _ = data.load_dataset("digits", "test")
    return {kind: inspect_image(load_bundled(kind, "cpu", "digits").model, x[1], samples=8, seed=3)
            for kind in ("stochastic", "deterministic")}


def test_inspect_image_is_the_models_own_pass():
    x, _ = data.load_dataset("digits", "test")
    model = load_bundled("stochastic", "cpu", "digits").model
    run = inspect_image(model, x[1], samples=8, seed=3)
    with torch.no_grad():
        torch.testing.assert_close(run.out.logits, model(x[1:2]).logits)
    assert run.samples == 8 and abs(float(run.mc.mean.sum()) - 1) < 1e-5


@pytest.mark.parametrize("layer", [0, 1, 3])
def test_patch_map_is_the_covariance_trace(runs, layer):
    out = runs["stochastic"].out
    cov = out.covariances[layer][0].detach().numpy()          # (1 + P, D) diagonal covariances
    want = cov[1:].sum(axis=-1).reshape(4, 4)
    np.testing.assert_allclose(patch_map(out, layer, 4).numpy(), want, rtol=1e-6)
    assert patch_map(runs["deterministic"].out, layer, 4) is None
    with pytest.raises(ValueError, match="layer must be 0 to 3, got 9"):
        patch_map(out, 9, 4)


def test_query_attention_rows_sum_to_one_with_the_class_token(runs):
    out = runs["stochastic"].out
    for block in range(len(out.attentions)):
        for head in range(out.attentions[block].shape[1]):
            for query in (0, 6, 16):
                on_patches, on_class = query_attention(out, block, head, query, 4)
                assert on_patches.shape == (4, 4)
                assert abs(float(on_patches.sum()) + on_class - 1) < 1e-5
                A = out.attentions[block][0, head, query].detach().numpy()
                np.testing.assert_allclose(on_patches.numpy().ravel(), A[1:], atol=0)
                assert on_class == float(A[0])


def test_blocks_behind_the_layers():
    assert [block_of(layer) for layer in range(4)] == [0, 0, 1, 2]


def test_head_maps_are_every_heads_row_and_the_class_tokens_rollout(runs):
    for run in runs.values():
        out = run.out
        maps = head_maps(out, 2, 11, 4)
        assert maps.block == 2 and len(maps.per_head) == out.attentions[2].shape[1]
        for h, m in enumerate(maps.per_head):
            np.testing.assert_allclose(m.numpy().ravel(), out.attentions[2][0, h, 11, 1:].numpy(), atol=0)
        torch.testing.assert_close(maps.rollout, rollout(out.attentions)[0, 0, 1:].reshape(4, 4))


def test_an_overflowing_model_says_so():
    model = load_bundled("deterministic", "cpu", "digits").model
    x, _ = data.load_dataset("digits", "test")
    with pytest.raises(ValueError, match="not a finite number"):
        inspect_image(model, x[0] * float("inf"))
