"""The one line wviz replaces in a transformer: the normaliser of its attention, through transformers' registry.

transformers 5 routes the attention of most architectures through its attention-interface registry
(``AttentionInterface``, ``ALL_ATTENTION_FUNCTIONS``): the attention module computes Q, K, V (with its own
projections, rotary embeddings, key-value groups) and calls the function registered under
``config._attn_implementation`` with them and the mask. wviz registers :func:`attention` under ``"wviz"``, and as its
mask builder transformers' boolean ``sdpa_mask`` with the causal skip turned off, so that padding and the causal
mask always arrive as a boolean keep-mask (None only for an encoder with nothing padded). A model loaded with
``attn_implementation="wviz"`` runs every layer through :func:`attention`, which computes the scores
S = Q K^T / sqrt(d') of eq. (21) of 002, masks them, normalises each row and returns A V.

Which normaliser it uses, and what it records, is read from a context variable that :func:`swapped` sets for the
duration of one forward: with nothing set it is the model's own softmax, so a cached model stays the unmodified
model, concurrent Streamlit sessions (threads) do not see each other's settings, and nothing in the weights or the
config changes between calls. Every forward that :func:`swapped` wraps checks afterwards that every layer went
through the function (:func:`check_layers`): a model whose attention does not use the registry would otherwise
show its own softmax under any name.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import math
from dataclasses import dataclass, field, replace

import torch

from wviz.models.families import supported
from wviz.models.normalisers import Normaliser

__all__ = ["IMPLEMENTATION", "register", "attention", "swapped", "check_layers"]

IMPLEMENTATION = "wviz"  # the name of wviz's function in transformers' attention-interface registry


@dataclass
class _Record:
    """What one forward collects, one entry per layer in the order the layers run (filled by :func:`attention`).
    With ``details`` False only the weights are kept (queries, keys, values and scores stay empty)."""

    normaliser: Normaliser
    details: bool = True
    queries: list = field(default_factory=list)
    keys: list = field(default_factory=list)
    values: list = field(default_factory=list)
    scores: list = field(default_factory=list)
    weights: list = field(default_factory=list)


_SOFTMAX = Normaliser()  # the model's own attention: what runs when no forward has set a normaliser
_RECORD: contextvars.ContextVar[_Record | None] = contextvars.ContextVar("wviz_attention_record", default=None)


def _keep(module, attention_mask, q_len: int, k_len: int, device) -> torch.Tensor | None:
    """The boolean keep-mask of the scores: the mask transformers built (boolean from wviz's mask builder; an
    additive one keeps its zeros), or, when it built none for a causal module, the causal mask itself."""
    if attention_mask is not None:
        return attention_mask if attention_mask.dtype == torch.bool else attention_mask == 0
    if getattr(module, "is_causal", False) and q_len > 1:
        return torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(k_len - q_len)
    return None


def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers attention function (registered as "wviz"): S = Q K^T / sqrt(d') (eq. (21) of 002; the module's
    own ``scaling`` when it passes one), -inf on masked keys, rows normalised by the current Normaliser (softmax
    when none is set; prefix-balanced Sinkhorn in a causal module), output A V; the recorded scores are S. Keys and
    values shared by a group of query heads (grouped-query attention) are repeated to one per head, as
    transformers' eager attention does.

    Example: with nothing set it is the eager softmax attention.

    >>> import torch
    >>> from wviz.models.swap import attention
    >>> q, k, v = torch.randn(3, 1, 2, 4, 8).unbind(0)        # (batch, heads, tokens, d')
    >>> out, A = attention(torch.nn.Module(), q, k, v, None)
    >>> torch.allclose(A, torch.softmax(q @ k.mT / 8 ** 0.5, -1)), tuple(out.shape)
    (True, (1, 4, 2, 8))
    """
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    groups = query.shape[1] // key.shape[1]
    if groups > 1:
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    record = _RECORD.get()
    norm = record.normaliser if record is not None else _SOFTMAX
    # The temperature goes into the product's scaling, S / tau = Q K^T (scaling / tau): one pass, as the model's own
    # scaling, and the normaliser then runs at tau = 1 (softmax / tau costs what softmax costs).
    tau = norm.tau if norm.name != "sinkhorn" else 1.0
    logits = torch.matmul(query, key.transpose(-1, -2)) * (scaling / tau)
    keep = _keep(module, attention_mask, query.shape[-2], key.shape[-2], logits.device)
    masked = logits if keep is None else logits.masked_fill(~keep, -math.inf)
    if norm.name == "sinkhorn" and keep is not None and getattr(module, "is_causal", False):
        weights = norm(logits, keep, causal=True)
    else:
        weights = (norm if tau == 1.0 else replace(norm, tau=1.0))(masked)
    weights = weights.to(value.dtype)
    if record is not None:
        record.weights.append(weights)
        if record.details:
            record.queries.append(query), record.keys.append(key), record.values.append(value)
            record.scores.append(masked if tau == 1.0 else masked * tau)
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights


def _mask(*args, **kwargs):
    """transformers' boolean sdpa mask, never skipped for a causal model (a skipped mask is None, which SDPA reads
    as is_causal; wviz's function must see the mask)."""
    from transformers.masking_utils import sdpa_mask

    kwargs["allow_is_causal_skip"] = False
    return sdpa_mask(*args, **kwargs)


@functools.cache
def register() -> None:
    """Register :func:`attention` and its mask builder under IMPLEMENTATION (once per process).

    >>> from wviz.models.swap import IMPLEMENTATION, register
    >>> register()
    >>> from transformers import AttentionInterface
    >>> IMPLEMENTATION in AttentionInterface().valid_keys()
    True
    """
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(IMPLEMENTATION, attention)
    AttentionMaskInterface.register(IMPLEMENTATION, _mask)


@contextlib.contextmanager
def swapped(normaliser: Normaliser, details: bool = True):
    """While the block runs, every layer of a model loaded with ``attn_implementation="wviz"`` normalises with
    ``normaliser`` and appends what it computed to the yielded record (``.weights``: one (B, H, T, T) tensor per
    layer; with ``details`` also ``.queries``, ``.keys``, ``.values`` and ``.scores``).

    Example: a 1-layer BERT run under sparsemax records one map per layer, its rows summing to 1.

    >>> import torch
    >>> from transformers import BertConfig, BertModel
    >>> from wviz.models.normalisers import make_normaliser
    >>> from wviz.models.swap import IMPLEMENTATION, check_layers, register, swapped
    >>> register()
    >>> _ = torch.manual_seed(0)
    >>> config = BertConfig(vocab_size=20, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
    ...                     intermediate_size=32)
    >>> model = BertModel(config, add_pooling_layer=False).eval()
    >>> model.set_attn_implementation(IMPLEMENTATION)
    >>> with swapped(make_normaliser("sparsemax")) as record:
    ...     _ = model(input_ids=torch.tensor([[1, 2, 3, 4]]))
    >>> A = record.weights[0]
    >>> check_layers(record, 1), tuple(A.shape), torch.allclose(A.sum(-1), torch.ones(1))
    (1, (1, 2, 4, 4), True)
    """
    record = _Record(normaliser, details)
    token = _RECORD.set(record)
    try:
        yield record
    finally:
        _RECORD.reset(token)


def check_layers(record: _Record, layers: int) -> int:
    """``layers`` when the record holds one attention map per layer; ValueError naming the supported families when
    the model's attention did not go through wviz's function (it would show the model's own softmax whatever the
    normaliser).

    >>> from wviz.models.normalisers import Normaliser
    >>> from wviz.models.swap import _Record, check_layers
    >>> check_layers(_Record(Normaliser()), 2)
    Traceback (most recent call last):
        ...
    ValueError: the model's attention went through wviz's normaliser in 0 of its 2 layers: its architecture does not route attention through transformers' attention registry, so wviz cannot swap its normaliser. Supported: encoders (BERT, ...); decoders (GPT-2, ...); image classifiers (ViT, DeiT)
    """
    if len(record.weights) != layers:
        raise ValueError(f"the model's attention went through wviz's normaliser in {len(record.weights)} of its "
                         f"{layers} layers: its architecture does not route attention through transformers' "
                         f"attention registry, so wviz cannot swap its normaliser. Supported: {supported()}")
    return layers
