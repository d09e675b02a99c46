"""What the "Heads solve the dual" page computes: Sec. 8 / Figure 4 of 002 on an encoder (the bundled
all-MiniLM-L6-v2, a model folder of WVIZ_MODELS or an upload: :mod:`wviz.models.hub`). 002 reads every head as the
solver of problem (4); its Fenchel dual (9) has a maximiser lambda*, and the attention formula (18) is exact for the
approximation lambda* ~ alpha z (16). How far alpha z is from lambda*, ||lambda* - alpha z|| / ||lambda*||, is
measured (:mod:`wviz.models.figure4`):

- live on one sentence, every layer, head and query token, while the alpha slider moves (a few hundred Newton
  solves of n x n systems, n the sentence's tokens: tens to hundreds of milliseconds);
- over the bundled corpus (Figure 4 itself and Appendix C's per-head means), thousands of dual problems, solved in
  the background once per model and alpha for every server process (wviz.disk_cache).

Here alpha is only the reliability of the evidence z in problem (4), as in wviz.models.figure4.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from wviz import disk_cache
from wviz.guide import Try
from wviz.models import catalogue, corpus, figure4, hub, lens as lenses
from wviz import fenchel

__all__ = ["Keys", "DEFAULT_SENTENCE", "DEFAULT_ALPHA", "CORPUS_SIZE", "FAMILIES", "catalogue", "hub",
           "SentenceDuals", "sentence_duals", "at_defaults", "FIGURE4_VERSION", "deviation", "Figure4Summary",
           "figure4_summary", "TRY_THIS"]

DEFAULT_SENTENCE = "The cat sat on the mat and watched the rain."
DEFAULT_ALPHA = 1.0   # the paper's: the attention formula (18) is then exactly the head's softmax
CORPUS_SIZE = len(corpus.CORPUS)
FAMILIES = ("encoder",)   # 002's Figure 4 reads an encoder's (bidirectional, softmax) heads


class Keys:
    """The page's widget keys: the names its URL holds. The page, TRY_THIS and the tests read them here."""
    MODEL = "dual_model"
    MODEL_ZIP = "dual_model_zip"
    SENTENCE = "dual_sentence"
    ALPHA = "dual_alpha"


class Labels:
    """The page has no view selector: its figures are all drawn."""


# ---- one sentence, live ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SentenceDuals:
    """The dual (9) solved for every layer, head and query token of one sentence at reliability ``alpha``.

    tokens     the sentence's word pieces ([CLS] ... [SEP])
    deviation  (L, H, T) ||lambda* - alpha z|| / ||lambda*|| per layer, head and query token
    grad_norm  (L, H, T) the dual's gradient norm at each lambda* (optimality: about 1e-10)
    """

    tokens: tuple[str, ...]
    deviation: torch.Tensor
    grad_norm: torch.Tensor
    alpha: float

    @property
    def per_head(self) -> torch.Tensor:
        """(L, H) each head's mean over the query tokens."""
        return self.deviation.mean(dim=-1)

    @property
    def per_token(self) -> torch.Tensor:
        """(L, T) each query token's deviation averaged over the heads (the samples Figure 4 histograms)."""
        return self.deviation.mean(dim=1)


def sentence_forward(lens: hub.Lens, sentence: str) -> lenses.Forward:
    """The encoder's own forward (softmax) of one sentence, with the queries the dual needs; ValueError for an empty
    or too long sentence."""
    catalogue.of_family(lens, FAMILIES)
    if not sentence.strip():
        raise ValueError("type a sentence: the dual is solved for each of its tokens")
    return lenses.forward(lens, [sentence], max_tokens=catalogue.token_limit(lens))


def sentence_duals(fwd: lenses.Forward, lens: hub.Lens, alpha: float) -> SentenceDuals:
    """The dual (9) at ``alpha`` for every layer, head and query of the one sentence ``fwd`` ran
    (wviz.models.figure4.fenchel_duals), and the relative deviation of alpha z from each lambda*."""
    layers = range(fwd.hidden.shape[1] - 1)
    duals = [figure4.fenchel_duals(fwd, layer, alpha, lens) for layer in layers]
    deviation = torch.stack([fenchel.relative_deviation(d.lam, d.z, d.alpha)[0] for d in duals])   # (L, H, T)
    return SentenceDuals(tuple(fwd.tokens[0]), deviation.cpu(), torch.stack([d.grad_norm[0] for d in duals]).cpu(),
                         duals[0].alpha)


def at_defaults(sentence: str = DEFAULT_SENTENCE):
    """The main figure's result as a function of the page's main slider, alpha, on the bundled MiniLM and
    ``sentence``."""
    lens = hub.load(None, "cpu")
    fwd = sentence_forward(lens, sentence)
    return lambda alpha: sentence_duals(fwd, lens, alpha)


# ---- the corpus: Figure 4 --------------------------------------------------------------------------------------

# Figure 4's version in the shared disk cache: raise it when fenchel_deviation's numbers change.
FIGURE4_VERSION = 1


def deviation(alpha: float, device: str, progress=None, lens: hub.Lens | None = None) -> figure4.FenchelDeviation:
    """Sec. 8 / Figure 4 of 002 over the bundled corpus at reliability ``alpha`` of z in problem (4), on the
    encoder ``lens`` (None: the bundled MiniLM): ||lambda* - alpha z|| / ||lambda*|| for every layer, head and
    token. progress(done, total) after each batch. ValueError for a decoder or an image model.

    Seconds of work: computed once per (model, corpus, alpha, device) for every server process (wviz.disk_cache,
    keyed by the model's key: 'bundled', 'folder:<path>' or 'upload:<sha256>'); a result loaded from there reports
    no progress."""
    lens = lens if lens is not None else hub.load(None, device)
    catalogue.of_family(lens, FAMILIES)
    params = {"corpus": list(corpus.CORPUS), "alpha": float(alpha), "device": device, "model": lens.info.key}
    return disk_cache.cached("figure4", params, FIGURE4_VERSION,
                             lambda: figure4.fenchel_deviation(alpha=alpha, device=device, progress=progress,
                                                               lens=lens),
                             types=(figure4.FenchelDeviation,))


@dataclass(frozen=True)
class Figure4Summary:
    """The numbers under Figure 4: query tokens, dual problems solved, the largest gradient norm at lambda*, the
    mean and largest deviation, and the mean over the first token's queries ([CLS]) and over the other tokens."""

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

# alpha as the URL holds it: a point of its log grid (0.1, 1 and 10 are). Every link opens the bundled MiniLM; the
# numbers are those the captions under the figures print.
TRY_THIS = (
    Try("Theorem 2: alpha = 0.1", {Keys.ALPHA: 0.1},
        "The caption under the sentence's heads reads a mean deviation of 0.0087, the farthest head 0.0169, and on "
        "their colour scale, fixed from 0, the heatmaps go dark: the less reliable the evidence z, the closer "
        "alpha z is to lambda* (Theorem 2). Figure 4 below, over the corpus, agrees."),
    Try("alpha = 10: a rough approximation", {Keys.ALPHA: 10.0},
        "The mean deviation on this sentence reads 0.1269, and the farthest head, layer 5, head 3, 0.2206; Figure 4 "
        "below, over the corpus, calls alpha z a rough approximation of lambda*."),
    Try("[CLS] stands apart", {Keys.SENTENCE: "Attention weights are the answer to an optimisation problem."},
        "In the tokens' heatmap the column of [CLS] is the brightest: its caption reads 0.1232 for the first token's "
        "queries against 0.0626 for the other tokens, as over the corpus (Figure 4's caption: 0.1232 against "
        "0.0654)."),
)
