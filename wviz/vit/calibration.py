"""Calibration of a classifier's predictive distribution: temperature scaling, the reliability diagram's bootstrap
bands, selective classification (risk against coverage) and split-conformal prediction sets.

* Temperature scaling (Guo et al., "On Calibration of Modern Neural Networks", ICML 2017): the logits divided by one
  tau > 0 fitted by the negative log-likelihood on a validation split, p_tau = softmax(logits / tau); for a
  Monte-Carlo predictive each draw is tempered, p_tau = 1/S sum_s softmax(l_s / tau). It is the same tau as the
  temperature of softmax(scores / tau) on the attention pages: tau < 1 sharpens, tau > 1 flattens, the argmax (and
  so the accuracy) stays.
* Risk-coverage (El-Yaniv & Wiener 2010; Geifman & El-Yaniv 2017): keep the fraction c of the images a score calls
  the most certain; the risk is the error among them. A score that ranks mistakes last gives a low curve; one that
  ranks every mistake last gives the lowest the predictions allow (the optimal curve of Geifman et al. 2019).
* Split conformal (Vovk et al. 2005; the "least ambiguous set-valued classifier" of Sadinle et al. 2019): with the
  nonconformity 1 - p_y on n calibration images, q = the ceil((n + 1)(1 - alpha))-th smallest; the set of a new
  image holds every class c with 1 - p_c <= q. If calibration and test images are exchangeable, the set holds the
  true class with probability >= 1 - alpha (and < 1 - alpha + 1 / (n + 1)). Corrupted images are not exchangeable
  with clean ones: the page shows what happens to the sets there.

The sets come from crepes (Boström 2022, a maintained conformal library on numpy, pandas and scipy, pinned in
requirements.txt), whose ConformalClassifier takes the nonconformity scores directly, so the ViT needs no
scikit-learn wrapper; the closed-form threshold q above is computed here too, to show on the page and to check
crepes against (tests/test_vit_calibration.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from wviz.vit.metrics import N_BINS

__all__ = ["tempered", "tempered_nll", "fit_temperature", "TAU_RANGE", "at_range_edge", "RiskCoverage", "risk_coverage",
           "perfect", "conformal_quantile", "prediction_sets", "ConformalSets", "conformal_sets", "reliability_bands"]

TAU_RANGE = (0.05, 20.0)


def tempered(logits: torch.Tensor, tau: float) -> torch.Tensor:
    """softmax(logits / tau), averaged over the draws when ``logits`` is (S, N, C) (a Monte-Carlo predictive);
    (N, C) logits give (N, C) probabilities.

    >>> import torch
    >>> from wviz.vit.calibration import tempered
    >>> l = torch.tensor([[2.0, 0.0]])
    >>> round(float(tempered(l, 1.0)[0, 0]), 4), round(float(tempered(l, 2.0)[0, 0]), 4)   # tau 2 flattens
    (0.8808, 0.7311)
    """
    if not tau > 0:
        raise ValueError(f"the temperature tau must be positive, got {tau}")
    p = torch.softmax(logits.double() / tau, -1)
    return p.mean(0) if logits.dim() == 3 else p


def tempered_nll(logits: torch.Tensor, labels: torch.Tensor, tau: float) -> float:
    """Mean -log p_tau(y | x) of :func:`tempered` (probabilities floored at 1e-12).

    >>> import math, torch
    >>> from wviz.vit.calibration import tempered_nll
    >>> round(tempered_nll(torch.tensor([[0.0, 0.0]]), torch.tensor([0]), 1.0), 4), round(math.log(2), 4)
    (0.6931, 0.6931)
    """
    p = tempered(logits, tau).gather(1, labels.reshape(-1, 1).to(logits.device)).clamp_min(1e-12)
    return float(-p.log().mean())


def fit_temperature(logits: torch.Tensor, labels: torch.Tensor, grid: int = 60, iters: int = 40) -> float:
    """The tau in TAU_RANGE that minimises :func:`tempered_nll` on (logits, labels), a validation split: the best
    point of a log-spaced grid, then golden-section search between its neighbours (the NLL of a softmax is convex
    in 1 / tau; the Monte-Carlo mean of softmaxes is unimodal in practice, and the grid guards the rest).

    Example: logits twice too sharp for their labels get tau near 2.

    >>> import torch
    >>> from wviz.vit.calibration import fit_temperature
    >>> g = torch.Generator().manual_seed(0)
    >>> true = torch.randn(4000, 3, generator=g)
    >>> labels = torch.multinomial(torch.softmax(true, -1), 1, generator=g)[:, 0]
    >>> round(fit_temperature(2 * true, labels), 1)
    2.0
    """
    lo, hi = (math.log(t) for t in TAU_RANGE)
    taus = torch.linspace(lo, hi, grid).exp().tolist()
    nlls = [tempered_nll(logits, labels, t) for t in taus]
    k = min(range(grid), key=nlls.__getitem__)
    a, b = math.log(taus[max(k - 1, 0)]), math.log(taus[min(k + 1, grid - 1)])
    r = (math.sqrt(5) - 1) / 2
    c, d = b - r * (b - a), a + r * (b - a)
    fc, fd = (tempered_nll(logits, labels, math.exp(t)) for t in (c, d))
    for _ in range(iters):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - r * (b - a)
            fc = tempered_nll(logits, labels, math.exp(c))
        else:
            a, c, fc = c, d, fd
            d = a + r * (b - a)
            fd = tempered_nll(logits, labels, math.exp(d))
    return math.exp((a + b) / 2)


def at_range_edge(tau: float) -> bool:
    """Whether a fitted tau lies at an end of TAU_RANGE (within 1 %): the NLL kept falling towards it, so tau is a
    bound of the search, not a measured optimum. On a small calibration split that a Monte-Carlo model gets right in
    almost every draw, the NLL falls as tau -> 0 (each draw's softmax tends to its vote, and the votes are right).

    >>> from wviz.vit.calibration import at_range_edge
    >>> at_range_edge(0.05), at_range_edge(1.3), at_range_edge(19.9)
    (True, False, True)
    """
    lo, hi = TAU_RANGE
    return tau <= lo * 1.01 or tau >= hi / 1.01


@dataclass(frozen=True)
class RiskCoverage:
    """coverage (N,) k/N for k = 1..N, risk (N,) the error among the k images the score calls most certain, and
    aurc, the area under the curve (the mean risk over coverages; lower is better)."""

    coverage: torch.Tensor
    risk: torch.Tensor
    aurc: float


def risk_coverage(scores: torch.Tensor, correct: torch.Tensor) -> RiskCoverage:
    """Selective classification by an uncertainty score (larger = less certain): keep the images with the
    smallest scores first (ties in their given order).

    Example: a score that puts the one mistake last has zero risk until full coverage.

    >>> import torch
    >>> from wviz.vit.calibration import risk_coverage
    >>> rc = risk_coverage(torch.tensor([0.1, 0.9, 0.2, 0.3]), torch.tensor([True, False, True, True]))
    >>> rc.risk.tolist(), rc.aurc
    ([0.0, 0.0, 0.0, 0.25], 0.0625)
    """
    order = torch.sort(scores.double().cpu(), stable=True).indices
    wrong = (~correct.cpu().bool()[order]).double()
    k = torch.arange(1, len(order) + 1, dtype=torch.float64)
    risk = wrong.cumsum(0) / k
    return RiskCoverage(k / len(order), risk, float(risk.mean()))


def perfect(rc: RiskCoverage) -> RiskCoverage:
    """The curve of a perfect score for the predictions behind ``rc``: every one of their E errors called less
    certain than every right answer, so the first N - E images kept are right. No score of the same predictions lies
    below it (the optimal risk-coverage curve of Geifman et al. 2019; a score's AURC above its AURC is what the
    score leaves to gain, not the model).

    >>> import torch
    >>> from wviz.vit.calibration import perfect, risk_coverage
    >>> rc = risk_coverage(torch.tensor([0.1, 0.2, 0.3, 0.9]), torch.tensor([False, True, True, True]))
    >>> rc.risk.tolist(), perfect(rc).risk.tolist()
    ([1.0, 0.5, 0.3333333333333333, 0.25], [0.0, 0.0, 0.0, 0.25])
    """
    coverage = torch.as_tensor(rc.coverage, dtype=torch.float64)
    n = len(coverage)
    k = torch.arange(1, n + 1, dtype=torch.float64)
    errors = round(float(torch.as_tensor(rc.risk, dtype=torch.float64)[-1]) * n)
    risk = (errors - (n - k)).clamp_min(0) / k
    return RiskCoverage(coverage, risk, float(risk.mean()))


def conformal_quantile(probs: torch.Tensor, labels: torch.Tensor, alpha: float = 0.1) -> float:
    """Split conformal's threshold q on the calibration images (module docstring): the ceil((n + 1)(1 - alpha))-th
    smallest nonconformity 1 - p_y; 1.0 (every class in every set) when n is too small for the level.

    >>> import torch
    >>> from wviz.vit.calibration import conformal_quantile
    >>> probs = torch.tensor([[0.9, 0.1], [0.6, 0.4], [0.3, 0.7], [0.8, 0.2]])
    >>> round(conformal_quantile(probs, torch.tensor([0, 0, 1, 1]), alpha=0.25), 4)   # scores 0.1, 0.4, 0.3, 0.8
    0.8
    """
    if not 0 < alpha < 1:
        raise ValueError(f"the miscoverage alpha must be between 0 and 1, got {alpha}")
    scores = 1 - probs.double().cpu().gather(1, labels.reshape(-1, 1).cpu())[:, 0]
    k = math.ceil((len(scores) + 1) * (1 - alpha))
    return 1.0 if k > len(scores) else float(scores.sort().values[k - 1])


def prediction_sets(probs: torch.Tensor, q: float) -> torch.Tensor:
    """(N, C) bool: class c is in image i's set when 1 - p_ic <= q.

    >>> import torch
    >>> from wviz.vit.calibration import prediction_sets
    >>> prediction_sets(torch.tensor([[0.7, 0.25, 0.05]]), 0.8).tolist()
    [[True, True, False]]
    """
    return (1 - probs.double()) <= q + 1e-12


@dataclass(frozen=True)
class ConformalSets:
    """Split-conformal sets at level 1 - alpha: the threshold q, and per set of images its empirical coverage (the
    share of sets holding the true class) and its set sizes (N,)."""

    alpha: float
    q: float
    coverage: dict
    sizes: dict


def conformal_sets(cal: tuple[torch.Tensor, torch.Tensor], evaluated: dict, alpha: float = 0.1) -> ConformalSets:
    """Split-conformal sets by the crepes library (its standard, unsmoothed p-values: class c is in the set when
    (1 + #{calibration scores >= 1 - p_c}) / (n + 1) >= alpha, the same sets as 1 - p_c <= q), calibrated on
    ``cal`` (probs, labels); the sets of every (probs, labels) in ``evaluated`` (name -> pair).

    Example: on exchangeable data the sets cover about 1 - alpha of the true classes.

    >>> import torch
    >>> from wviz.vit.calibration import conformal_sets
    >>> g = torch.Generator().manual_seed(0)
    >>> logits = 3 * torch.randn(2000, 4, generator=g)
    >>> labels = torch.multinomial(torch.softmax(logits, -1), 1, generator=g)[:, 0]
    >>> p = torch.softmax(logits, -1)
    >>> sets = conformal_sets((p[:1000], labels[:1000]), {"test": (p[1000:], labels[1000:])}, alpha=0.1)
    >>> abs(sets.coverage["test"] - 0.9) < 0.03
    True
    """
    from crepes import ConformalClassifier

    probs, labels = cal
    scores = 1 - probs.double().cpu().gather(1, labels.reshape(-1, 1).cpu())[:, 0]
    cc = ConformalClassifier().fit(scores.numpy())
    coverage, sizes = {}, {}
    for name, (p, y) in evaluated.items():
        s = torch.from_numpy(cc.predict_set((1 - p.double().cpu()).numpy(), confidence=1 - alpha,
                                            smoothing=False)).bool()
        coverage[name] = float(s.gather(1, y.reshape(-1, 1).cpu()).double().mean())
        sizes[name] = s.sum(1)
    return ConformalSets(alpha, conformal_quantile(probs, labels, alpha), coverage, sizes)


def reliability_bands(probs: torch.Tensor, labels: torch.Tensor, boot: int = 1000, n_bins: int = N_BINS,
                      seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(low, high) (bins,): the 2.5 % and 97.5 % bootstrap percentiles of each bin's accuracy, resampling the
    images with replacement (NaN where a bin holds no image in the data).

    Example: a bin of only right answers has a band of exactly 1.

    >>> import torch
    >>> from wviz.vit.calibration import reliability_bands
    >>> low, high = reliability_bands(torch.tensor([[0.95, 0.05]] * 10), torch.zeros(10, dtype=torch.long), boot=50)
    >>> float(low[14]), float(high[14]), bool(low[:14].isnan().all())
    (1.0, 1.0, True)
    """
    from wviz.vit.intervals import resample_counts

    conf, pred = probs.double().cpu().max(-1)
    correct = (pred == labels.cpu()).double()
    onehot = torch.nn.functional.one_hot((conf * n_bins).floor().long().clamp(0, n_bins - 1), n_bins).double()
    w = resample_counts(len(conf), boot, seed)
    count, right = w @ onehot, w @ (onehot * correct[:, None])
    acc = torch.where(count > 0, right / count.clamp_min(1), torch.full_like(count, float("nan")))
    low = torch.nanquantile(acc, 0.025, dim=0)
    high = torch.nanquantile(acc, 0.975, dim=0)
    empty = onehot.sum(0) == 0
    return low.masked_fill(empty, float("nan")), high.masked_fill(empty, float("nan"))
