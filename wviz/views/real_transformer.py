"""What the "Real transformer" page computes: all-MiniLM-L6-v2 with the softmax of every head replaced
(:mod:`wviz.models.minilm`), and Figure 4 of 002 on it (:mod:`wviz.models.figure4`).

Two alphas meet on this page and keep two names here: ``Settings.alpha`` is the entmax index of the normaliser
(1 = softmax, 2 = sparsemax); ``dual_alpha`` is the reliability of the evidence z in problem (4) of 002.

Sinkhorn's rho (semi-relaxed OT, Chizat et al. 2018) holds the keys' columns softly: rho -> 0 at gamma = tau = 1 is
the model's own softmax, rho = infinity Sinkformer's doubly-stochastic attention (Sander et al. 2022); the rho sweep
follows the sentence embedding and the layers' outputs along that road.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import pandas as pd
import torch

from wviz import disk_cache
from wviz.device import get_device
from wviz.guide import Try
from wviz.models import corpus, figure4, minilm
from wviz.ot import semirelaxed

__all__ = ["CHOICES", "DEFAULT_SENTENCE", "DEFAULT_CHOSEN", "MAX_TOKENS", "CORPUS_SIZE", "N_LAYERS", "N_HEADS",
           "BASE", "Settings", "params", "load", "forward", "Comparison", "comparison", "OneHead", "ColumnError",
           "one_head", "at_defaults", "sparsity_maps", "Pruning", "pruning", "layer_distances", "change_table",
           "deviation", "Figure4Summary", "figure4_summary", "shown", "TRY_THIS", "RHOS", "rho_text", "RhoSweep",
           "rho_sweep"]

DEFAULT_SENTENCE = "The cat sat on the mat and watched the rain."
DEFAULT_CHOSEN = ("sparsemax", "entmax", "sinkhorn")   # the normalisers the page starts with
CHOICES = {"softmax": "softmax (temperature tau)", "sparsemax": "sparsemax", "entmax": "alpha-entmax",
           "sinkhorn": "Sinkhorn (doubly stochastic)"}
MAX_TOKENS = minilm.MAX_TOKENS
CORPUS_SIZE = len(corpus.CORPUS)
N_LAYERS, N_HEADS = 6, 12
BASE = ("softmax", (("tau", 1.0),))  # the model's own attention: softmax at tau = 1
RHOS = semirelaxed.rho_grid()        # Sinkhorn's rho slider: 1e-3 to 1e4, then infinity (doubly stochastic)
rho_text = semirelaxed.rho_text
SWEEP_RHOS = semirelaxed.rho_grid(per_decade=2, infinity=False)   # the rho sweep's grid

Params = tuple[tuple[str, float], ...]  # a normaliser's keywords as hashable pairs, for the page's cache


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


def load(device: str):
    """(model, tokenizer) of all-MiniLM-L6-v2 on ``device``, offline from its package."""
    return minilm.load(device)


def forward(sentence: str, name: str, params: Params, device: str) -> minilm.Forward:
    """One forward of ``sentence`` with every head normalised by ``name`` with keywords ``params``."""
    return minilm.forward(sentence, name, device=device, **dict(params))


@dataclass(frozen=True)
class Comparison:
    """The original forward (softmax, tau = 1), the forward under each chosen normaliser (label -> Forward) and
    what each swap changed (label -> minilm.Change)."""

    base: minilm.Forward
    swapped: dict[str, minilm.Forward]
    changes: dict[str, minilm.Change]

    @property
    def tokens(self) -> tuple[str, ...]:
        return self.base.tokens[0]


def comparison(settings: Settings, tau: float, run: Callable[[str, Params], minilm.Forward]) -> Comparison:
    """Every chosen normaliser against the original model; ``run(name, params)`` is one forward of the sentence
    (the page passes its cached :func:`forward`)."""
    if not settings.chosen:
        raise ValueError("choose at least one normaliser in the sidebar")
    base = run(*BASE)
    swapped = {}
    for name in settings.chosen:
        p = params(settings, name, tau)
        swapped[minilm.make_normaliser(name, **dict(p)).label()] = run(name, p)
    return Comparison(base, swapped, {label: minilm.compare(base, fwd) for label, fwd in swapped.items()})


@dataclass(frozen=True)
class ColumnError:
    """Sinkhorn's rows sum to 1 exactly; its columns to 1 within ``error`` = max_k |sum_i A_ik - 1| after
    ``n_iter`` iterations, held towards 1 by ``rho`` (infinity: doubly stochastic)."""

    error: float
    n_iter: int
    rho: float = math.inf


@dataclass(frozen=True)
class OneHead:
    """Head ``head`` of layer ``layer`` (both counted from 1, as the page numbers them) under every normaliser:
    ``maps`` label -> (n, n) weights over the n ``tokens``, the original first ('original: softmax (tau = 1)'); in
    the original head, the key of index ``sink`` (the ``sink + 1``-th token) receives ``sink_mass`` of the n units
    of attention (one per query); Sinkhorn's column error per Sinkhorn label."""

    layer: int
    head: int
    tokens: tuple[str, ...]
    maps: dict[str, torch.Tensor]
    sink: int
    sink_mass: float
    sinkhorn: dict[str, ColumnError]


def one_head(c: Comparison, layer: int, head: int) -> OneHead:
    """The weights of head ``head`` (1 to 12) of layer ``layer`` (1 to 6, 1 next to the word embeddings) under the
    original softmax and each swapped normaliser (eq. (21), (23) of 002)."""
    if not (1 <= layer <= N_LAYERS and 1 <= head <= N_HEADS):
        raise ValueError(f"layer must be 1 to {N_LAYERS} and head 1 to {N_HEADS}, got {layer}, {head}")
    l, h = layer - 1, head - 1                                       # the tensors' indices
    own = c.base.normaliser.label()
    maps = {f"original: {own}": c.base.attention[0, l, h]}
    maps.update({label: fwd.attention[0, l, h] for label, fwd in c.swapped.items() if label != own})
    received = c.base.attention[0, l, h].sum(dim=0)                  # attention each key receives
    sink = int(received.argmax())
    sinkhorn = {label: ColumnError(float((fwd.attention[0, l, h].sum(dim=0) - 1).abs().max()),
                                   fwd.normaliser.n_iter, fwd.normaliser.rho)
                for label, fwd in c.swapped.items() if fwd.normaliser.name == "sinkhorn"}
    return OneHead(layer, head, c.tokens, maps, sink, float(received[sink]), sinkhorn)


def at_defaults():
    """The page's first head (layer 1, head 1) under its default normalisers and settings, for DEFAULT_SENTENCE on
    WVIZ_DEVICE, as a function of tau (its main slider): bench_latency's reference draws it."""
    settings, device = Settings(DEFAULT_CHOSEN, 1.5, 1.0, 5), str(get_device())
    return lambda tau: one_head(comparison(settings, tau, lambda name, p: forward(DEFAULT_SENTENCE, name, p, device)),
                                1, 1)


def sparsity_maps(c: Comparison) -> dict[str, torch.Tensor]:
    """Fraction of exact zeros per (layer, head): 'original', then each normaliser."""
    first = next(iter(c.changes.values()))
    return {"original": first.base_sparsity, **{label: ch.sparsity for label, ch in c.changes.items()}}


@dataclass(frozen=True)
class Pruning:
    """A normaliser that sets weights to exactly zero: the mean fraction of zeros over all heads and in layer 0."""

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
    """One row per normaliser: cosine to the original sentence embedding, mean sparsity, each layer's distance (layer
    1 to 6)."""
    ch = c.changes.values()
    return pd.DataFrame({
        "normaliser": list(c.changes),
        "cosine to the original embedding": [x.cosine for x in ch],
        "mean sparsity": [float(x.sparsity.mean()) for x in ch],
        **{f"distance, layer {l + 1}": [float(x.layer_distance[l]) for x in ch] for l in range(N_LAYERS)},
    })


# ---- from softmax to Sinkformer: Sinkhorn's rho ------------------------------------------------------------------

@dataclass(frozen=True)
class RhoSweep:
    """Sinkhorn at one gamma and n_iter in every head, over rho: at each rho of rhos (R,) the cosine of the sentence
    embedding to the model's own (cosines (R,)) and each layer's output distance ||h'_l - h_l||_F / ||h_l||_F
    (distances (R, L)); ends = (rho = 0, rho = infinity), each (cosine, distances (L,))."""

    gamma: float
    n_iter: int
    rhos: torch.Tensor
    cosines: torch.Tensor
    distances: torch.Tensor
    ends: tuple[tuple[float, torch.Tensor], tuple[float, torch.Tensor]]


def rho_sweep(sentence: str, gamma: float, n_iter: int, device: str, rhos=SWEEP_RHOS) -> RhoSweep:
    """The road from the model's softmax (rho -> 0, at gamma = 1 exactly its attention) to Sinkformer attention
    (rho = infinity): one forward per rho (about 30 ms each on a CPU core) compared with the model's own."""
    base = minilm.forward(sentence, device=device)
    changes = [minilm.compare(base, minilm.forward(sentence, "sinkhorn", device=device, gamma=gamma, n_iter=n_iter,
                                                   rho=rho))
               for rho in (0.0, *rhos, math.inf)]
    inner = changes[1:-1]
    return RhoSweep(gamma, n_iter, torch.tensor(rhos, dtype=torch.float64),
                    torch.tensor([c.cosine for c in inner], dtype=torch.float64),
                    torch.stack([c.layer_distance for c in inner]),
                    tuple((c.cosine, c.layer_distance) for c in (changes[0], changes[-1])))


# ---- Figure 4 of 002 ------------------------------------------------------------------------------------------

# Figure 4's version in the shared disk cache: raise it when fenchel_deviation's numbers change.
FIGURE4_VERSION = 1


def deviation(dual_alpha: float, device: str, progress=None) -> figure4.FenchelDeviation:
    """Sec. 8 / Figure 4 of 002 over the bundled corpus at reliability ``dual_alpha`` of z in problem (4):
    ||lambda* - alpha z|| / ||lambda*|| for every layer, head and token. progress(done, total) after each batch.

    Seconds of work: computed once per (corpus, alpha, device) for every server process (wviz.disk_cache); a
    result loaded from there reports no progress."""
    params = {"corpus": list(corpus.CORPUS), "alpha": float(dual_alpha), "device": device}
    return disk_cache.cached("figure4", params, FIGURE4_VERSION,
                             lambda: figure4.fenchel_deviation(alpha=dual_alpha, device=device, progress=progress),
                             types=(figure4.FenchelDeviation,))


@dataclass(frozen=True)
class Figure4Summary:
    """The numbers under Figure 4: query tokens, dual problems solved, the largest gradient norm at lambda*, the
    mean and largest deviation, and the mean over [CLS] queries and over the other tokens."""

    n_tokens: int
    n_problems: int
    max_grad_norm: float
    mean: float
    largest: float
    cls_mean: float
    others_mean: float

    @property
    def close(self) -> bool:
        """Whether alpha z is close to lambda* on average (mean deviation below 0.1), as in the paper's panels."""
        return self.mean < 0.1


def figure4_summary(dev: figure4.FenchelDeviation) -> Figure4Summary:
    """Means over positions of the head-averaged deviation (the histogrammed samples of Figure 4)."""
    d = dev.per_layer
    return Figure4Summary(d.shape[1], dev.per_head.numel(), float(dev.grad_norm.max()), float(d.mean()),
                          float(dev.per_head.max()), float(d[:, dev.position == 0].mean()),
                          float(d[:, dev.position > 0].mean()))


# ---- guided experiments ----------------------------------------------------------------------------------------

def shown(*names: str) -> list[str]:
    """The normalisers as the multiselect writes them to the URL: by their labels (CHOICES), which its
    format_func shows and Streamlit's URL binding matches, not by their keys."""
    return [CHOICES[n] for n in names]


# Values as the URL holds them: layer and head ints (their selectboxes' options, counted from 1), tau and dual_alpha
# points of their log grids (0.1, 1 and 10 are), alpha a float on its 0.05 grid, the normalisers by label (shown). On
# the default sentence (13 word pieces) head 8 of layer 5 sends 10.7 of its 13 units of attention to [CLS].
TRY_THIS = (
    Try("Sparsemax at tau = 0.1", {"normalisers": shown("sparsemax"), "tau": 0.1},
        "Sparsemax of S / tau keeps one key per query, two for a few (in the panel of layer 1, head 1: one key for "
        "11 of the 13 queries, two for the other 2): as tau -> 0 it becomes the argmax."),
    Try("From the model's softmax to Sinkformer", {"normalisers": shown("sinkhorn"), "rho": 0.001,
                                                    "view": "Sinkhorn's rho: softmax to Sinkformer"},
        "At rho = 0.001 Sinkhorn's panel is the original head (rho -> 0 at gamma = 1 is the model's softmax) and the "
        "embedding's cosine is 1; along the sweep it turns away as rho holds every key to one unit, down to 0.42 "
        "for Sinkformer attention at rho = ∞."),
    Try("An attention sink: layer 5, head 8, under Sinkhorn", {"layer": 5, "head": 8, "normalisers": shown("sinkhorn")},
        "The original head gives 10.7 of its 13 units of attention to [CLS] (the column that lights up); Sinkhorn's "
        "columns each receive one unit to within 0.02, so the sink is gone."),
    Try("entmax between softmax and sparsemax", {"normalisers": shown("softmax", "entmax", "sparsemax"),
                                               "alpha": 1.25},
        "alpha = 1.25 keeps more keys than sparsemax yet still sets weights exactly to zero: compare the panels "
        "and the 'Sparsity per head' view (36 % zeros on average, against sparsemax's 87 %)."),
    Try("Figure 4 at alpha = 0.1", {"dual_alpha": 0.1},
        "Every layer's histogram moves towards 0 (Theorem 2): its mean deviation falls from 0.05 to 0.08 at alpha "
        "= 1 to about 0.01; the less reliable the evidence z, the closer alpha z is to the true lambda*."),
)
