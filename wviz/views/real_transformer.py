"""What the "Real transformer" page computes: a transformer (the bundled all-MiniLM-L6-v2, a ``save_pretrained``
folder of WVIZ_MODELS or an uploaded .zip: :mod:`wviz.models.hub`) with the softmax of every head replaced
(:mod:`wviz.models.lens`), what a user of its family looks at (:mod:`wviz.models.tasks`: the top 5 for a [MASK], the
next token and the perplexity of a paragraph, an image's classes, the class token over the patches and rollout),
and attention sinks (:mod:`wviz.models.sinks`). Figure 4 of 002 has its own page (wviz.views.heads_dual), which a
link to this page's old Figure 4 view opens (:func:`figure4_link`).

``Settings.alpha`` is the entmax index of the normaliser (1 = softmax, 2 = sparsemax); the reliability alpha of
002's problem (4) belongs to the page "Heads solve the dual".

Sinkhorn's rho (semi-relaxed OT, Chizat et al. 2018) holds the keys' columns softly: rho -> 0 at gamma = tau = 1 is
the model's own softmax, rho = infinity Sinkformer's doubly-stochastic attention (Sander et al. 2022); the rho sweep
follows the sentence embedding and the layers' outputs along that road. In a decoder every normaliser keeps the
causal mask, and Sinkhorn balances each prefix (wviz.models.normalisers.causal_sinkhorn_attention).

Every function that runs a model takes its ``lens`` (a wviz.models.hub.Lens); None is the bundled MiniLM. The page
reads the models on offer and what it says of each from ``catalogue`` (wviz.models.catalogue), and finds them with
``hub.find_models``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any
from collections.abc import Callable

import pandas as pd
import torch

from wviz import grids
from wviz.device import get_device
from wviz.guide import Try
from wviz.models import catalogue, corpus, hub, lens as lenses, minilm, safety, sinks, tasks

__all__ = ["CHOICES", "DEFAULT_SENTENCE", "DEFAULT_CHOSEN", "BASE", "PICTURES", "LINKED_MAX", "SINKS",
           "Settings", "params", "catalogue", "hub", "example_picture", "read_picture", "SHORT",
           "input_length", "forward", "Comparison", "tau_enters", "comparison", "fixed_comparison", "OneHead",
           "ColumnError", "one_head", "at_defaults", "sparsity_maps", "Pruning", "pruning", "layer_distances",
           "change_table", "Guesses", "guesses", "mask_hint", "SinkMaps", "uniform_share", "sink_maps", "PatchMaps",
           "patch_maps", "PERPLEXITY_TAUS", "Perplexities", "perplexities", "figure4_link", "shown", "TRY_THIS",
           "RHOS", "rho_text", "RhoSweep", "rho_sweep", "Keys", "Labels"]

DEFAULT_SENTENCE = "The cat sat on the mat and watched the rain."
DEFAULT_CHOSEN = ("sparsemax", "entmax", "sinkhorn")   # the normalisers the page starts with
CHOICES = {"softmax": "softmax (temperature tau)", "sparsemax": "sparsemax", "entmax": "alpha-entmax",
           "sinkhorn": "Sinkhorn (doubly stochastic)"}
BASE = ("softmax", (("tau", 1.0),))  # the model's own attention: softmax at tau = 1
RHOS = grids.rho_grid()        # Sinkhorn's rho slider: 1e-3 to 1e4, then infinity (doubly stochastic)
rho_text = grids.rho_text
SWEEP_RHOS = grids.rho_grid(per_decade=2, infinity=False)   # the rho sweep's grid
# The "Click a query" view sends every weight of every map to the browser (normalisers x n^2 rows): up to 64 tokens
# that is 20 000 rows, which Vega-Lite filters at a click; at 512 tokens it would be over a million.
LINKED_MAX = 64
SINKS = sinks.SINKS
# Bundled pictures for an image model, offline: scikit-learn's two sample photographs and shapes drawn here.
PICTURES = ("china.jpg (scikit-learn)", "flower.jpg (scikit-learn)", "drawn shapes")

Params = tuple[tuple[str, Any], ...]  # a normaliser's keywords as hashable pairs, for the page's cache


# ---- widget keys and view labels -------------------------------------------------------------------------------

class Keys:
    """The page's widget keys: the names its URL holds (bind="query-params"). The page, TRY_THIS and the tests
    read them here, so a rename cannot leave a guided link pointing nowhere."""
    MODEL = "model"
    MODEL_ZIP = "model_zip"
    LAYER = "layer"
    HEAD = "head"
    NORMALISERS = "normalisers"
    ALPHA = "alpha"
    GAMMA = "gamma"
    N_ITER = "n_iter"
    RHO = "rho"
    SENTENCE = "sentence"
    PICTURE = "picture"
    PICTURE_FILE = "picture_file"
    TAU = "tau"
    VIEW = "view"


class Labels:
    """The labels of the page's views (the values of its view selectors)."""
    SPARSITY = "Sparsity per head"
    LAYERS = "The layers and the {} embedding"
    CLICK = "Click a query"
    RHO = "Sinkhorn's rho: softmax to Sinkformer"
    SINKS = "Attention sinks"
    PERPLEXITY = "Perplexity as tau moves"


@dataclass(frozen=True)
class Settings:
    """What the sidebar sets apart from tau: the chosen normalisers, the entmax index alpha, and Sinkhorn's
    gamma (entropic regularisation of (23) of 002), number of iterations and rho (how firmly the keys' columns are
    held; infinity: doubly stochastic)."""

    chosen: tuple[str, ...]
    alpha: float
    gamma: float
    n_iter: int
    rho: float = math.inf


def params(settings: Settings, name: str, tau: float) -> Params:
    """The keywords of normaliser ``name`` (minilm.make_normaliser) at temperature tau, as (key, value) pairs."""
    sinkhorn = dict(gamma=settings.gamma, n_iter=settings.n_iter)
    if settings.rho < math.inf:   # infinity is the normaliser's default: its keywords (and label) as before
        sinkhorn["rho"] = settings.rho
    per_name = {"softmax": dict(tau=tau), "sparsemax": dict(tau=tau), "entmax": dict(alpha=settings.alpha, tau=tau),
                "sinkhorn": sinkhorn}
    if name not in per_name:
        raise ValueError(f"unknown normaliser {name!r}; choose one of {', '.join(per_name)}")
    return tuple(per_name[name].items())


# ---- the model ----------------------------------------------------------------------------------------------------

def example_picture(name: str):
    """One of PICTURES as an RGB PIL image: scikit-learn's sample photographs (shipped with it, 640 x 427) or a
    circle, a square and a triangle drawn on white (224 x 224)."""
    from PIL import Image, ImageDraw

    if name not in PICTURES:
        raise ValueError(f"unknown picture {name!r}; choose one of {', '.join(PICTURES)}")
    if name != "drawn shapes":
        from wviz.vit.data import sample_photographs

        return Image.fromarray(sample_photographs()[name.split(" ")[0]])
    im = Image.new("RGB", (224, 224), "white")
    draw = ImageDraw.Draw(im)
    draw.ellipse((20, 20, 100, 100), fill=(213, 94, 0))
    draw.rectangle((124, 30, 200, 106), fill=(0, 114, 178))
    draw.polygon([(112, 130), (60, 205), (164, 205)], fill=(0, 158, 115))
    return im


def read_picture(raw: bytes):
    """An uploaded PNG/JPEG as an RGB PIL image, or a ValueError saying why not (wviz.models.safety.read_picture:
    size cap, format, mode, pixels)."""
    return safety.read_picture(raw)


SHORT = 64   # tokens: an input up to this long is a short one, whose forwards the page keeps many of


def input_length(lens: hub.Lens, inputs) -> int:
    """The number of tokens ``inputs`` has for ``lens``: a text's, with the tokenizer's special tokens, or a
    picture's (its class tokens and patches)."""
    if lens.family == "image":
        rows, cols = catalogue.patch_grid(lens)
        return rows * cols + 1
    return len(lens.tokenizer(inputs, verbose=False)["input_ids"])


def forward(inputs, name: str, params: Params, device: str, lens: hub.Lens | None = None) -> lenses.Forward:
    """One forward of ``inputs`` (a text, or a picture for an image model) through ``lens`` (None: the bundled MiniLM
    on ``device``) with every head normalised by ``name`` with keywords ``params``: the weights, hidden states and
    the head's outputs (not the queries, keys and scores, which the page does not draw: at 512 tokens they would
    double what a cached forward holds). A text may be as long as the model reads (token_limit)."""
    lens = lens if lens is not None else hub.load(None, device)
    return lenses.forward(lens, inputs, name, details=False, **dict(params))


# ---- every normaliser against the model's own -------------------------------------------------------------------

def _visible(text: str) -> str:
    """A decoded token as a label: its spaces stripped, a line break as '↵', a blank as '␣', any other invisible
    character by its escape ('\\x12')."""
    shown = text.strip() or ("↵" if "\n" in text else "␣")
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in shown)


def _patch_name(token: str) -> str:
    """'patch r,c' (counted from 0 by wviz.models.lens) as a person reads it, counted from 1."""
    if not token.startswith("patch "):
        return token
    r, c = token[6:].split(",")
    return f"patch {int(r) + 1},{int(c) + 1}"


def _shown_tokens(lens: hub.Lens, fwd: lenses.Forward) -> tuple[str, ...]:
    """The tokens as the page labels them: an encoder's word pieces as its tokenizer writes them ([CLS], the,
    ##s), a decoder's pieces decoded as text ('Ġcat' is 'cat'), a picture's class token and patches (row, column
    from 1)."""
    if lens.family == "image":
        return tuple(_patch_name(t) for t in fwd.tokens[0])
    if lens.family == "decoder":
        return tuple(_visible(t) for t in tasks.token_texts(lens, fwd))
    return fwd.tokens[0]


@dataclass(frozen=True)
class Comparison:
    """The original forward (softmax, tau = 1), the forward under each chosen normaliser (label -> Forward), and the
    tokens as the page labels them (``shown``; empty: as the tokenizer writes them)."""

    base: lenses.Forward
    swapped: dict[str, lenses.Forward]
    shown: tuple[str, ...] = ()

    @cached_property
    def changes(self) -> dict[str, minilm.Change]:
        """What each swap changed (label -> minilm.Change), computed when first read: the fixed maps' comparison
        (fixed_comparison) draws none of it."""
        return {label: minilm.compare(self.base, fwd) for label, fwd in self.swapped.items()}

    @property
    def tokens(self) -> tuple[str, ...]:
        return self.shown or self.base.tokens[0]

    @property
    def family(self) -> str:
        return self.base.family

    def forwards(self) -> dict[str, lenses.Forward]:
        """label -> Forward, the original first ('original: softmax (tau = 1)'); a swapped normaliser that is the
        model's own (softmax at tau = 1) is not repeated."""
        own = self.base.normaliser.label()
        return {f"original: {own}": self.base, **{k: f for k, f in self.swapped.items() if k != own}}


def tau_enters(name: str) -> bool:
    """Whether the temperature tau enters normaliser ``name``: softmax, sparsemax and entmax of S / tau do;
    Sinkhorn has gamma instead."""
    return name != "sinkhorn"


def comparison(settings: Settings, tau: float, run: Callable[[str, Params], lenses.Forward],
               lens: hub.Lens | None = None) -> Comparison:
    """Every chosen normaliser against the original model; ``run(name, params)`` is one forward of the input
    (the page passes its cached :func:`forward`), ``lens`` the model that runs it (None: the bundled MiniLM)."""
    if not settings.chosen:
        raise ValueError("choose at least one normaliser in the sidebar")
    return _compared(settings.chosen, settings, tau, run, lens)


def fixed_comparison(settings: Settings, run: Callable[[str, Params], lenses.Forward],
                     lens: hub.Lens | None = None) -> Comparison:
    """:func:`comparison` of the chosen normalisers that tau does not enter (Sinkhorn; none: the original alone),
    what a tau move leaves as it is: the page draws its maps outside the tau slider's reruns."""
    return _compared(tuple(n for n in settings.chosen if not tau_enters(n)), settings, 1.0, run, lens)


def _compared(names, settings: Settings, tau: float, run, lens) -> Comparison:
    base = run(*BASE)
    swapped = {}
    for name in names:
        p = params(settings, name, tau)
        swapped[minilm.make_normaliser(name, **dict(p)).label()] = run(name, p)
    shown = _shown_tokens(lens, base) if lens is not None else ()
    return Comparison(base, swapped, shown)


@dataclass(frozen=True)
class ColumnError:
    """Sinkhorn's rows sum to 1 exactly; its columns to 1 within ``error`` = max_k |sum_i A_ik - 1| after
    ``n_iter`` iterations, held towards 1 by ``rho`` (infinity: doubly stochastic). In a decoder each prefix is
    balanced instead, and the columns of A are not held to 1."""

    error: float
    n_iter: int
    rho: float = math.inf


@dataclass(frozen=True)
class OneHead:
    """Head ``head`` of layer ``layer`` (both counted from 1, as the page numbers them) under every normaliser:
    ``maps`` label -> (n, n) weights over the n ``tokens``, the original first ('original: softmax (tau = 1)'); in
    the original head, the key of index ``sink`` (the ``sink + 1``-th token) receives ``sink_mass`` of the n units
    of attention (one per query); Sinkhorn's column error per Sinkhorn label; ``causal``: a decoder's head, whose
    weights above the diagonal are 0. ``moved``: the maps of the normalisers tau enters (tau_enters), each chosen
    one, softmax at tau = 1 included; ``fixed``: the other maps (the original, Sinkhorn)."""

    layer: int
    head: int
    tokens: tuple[str, ...]
    maps: dict[str, torch.Tensor]
    sink: int
    sink_mass: float
    sinkhorn: dict[str, ColumnError]
    causal: bool = False
    moved: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def fixed(self) -> dict[str, torch.Tensor]:
        return {label: A for label, A in self.maps.items() if label not in self.moved}


def one_head(c: Comparison, layer: int, head: int) -> OneHead:
    """The weights of head ``head`` (1 to H) of layer ``layer`` (1 to L, 1 next to the embeddings) under the
    original softmax and each swapped normaliser (eq. (21), (23) of 002)."""
    L, H = c.base.attention.shape[1:3]
    if not (1 <= layer <= L and 1 <= head <= H):
        raise ValueError(f"layer must be 1 to {L} and head 1 to {H}, got {layer}, {head}")
    l, h = layer - 1, head - 1                                       # the tensors' indices
    maps = {label: fwd.attention[0, l, h] for label, fwd in c.forwards().items()}
    received = c.base.attention[0, l, h].sum(dim=0)                  # attention each key receives
    sink = int(received.argmax())
    sinkhorn = {label: ColumnError(float((fwd.attention[0, l, h].sum(dim=0) - 1).abs().max()),
                                   fwd.normaliser.n_iter, fwd.normaliser.rho)
                for label, fwd in c.swapped.items() if fwd.normaliser.name == "sinkhorn"}
    moved = {label: fwd.attention[0, l, h] for label, fwd in c.swapped.items() if tau_enters(fwd.normaliser.name)}
    return OneHead(layer, head, c.tokens, maps, sink, float(received[sink]), sinkhorn, c.family == "decoder", moved)


def at_defaults(sentence: str = DEFAULT_SENTENCE):
    """The page's first head (layer 1, head 1) under its default normalisers and settings, for ``sentence`` on
    WVIZ_DEVICE, as a function of tau (its main slider): bench_latency's reference draws it."""
    settings, device = Settings(DEFAULT_CHOSEN, 1.5, 1.0, 5), str(get_device())
    return lambda tau: one_head(comparison(settings, tau, lambda name, p: forward(sentence, name, p, device)), 1, 1)


def sparsity_maps(c: Comparison) -> dict[str, torch.Tensor]:
    """Fraction of exact zeros per (layer, head) among the weights a head may give (in a decoder, on and below the
    diagonal): 'original', then each normaliser."""
    first = next(iter(c.changes.values()))
    return {"original": first.base_sparsity, **{label: ch.sparsity for label, ch in c.changes.items()}}


@dataclass(frozen=True)
class Pruning:
    """A normaliser that sets weights to exactly zero: the mean fraction of zeros over all heads and in layer 1."""

    label: str
    mean: float
    layer0: float


def pruning(c: Comparison) -> tuple[Pruning, ...]:
    """The normalisers with at least one exact zero (sparsemax, entmax), with their mean sparsity."""
    return tuple(Pruning(label, float(ch.sparsity.mean()), float(ch.sparsity[0].mean()))
                 for label, ch in c.changes.items() if ch.sparsity.max() > 0)


def layer_distances(c: Comparison) -> dict[str, torch.Tensor]:
    """||h'_l - h_l||_F / ||h_l||_F per layer, per normaliser."""
    return {label: ch.layer_distance for label, ch in c.changes.items()}


def change_table(c: Comparison) -> pd.DataFrame:
    """One row per normaliser: cosine to the original embedding (the mean of the last layer's token states,
    normalised), mean sparsity, each layer's distance (layer 1 to L)."""
    ch = c.changes.values()
    return pd.DataFrame({
        "normaliser": list(c.changes),
        "cosine to the original embedding": [x.cosine for x in ch],
        "mean sparsity": [float(x.sparsity.mean()) for x in ch],
        **{f"distance, layer {l + 1}": [float(x.layer_distance[l]) for x in ch]
           for l in range(c.base.attention.shape[1])},
    })


# ---- what a user of each family looks at -------------------------------------------------------------------------

@dataclass(frozen=True)
class Guesses:
    """What the model's head predicts at one place under each normaliser: ``title`` (what is predicted, where),
    ``by_normaliser`` label -> wviz.models.tasks.Prediction (labels and probabilities, best first), the original
    first."""

    title: str
    by_normaliser: dict[str, tasks.Prediction]


def guesses(lens: hub.Lens, c: Comparison) -> tuple[Guesses, ...]:
    """The head's predictions under every normaliser: for an encoder with a masked-language-model head the top 5
    for each mask token of the text, for a decoder the 10 most likely next tokens, for an image classifier the top
    5 classes; none for a model without a head (the bundled MiniLM)."""
    fwds = c.forwards()
    if lens.head == "masked-lm":
        per = {label: tasks.masked_tokens(lens, f) for label, f in fwds.items()}
        first = next(iter(per.values()))
        mask = lens.tokenizer.mask_token
        return tuple(Guesses(f"The top 5 for {mask} (token {p.position + 1})",
                             {label: preds[i] for label, preds in per.items()}) for i, p in enumerate(first))
    if lens.head == "causal-lm":
        n = int(c.base.mask[0].sum())
        return (Guesses(f"The 10 most likely next tokens after token {n}",
                        {label: tasks.next_tokens(lens, f) for label, f in fwds.items()}),)
    if lens.head == "image-classification":
        return (Guesses("The top 5 classes", {label: tasks.image_classes(lens, f) for label, f in fwds.items()}),)
    return ()


def mask_hint(lens: hub.Lens, c: Comparison) -> str | None:
    """For a masked-language model whose text has no mask token: how to ask it for one; else None."""
    if lens.head != "masked-lm" or guesses(lens, c):
        return None
    mask = lens.tokenizer.mask_token
    return (f"This model has a masked-language-model head: write {mask} in the sentence (for example \"The cat sat "
            f"on the {mask}.\") to see its top 5 for that place under each normaliser.")


@dataclass(frozen=True)
class SinkMaps:
    """Attention sinks under each normaliser (wviz.models.sinks.sink_shares), label -> (L, H), the original first:
    ``first``, each head's mean weight on the first token (``first_token``); ``special``, on the special tokens
    (``special_tokens``, each named once), None when they are the first token alone or there are none; averaged
    over ``queries`` query tokens (all but the first). ``uniform``: the first token's share if every query spread
    its row evenly over the keys it may read: 1/n in an encoder, the mean of 1/i over the queries i = 2..n in a
    decoder (query i reads i tokens)."""

    first: dict[str, torch.Tensor]
    special: dict[str, torch.Tensor] | None
    first_token: str
    special_tokens: tuple[str, ...]
    queries: int
    uniform: float


def uniform_share(n: int, causal: bool) -> float:
    """The first token's share (sinks.sink_shares) of uniform rows over n tokens: 1/n, or, under the causal mask,
    (1/(n-1)) sum_{i=2..n} 1/i."""
    if n < 2:
        raise ValueError("a sink share needs at least two tokens")
    return sum(1 / i for i in range(2, n + 1)) / (n - 1) if causal else 1 / n


def sink_maps(c: Comparison) -> SinkMaps:
    """The sink shares of the input under the original softmax and every chosen normaliser."""
    shares = {label: sinks.sink_shares(f) for label, f in c.forwards().items()}
    assert c.base.special is not None   # lens.forward marks every input's special tokens
    special = c.base.special[0] & c.base.mask[0]
    names = tuple(dict.fromkeys(t for t, s in zip(c.tokens, special.tolist()) if s))   # each named once
    only_first = not bool(special[1:].any())
    queries = next(iter(shares.values())).queries
    return SinkMaps({label: s.first for label, s in shares.items()},
                    None if only_first else {label: s.special for label, s in shares.items()},
                    c.tokens[0], names, queries, uniform_share(queries + 1, c.family == "decoder"))


@dataclass(frozen=True)
class PatchMaps:
    """An image model's class token over the patch grid, label -> (rows, cols) under each normaliser (the original
    first): ``heads``, head ``head`` of layer ``layer`` (from 1): the class token's weights on each patch; and
    ``rollout``, attention rollout after the last layer (Abnar and Zuidema 2020)."""

    layer: int
    head: int
    heads: dict[str, torch.Tensor]
    rollout: dict[str, torch.Tensor]


def patch_maps(lens: hub.Lens, c: Comparison, layer: int, head: int) -> PatchMaps:
    """The class token's attention over the patches (wviz.models.tasks.class_attention) of one head, and rollout
    (tasks.rollout_map), under every normaliser."""
    one_head(c, layer, head)                                     # the same check of layer and head
    fwds = c.forwards()
    return PatchMaps(layer, head,
                     {label: tasks.class_attention(lens, f)[layer - 1, head - 1] for label, f in fwds.items()},
                     {label: tasks.rollout_map(lens, f) for label, f in fwds.items()})


# tau at every third point of the page's slider (ui.log_slider(0.1, 10), 12 a decade): 0.1 to 10, 4 a decade
PERPLEXITY_TAUS = (0.1, 0.215, 0.464, 1.0, 2.15, 4.64, 10.0)


@dataclass(frozen=True)
class Perplexities:
    """The perplexity of a paragraph (wviz.models.corpus.PARAGRAPH) under each chosen normaliser at each tau of
    ``taus``: ``curves`` name -> one value per tau (Sinkhorn, which has no tau, the same at each); ``original``, the
    model's own (softmax, tau = 1); ``tokens``, the paragraph's length in tokens, ``cut`` whether only its first
    words were read (a model that reads fewer tokens than the paragraph has)."""

    taus: tuple[float, ...]
    curves: dict[str, tuple[float, ...]]
    original: float
    tokens: int
    cut: bool = False


def _curve_name(settings: Settings, name: str) -> str:
    """'softmax', 'sparsemax', 'entmax (alpha = 1.5)', 'sinkhorn (gamma = 1, 5 iterations)': a normaliser's label
    without its tau."""
    label = minilm.make_normaliser(name, **dict(params(settings, name, 1.0))).label()
    return label.replace(", tau = 1", "").replace(" (tau = 1)", "")


def perplexities(lens: hub.Lens, settings: Settings, taus=PERPLEXITY_TAUS, text: str | None = None) -> Perplexities:
    """The perplexity exp(-(1/(n-1)) sum_i log p(x_i | x_<i)) of ``text`` (default the bundled paragraph) under
    each chosen normaliser at each tau (wviz.models.tasks.perplexity): one forward per normaliser and tau, one for
    Sinkhorn. ValueError for a model without a causal language-model head."""
    if lens.head != "causal-lm":
        raise ValueError(f"{lens.info.name} has no causal language-model head: perplexity is a decoder's")
    if not settings.chosen:
        raise ValueError("choose at least one normaliser in the sidebar")
    text, cut = tasks.fitted(lens, corpus.PARAGRAPH if text is None else text)
    curves = {}
    for name in settings.chosen:
        if name == "sinkhorn":
            value = tasks.perplexity(lens, text, name, **dict(params(settings, name, 1.0)))
            curves[_curve_name(settings, name)] = (value,) * len(taus)
        else:
            curves[_curve_name(settings, name)] = tuple(
                tasks.perplexity(lens, text, name, **dict(params(settings, name, tau))) for tau in taus)
    return Perplexities(tuple(taus), curves, tasks.perplexity(lens, text), tasks.length(lens, text), cut)


# ---- from softmax to Sinkformer: Sinkhorn's rho ------------------------------------------------------------------

@dataclass(frozen=True)
class RhoSweep:
    """Sinkhorn at one gamma and n_iter in every head, over rho: at each rho of rhos (R,) the cosine of the input's
    embedding to the model's own (cosines (R,)) and each layer's output distance ||h'_l - h_l||_F / ||h_l||_F
    (distances (R, L)); ends = (rho = 0, rho = infinity), each (cosine, distances (L,))."""

    gamma: float
    n_iter: int
    rhos: torch.Tensor
    cosines: torch.Tensor
    distances: torch.Tensor
    ends: tuple[tuple[float, torch.Tensor], tuple[float, torch.Tensor]]


def rho_sweep(sentence, gamma: float, n_iter: int, device: str, rhos=SWEEP_RHOS,
              lens: hub.Lens | None = None) -> RhoSweep:
    """The road from the model's softmax (rho -> 0, at gamma = 1 exactly its attention) to Sinkformer attention
    (rho = infinity): one forward of ``sentence`` (or a picture) per rho (about 30 ms each for MiniLM on a short
    sentence on a CPU core) compared with the model's own; ``lens`` the model (None: the bundled MiniLM)."""
    base = forward(sentence, *BASE, device, lens)
    changes = [minilm.compare(base, forward(sentence, "sinkhorn", (("gamma", gamma), ("n_iter", n_iter),
                                                                   ("rho", rho)), device, lens))
               for rho in (0.0, *rhos, math.inf)]
    inner = changes[1:-1]
    return RhoSweep(gamma, n_iter, torch.tensor(rhos, dtype=torch.float64),
                    torch.tensor([c.cosine for c in inner], dtype=torch.float64),
                    torch.stack([c.layer_distance for c in inner]),
                    ((changes[0].cosine, changes[0].layer_distance), (changes[-1].cosine, changes[-1].layer_distance)))


# ---- links from before Figure 4 had its own page ------------------------------------------------------------

FIGURE4_VIEW = "Figure 4 of 002"   # the view this page had; links to it open the page "Heads solve the dual"
# this page's URL keys -> that page's, for what a link to the view set (its alpha kept its name)
FIGURE4_MOVED = {Keys.MODEL: "dual_model", Keys.SENTENCE: "dual_sentence", "dual_alpha": "dual_alpha",
                 "presentation": "presentation"}


def figure4_link(params: dict) -> dict | None:
    """The query of the page "Heads solve the dual" for a link (its query parameters) that opens this page's old
    Figure 4 view: the model, sentence, alpha and presentation mode it set; None for any other link.

    >>> from wviz.views.real_transformer import figure4_link
    >>> figure4_link({"view": "Figure 4 of 002", "dual_alpha": "0.1", "tau": "2"})
    {'dual_alpha': '0.1'}
    >>> figure4_link({"view": "Sparsity per head"}) is None
    True
    """
    if params.get(Keys.VIEW) != FIGURE4_VIEW:
        return None
    return {FIGURE4_MOVED[k]: v for k, v in params.items() if k in FIGURE4_MOVED}


# ---- guided experiments ----------------------------------------------------------------------------------------

def shown(*names: str) -> list[str]:
    """The normalisers as the multiselect writes them to the URL: by their labels (CHOICES), which its
    format_func shows and Streamlit's URL binding matches, not by their keys."""
    return [CHOICES[n] for n in names]


# Values as the URL holds them: layer and head ints (their selectboxes' options, counted from 1), tau on
# its log grid (0.1, 1 and 10 are), alpha a float on its 0.05 grid, the normalisers by label (shown). On
# the default sentence (13 word pieces) head 8 of layer 5 sends 10.7 of its 13 units of attention to [CLS]. Every
# link opens the bundled MiniLM (a link names no model).
TRY_THIS = (
    Try("Sparsemax at tau = 0.1", {Keys.NORMALISERS: shown("sparsemax"), Keys.TAU: 0.1},
        "Sparsemax of S / tau keeps one key per query, two for a few (count the lit cells of each row in the panel "
        "of layer 1, head 1), and the caption under the sparsity chart reads 92% zeros on average: as tau -> 0 it "
        "becomes the argmax."),
    Try("From the model's softmax to Sinkformer", {Keys.NORMALISERS: shown("sinkhorn"), Keys.RHO: 0.001,
                                                    Keys.VIEW: Labels.RHO},
        "At rho = 0.001 Sinkhorn's panel is the original head (rho -> 0 at gamma = 1 is the model's softmax) and the "
        "embedding's cosine is 1 at the dashed line; along the sweep it turns away as rho holds every key to one "
        "unit, to well under 1 for Sinkformer attention at rho = ∞."),
    Try("An attention sink: layer 5, head 8, under Sinkhorn",
        {Keys.LAYER: 5, Keys.HEAD: 8, Keys.NORMALISERS: shown("sinkhorn")},
        "The original head gives 10.7 of its 13 units of attention to [CLS] (the column that lights up); under "
        "Sinkhorn every column sums to 1 within 1.5e-02 (the caption): each key receives about one unit, so the "
        "sink is gone."),
    Try("entmax between softmax and sparsemax", {Keys.NORMALISERS: shown("softmax", "entmax", "sparsemax"),
                                               Keys.ALPHA: 1.25},
        "alpha = 1.25 keeps more keys than sparsemax yet still sets weights exactly to zero: compare the panels "
        "and the caption under the 'Sparsity per head' chart (36% zeros on average, against sparsemax's 87%)."),
)
