"""Attention rollout (abnar2020): how much of each input token a token holds after the last layer, when attention
is the only way tokens mix.

Abnar and Zuidema (2020, Sec. 3) count the residual connection as attention of a token to itself, A' = 0.5 A + 0.5 I
with A the heads' mean, and chain the layers: the rollout after layer l is A'_l times the rollout after layer l - 1.
For a ViT of 004 the class token's row says how much of each patch the class token has gathered on its way to the
classifier (the Uncertainty inspector draws it over the patches).
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["rollout"]


def rollout(attentions: Sequence[torch.Tensor]) -> torch.Tensor:
    """The attention rollout R = A'_L ... A'_1, with A'_l = (mean over heads of A_l + I) / 2 (abnar2020, Sec. 3).

    ``attentions``: one (..., H, N, N) tensor of attention weights per layer, first layer first, rows summing to
    one (``ViTOutput.attentions`` of a model of 004: batch, heads, tokens, the class token first). Returns
    (..., N, N): row i is the share of each input token in token i after the last layer. Its rows sum to one, as
    every A'_l's do.

    Both tokens read token 1 in layer 1, each reads itself in layer 2: the residual path keeps half of token 0
    in token 0, and the second layer changes nothing.

    >>> from wviz.vit.rollout import rollout
    >>> import torch
    >>> layer1 = torch.tensor([[[0.0, 1.0], [0.0, 1.0]]])     # (1 head, 2 tokens, 2 tokens)
    >>> layer2 = torch.eye(2)[None]
    >>> rollout([layer1, layer2]).tolist()
    [[0.5, 0.5], [0.0, 1.0]]
    """
    if len(attentions) == 0:
        raise ValueError("attention rollout needs the attention weights of at least one layer")
    n = attentions[0].shape[-1]
    eye = torch.eye(n, dtype=attentions[0].dtype, device=attentions[0].device)
    R = eye
    for layer, A in enumerate(attentions):
        if A.dim() < 3 or A.shape[-2:] != (n, n):
            raise ValueError(f"layer {layer}'s attention has shape {tuple(A.shape)}; rollout needs (..., heads, {n}, "
                             f"{n}) in every layer")
        R = ((A.mean(-3) + eye) / 2) @ R
    return R
