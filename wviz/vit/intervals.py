"""How sure a comparison of two models is: the paired bootstrap over test images, and the mean +- standard deviation
of a number over seeds.

A claim "the stochastic model scores better than its twin" rests on a few hundred test images; resampling those
images with replacement (the same resample for both models: paired) and recomputing the difference gives its
percentile 95 % interval (Efron & Tibshirani 1993, ch. 13). Each resample is a vector of counts (how often each
image was drawn), so the AUROC and the ECE of a resample are weighted sums, computed for every resample at once.
A model evaluated at several Monte-Carlo seeds enters with the mean of its metric over those seeds, in each resample.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

import torch

from wviz.vit.metrics import N_BINS

__all__ = ["Interval", "resample_counts", "weighted_auroc", "weighted_ece", "weighted_selective_risk",
           "auroc_difference", "ece_difference", "selective_risk_difference", "mean_sd", "BOOTSTRAP"]

BOOTSTRAP = 2000  # resamples: the percentile interval's ends move by about 0.002 between two runs of 2000


@dataclass(frozen=True)
class Interval:
    """A difference (model a - model b) measured on the images as they are, and its bootstrap 95 % interval."""

    estimate: float
    low: float
    high: float

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0

    def to_list(self) -> list[float]:
        return [round(self.estimate, 4), round(self.low, 4), round(self.high, 4)]


def resample_counts(n: int, boot: int = BOOTSTRAP, seed: int = 0) -> torch.Tensor:
    """(boot, n) counts of n items drawn n times with replacement, one row per resample (each row sums to n).

    >>> from wviz.vit.intervals import resample_counts
    >>> c = resample_counts(5, boot=3)
    >>> tuple(c.shape), c.sum(1).tolist()
    ((3, 5), [5.0, 5.0, 5.0])
    """
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, n, (boot, n), generator=g)
    return torch.zeros(boot, n, dtype=torch.float64).scatter_add_(1, idx, torch.ones(boot, n, dtype=torch.float64))


def weighted_auroc(in_scores: torch.Tensor, out_scores: torch.Tensor, w_in: torch.Tensor,
                   w_out: torch.Tensor) -> torch.Tensor:
    """AUROC = P(score_out > score_in) + P(tie) / 2 with the images counted ``w_in`` (R, n_in) and ``w_out``
    (R, n_out) times: one AUROC per row R. All ones give :func:`wviz.vit.metrics.auroc`.

    Example: counting an OOD image twice is drawing it twice.

    >>> import torch
    >>> from wviz.vit.intervals import weighted_auroc
    >>> a, b = torch.tensor([0.1, 0.4]), torch.tensor([0.3, 0.5])
    >>> weighted_auroc(a, b, torch.ones(1, 2), torch.tensor([[2.0, 1.0]])).tolist()   # pairs: 4 of 6 above, ...
    [0.6666666666666666]
    """
    values = torch.cat([in_scores, out_scores]).double().cpu()
    distinct, inverse = torch.unique(values, return_inverse=True)
    k = len(distinct)
    R = w_in.shape[0]
    n_in = len(in_scores)
    W_in = torch.zeros(R, k, dtype=torch.float64).index_add_(1, inverse[:n_in], w_in.double().cpu())
    W_out = torch.zeros(R, k, dtype=torch.float64).index_add_(1, inverse[n_in:], w_out.double().cpu())
    below = W_in.cumsum(1) - W_in                       # in-distribution weight strictly below each value
    u = (W_out * (below + W_in / 2)).sum(1)
    return u / (W_in.sum(1) * W_out.sum(1))


def weighted_ece(probs: torch.Tensor, labels: torch.Tensor, w: torch.Tensor, n_bins: int = N_BINS) -> torch.Tensor:
    """ECE (equal-width bins of the top probability, as :func:`wviz.vit.metrics.reliability`) with image i counted
    w[r, i] times: (R, N) counts -> (R,).

    >>> import torch
    >>> from wviz.vit.intervals import weighted_ece
    >>> probs, labels = torch.tensor([[0.75, 0.25]] * 4), torch.tensor([0, 0, 0, 1])
    >>> weighted_ece(probs, labels, torch.tensor([[1.0, 1, 1, 1], [0, 0, 0, 4]])).tolist()   # calibrated; all wrong
    [0.0, 0.75]
    """
    conf, pred = probs.double().cpu().max(-1)
    correct = (pred == labels.cpu()).double()
    k = (conf * n_bins).floor().long().clamp(0, n_bins - 1)
    onehot = torch.nn.functional.one_hot(k, n_bins).double()          # (N, bins)
    w = w.double().cpu()
    gap = w @ (onehot * (correct - conf)[:, None])                     # (R, bins): sum of (acc - conf) per bin
    return gap.abs().sum(1) / w.sum(1)


def weighted_selective_risk(scores: torch.Tensor, correct: torch.Tensor, w: torch.Tensor,
                            coverage: float) -> torch.Tensor:
    """The error rate among the ``coverage`` share of images with the smallest scores (selective classification,
    wviz.vit.calibration.risk_coverage), image i counted w[r, i] times: (R, N) counts -> (R,). The image at the
    boundary is kept in part, so that exactly coverage x the total count is kept.

    >>> import torch
    >>> from wviz.vit.intervals import weighted_selective_risk
    >>> scores, correct = torch.tensor([0.1, 0.2, 0.3, 0.9]), torch.tensor([True, False, True, False])
    >>> weighted_selective_risk(scores, correct, torch.ones(1, 4), 0.75).tolist()   # 1 wrong among the 3 kept
    [0.3333333333333333]
    >>> weighted_selective_risk(scores, correct, torch.tensor([[2.0, 0, 2, 0]]), 0.5).tolist()   # 0.1 twice
    [0.0]
    """
    order = torch.sort(scores.double().cpu(), stable=True).indices
    w = w.double().cpu()[:, order]
    wrong = (~correct.cpu().bool()[order]).double()
    kept_total = coverage * w.sum(1, keepdim=True)
    kept = torch.minimum(w, (kept_total - (w.cumsum(1) - w)).clamp_min(0))
    return (kept * wrong).sum(1) / kept_total[:, 0]


def _interval(diffs: torch.Tensor, estimate: float) -> Interval:
    low, high = torch.quantile(diffs.double(), torch.tensor([0.025, 0.975], dtype=torch.float64)).tolist()
    return Interval(float(estimate), float(low), float(high))


def auroc_difference(a: list[tuple[torch.Tensor, torch.Tensor]], b: list[tuple[torch.Tensor, torch.Tensor]],
                     boot: int = BOOTSTRAP, seed: int = 0) -> Interval:
    """mean AUROC of model a - mean AUROC of model b on the same images, with its paired bootstrap interval. a, b:
    one (in-distribution scores, OOD scores) pair per evaluation of the model (its Monte-Carlo seeds, or its
    training seeds), every pair over the same test and OOD images; each resample draws test and OOD images with
    replacement, the same for every pair.

    Example: a score that separates perfectly against one at chance: the difference 0.5, well away from 0.

    >>> import torch
    >>> from wviz.vit.intervals import auroc_difference
    >>> x = torch.linspace(0, 1, 50)
    >>> d = auroc_difference([(x, x + 2)], [(x, x)], boot=200)
    >>> round(d.estimate, 3), d.excludes_zero
    (0.5, True)
    """
    n_in, n_out = len(a[0][0]), len(a[0][1])
    w_in, w_out = resample_counts(n_in, boot, seed), resample_counts(n_out, boot, seed + 1)
    ones_in, ones_out = torch.ones(1, n_in), torch.ones(1, n_out)

    def mean_auroc(pairs, wi, wo):
        return torch.stack([weighted_auroc(i, o, wi, wo) for i, o in pairs]).mean(0)

    diffs = mean_auroc(a, w_in, w_out) - mean_auroc(b, w_in, w_out)
    estimate = float(mean_auroc(a, ones_in, ones_out) - mean_auroc(b, ones_in, ones_out))
    return _interval(diffs, estimate)


def ece_difference(a: list[torch.Tensor], b: list[torch.Tensor], labels: torch.Tensor, boot: int = BOOTSTRAP,
                   seed: int = 0) -> Interval:
    """mean ECE of model a - mean ECE of model b on the same test images (a, b: one (N, C) predictive per
    evaluation), with its paired bootstrap interval: "a is better calibrated" only where the interval lies below 0.

    >>> import torch
    >>> from wviz.vit.intervals import ece_difference
    >>> labels = torch.arange(400) % 2
    >>> good = torch.nn.functional.one_hot(labels, 2).float() * 0.5 + 0.25    # 75 % on the right class ...
    >>> good[::4] = good[::4].flip(-1)                                         # ... right 3 times in 4: calibrated
    >>> sure = torch.nn.functional.one_hot(labels, 2).float()
    >>> sure[::4] = sure[::4].flip(-1)                                          # always sure, right 3 times in 4
    >>> d = ece_difference([good], [sure], labels, boot=200)
    >>> round(d.estimate, 3), d.high < 0
    (-0.25, True)
    """
    w = resample_counts(len(labels), boot, seed)

    def mean_ece(preds, weights):
        return torch.stack([weighted_ece(p, labels, weights) for p in preds]).mean(0)

    ones = torch.ones(1, len(labels))
    return _interval(mean_ece(a, w) - mean_ece(b, w), float(mean_ece(a, ones) - mean_ece(b, ones)))


def selective_risk_difference(a: list[tuple[torch.Tensor, torch.Tensor]], b: list[tuple[torch.Tensor, torch.Tensor]],
                              coverage: float = 0.9, boot: int = BOOTSTRAP, seed: int = 0) -> Interval:
    """mean error rate at ``coverage`` of model a - that of model b on the same test images (a, b: one (scores,
    correct) pair per evaluation, each model kept by its own score), with its paired bootstrap interval: "a makes
    fewer errors at this coverage" only where the interval lies below 0.

    >>> import torch
    >>> from wviz.vit.intervals import selective_risk_difference
    >>> correct = torch.arange(400) % 5 != 0                                  # one image in five wrong
    >>> knows = (~correct).double()                                           # scores exactly the wrong ones high
    >>> blind = torch.zeros(400)                                              # keeps the first 80 %, 1 in 5 wrong
    >>> d = selective_risk_difference([(knows, correct)], [(blind, correct)], coverage=0.8, boot=200)
    >>> round(d.estimate, 3), d.high < 0
    (-0.2, True)
    """
    n = len(a[0][0])
    w, ones = resample_counts(n, boot, seed), torch.ones(1, n)

    def mean_risk(pairs, weights):
        return torch.stack([weighted_selective_risk(s, c, weights, coverage) for s, c in pairs]).mean(0)

    return _interval(mean_risk(a, w) - mean_risk(b, w), float(mean_risk(a, ones) - mean_risk(b, ones)))


def mean_sd(values: list[float]) -> tuple[float, float]:
    """(mean, standard deviation with n - 1) of a number over seeds; sd 0 for a single value.

    >>> from wviz.vit.intervals import mean_sd
    >>> mean_sd([1.0, 2.0, 3.0])
    (2.0, 1.0)
    """
    values = [float(v) for v in values]
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)
