"""One image through a ViT of 004, and what the pass says about each patch.

The forward pass on the means gives every layer's token covariances (eq. (5) for the embeddings, then their
propagation through attention, Sec. 4.2) and every block's attention weights; S passes with sampled embeddings give
the Monte-Carlo predictive (:func:`wviz.vit.model.mc_predict`). Read per patch, as (grid, grid) maps laid out like
the image (:mod:`wviz.vit.patches`): the covariance trace tr(Sigma) of each patch token at a layer, a query's
attention weights in one block and head, and the class token's attention rollout (abnar2020).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from wviz.vit.model import MCPrediction, ViTOutput, mc_predict
from wviz.vit.rollout import rollout

__all__ = ["Inspection", "inspect_image", "patch_map", "block_of", "query_attention", "HeadMaps", "head_maps"]


@dataclass(frozen=True)
class Inspection:
    """One image through one model: ``out`` the forward pass on the means (batch of 1), ``mc`` the Monte-Carlo
    predictive over ``samples`` draws."""

    out: ViTOutput
    mc: MCPrediction
    samples: int


@torch.no_grad()
def inspect_image(model, image: torch.Tensor, samples: int = 32, seed: int = 0) -> Inspection:
    """Run one (C, H, W) image through ``model`` (on the model's device). ValueError when the model's output
    overflows (inf or NaN) rather than showing NaN.

    >>> from wviz.vit.inspection import inspect_image
    >>> import torch
    >>> from wviz.vit.model import ViTConfig, build_model
    >>> _ = torch.manual_seed(0)
    >>> run = inspect_image(build_model(ViTConfig(dim=8, depth=1, heads=2)), torch.rand(1, 16, 16), samples=4)
    >>> round(float(run.mc.mean.sum()), 4), len(run.out.covariances)    # p(y | x) sums to 1; layers 0 and 1
    (1.0, 2)
    """
    device = next(model.parameters()).device
    x = image.to(device, torch.float32)[None]
    out, mc = model(x), mc_predict(model, x, samples=samples, seed=seed)
    if not (bool(torch.isfinite(out.logits).all()) and bool(torch.isfinite(mc.mean).all())):
        raise ValueError("the model's output on this image is not a finite number (inf or NaN): its weights push "
                         "the computation beyond float range")
    return Inspection(out, mc, samples)


def _grid(values: torch.Tensor, grid: int) -> torch.Tensor:
    return values.reshape(grid, grid)


def patch_map(out: ViTOutput, layer: int, grid: int) -> torch.Tensor | None:
    """tr(Sigma) of every patch token at ``layer`` (0 = the embeddings of eq. (5), l = the tokens after block l) as
    a (grid, grid) map (image 0); None for a deterministic model, which has no covariances.

    >>> from wviz.vit.inspection import inspect_image, patch_map
    >>> import torch
    >>> from wviz.vit.model import ViTConfig, build_model
    >>> _ = torch.manual_seed(0)
    >>> run = inspect_image(build_model(ViTConfig(dim=8, depth=1, heads=2)), torch.rand(1, 16, 16), samples=1)
    >>> trace = patch_map(run.out, 1, 4)
    >>> tuple(trace.shape), bool((trace > 0).all())      # eq. (5)'s variances are positive, so is their sum
    ((4, 4), True)
    """
    if out.covariances is None:
        return None
    if not 0 <= layer < len(out.covariances):
        raise ValueError(f"layer must be 0 to {len(out.covariances) - 1}, got {layer}")
    return _grid(out.covariances[layer][0, 1:].sum(-1), grid)


def block_of(layer: int) -> int:
    """The block (0-based) whose attention produced the tokens of ``layer`` (block 0 for the embeddings, 0).

    >>> from wviz.vit.inspection import block_of
    >>> [block_of(layer) for layer in range(4)]
    [0, 0, 1, 2]
    """
    return max(layer, 1) - 1


def query_attention(out: ViTOutput, block: int, head: int, query: int, grid: int) -> tuple[torch.Tensor, float]:
    """The attention of token ``query`` (0 = class token, 1.. = patches row by row) in ``block`` and ``head``: its
    weights on the patches as a (grid, grid) map, and its weight on the class token.

    >>> from wviz.vit.inspection import inspect_image, query_attention
    >>> import torch
    >>> from wviz.vit.model import ViTConfig, build_model
    >>> _ = torch.manual_seed(0)
    >>> run = inspect_image(build_model(ViTConfig(dim=8, depth=1, heads=2)), torch.rand(1, 16, 16), samples=1)
    >>> on_patches, on_class = query_attention(run.out, 0, 1, 6, 4)
    >>> round(float(on_patches.sum()) + on_class, 4)      # a row of attention sums to one
    1.0
    """
    A = out.attentions[block][0, head, query]
    return _grid(A[1:], grid), float(A[0])


@dataclass(frozen=True)
class HeadMaps:
    """A query's weights on the patches in one block, a (grid, grid) map per head, and the class token's attention
    rollout over the patches through every block (abnar2020, :func:`wviz.vit.rollout.rollout`)."""

    block: int
    per_head: tuple[torch.Tensor, ...]
    rollout: torch.Tensor


def head_maps(out: ViTOutput, block: int, query: int, grid: int) -> HeadMaps:
    """The query's maps in every head of ``block``, and the class token's rollout (image 0).

    >>> from wviz.vit.inspection import head_maps, inspect_image
    >>> import torch
    >>> from wviz.vit.model import ViTConfig, build_model
    >>> _ = torch.manual_seed(0)
    >>> run = inspect_image(build_model(ViTConfig(dim=8, depth=2, heads=2)), torch.rand(1, 16, 16), samples=1)
    >>> maps = head_maps(run.out, 1, 0, 4)
    >>> len(maps.per_head), bool(maps.rollout.sum() <= 1 - 0.5 ** 2)   # the class token keeps (1/2)^2 of itself
    (2, True)
    """
    heads = out.attentions[block].shape[1]
    return HeadMaps(block, tuple(query_attention(out, block, h, query, grid)[0] for h in range(heads)),
                    _grid(rollout(out.attentions)[0, 0, 1:], grid))
