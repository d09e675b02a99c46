"""T5's attention as the dual's: the preference from masks and relative-position biases, (19)-(20) of 002."""
from __future__ import annotations

import math

import torch

from ._inputs import _out_dtype, _tensor
from .preference import _device


def _relative_bias(relative_bias, mask, j):
    """b_{j-i} (..., n) for target positions j; offsets beyond the table are clipped to its ends (T5 puts far
    offsets in one bucket)."""
    device = _device(relative_bias, mask, j)
    b = _tensor(relative_bias, "relative_bias", device)
    if b.ndim != 1 or b.shape[0] % 2 == 0:
        raise ValueError(f"relative_bias must be a vector of odd length 2R + 1 (offsets j - i = -R..R), got shape "
                         f"{tuple(b.shape)}")
    R = b.shape[0] // 2
    mask = torch.as_tensor(mask, device=device)
    if mask.dtype != torch.bool:
        raise ValueError("mask must be a boolean array (True = the word is masked)")
    if mask.ndim < 1 or mask.shape[-1] == 0:
        raise ValueError(f"mask must have one entry per word, got shape {tuple(mask.shape)}")
    n = mask.shape[-1]
    j = torch.as_tensor(j, device=device)
    if j.is_floating_point() or j.dtype == torch.bool or bool(((j < 0) | (j >= n)).any()):
        raise ValueError(f"the target position j must be an integer in 0..{n - 1}")
    offset = (j[..., None] - torch.arange(n, device=device)).clamp(-R, R) + R
    return b[offset], mask


def t5_preference(relative_bias, mask, j) -> torch.Tensor:
    """The preference (19) of 002: u(t_i) = 0 if word i is masked, else exp(b_{j-i}) / Z.

    relative_bias (2R + 1,) holds b_r for offsets r = j - i = -R..R (clipped beyond), mask (..., n) bool
    (True = masked), j the position being inferred (int or tensor (...) of ints). Returns u (..., n).

    Example: four words, the second masked, inferring word j = 2 with biases b_-1 = 0, b_0 = 1, b_1 = 0: the masked
    word gets 0, the word at offset 0 the most, and the preference sums to 1.

    >>> import torch
    >>> from wviz.fenchel import t5_preference
    >>> u = t5_preference([0.0, 1.0, 0.0], torch.tensor([False, True, False, False]), 2)
    >>> [round(x, 4) for x in u.tolist()], round(float(u.sum()), 4)
    ([0.2119, 0.0, 0.5761, 0.2119], 1.0)
    """
    bias, mask = _relative_bias(relative_bias, mask, j)
    logits = bias.masked_fill(mask, -math.inf)
    if bool((logits == -math.inf).all(-1).any()):
        raise ValueError("every word is masked: at least one word must be visible")
    return torch.softmax(logits, dim=-1)


def t5_attention(scores, relative_bias, mask, j) -> torch.Tensor:
    """The weights of (20) as T5 computes them: softmax_i(<t_i, z> + b_{j-i} + 1_masked(i)), with
    1_masked = -inf on masked words. scores (..., n) are <t_i, z>. Equal to (18) with alpha = 1 and u of (19).

    Example: T5's weights equal the generalised attention (18) with alpha = 1 and the preference (19).

    >>> import torch
    >>> from wviz.fenchel import attention_weights, t5_attention, t5_preference
    >>> t = [[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.5, 0.5]]
    >>> z = [0.5, 0.2]
    >>> bias, mask = [0.0, 1.0, 0.0], torch.tensor([False, True, False, False])
    >>> p = t5_attention(torch.tensor(t) @ torch.tensor(z), bias, mask, 2)
    >>> [round(x, 4) for x in p.tolist()]
    [0.3496, 0.0, 0.3496, 0.3009]
    >>> torch.allclose(p.double(), attention_weights(t, t5_preference(bias, mask, 2), z, 1.0))
    True
    """
    bias, mask = _relative_bias(relative_bias, mask, j)
    scores_ = _tensor(scores, "scores", bias.device)
    if scores_.shape[-1] != mask.shape[-1]:
        raise ValueError(f"scores must have one entry per word ({mask.shape[-1]}), got shape {tuple(scores_.shape)}")
    logits = (scores_ + bias).masked_fill(mask, -math.inf)
    if bool((logits == -math.inf).all(-1).any()):
        raise ValueError("every word is masked: at least one word must be visible")
    return torch.softmax(logits, dim=-1).to(_out_dtype(scores))
