"""The evaluation of 004: accuracy, NLL, expected calibration error, reliability diagrams, OOD AUROC, error under
corruption, and the epistemic scores of a Monte-Carlo predictive (mutual information, class spread). Plain functions
of predicted probabilities (N, C), Monte-Carlo draws (S, N, C) and labels (N,); torch in, floats or tensors out, on
any device.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

__all__ = ["accuracy", "nll", "confusion", "Reliability", "reliability", "ece", "auroc", "mutual_information",
           "class_spread", "ood_scores", "tail_p", "fisher_combination", "SCORES", "EPISTEMIC", "FISHER", "COMBINED"]

N_BINS = 15


def _check(probs: torch.Tensor, labels: torch.Tensor) -> None:
    if probs.dim() != 2 or labels.shape != probs.shape[:1]:
        raise ValueError(f"probabilities must be (N, C) and labels (N,), got {tuple(probs.shape)} and "
                         f"{tuple(labels.shape)}")
    if len(probs) == 0:
        raise ValueError("no predictions to evaluate")


def accuracy(probs: torch.Tensor, labels: torch.Tensor) -> float:
    """Fraction of argmax predictions equal to the label.

    Example: two of three argmax predictions are right.

    >>> import torch
    >>> from wviz.vit.metrics import accuracy
    >>> probs = torch.tensor([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]])
    >>> labels = torch.tensor([0, 1, 1])
    >>> round(accuracy(probs, labels), 4)
    0.6667
    """
    _check(probs, labels)
    return float((probs.argmax(-1) == labels).float().mean())


def nll(probs: torch.Tensor, labels: torch.Tensor) -> float:
    """Mean negative log-likelihood -log p(y | x) of the labels (probabilities floored at 1e-12).

    Example: the mean of -log 0.9, -log 0.8 and -log 0.4, the probabilities given to the labels.

    >>> import math
    >>> import torch
    >>> from wviz.vit.metrics import nll
    >>> probs = torch.tensor([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]])
    >>> labels = torch.tensor([0, 1, 1])
    >>> round(nll(probs, labels), 4), round(-(math.log(0.9) + math.log(0.8) + math.log(0.4)) / 3, 4)
    (0.4149, 0.4149)
    """
    _check(probs, labels)
    return float(-probs.gather(1, labels[:, None]).clamp_min(1e-12).log().mean())


def confusion(probs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The confusion matrix (C, C): entry [t, p] counts the images of true class t whose argmax prediction is p.
    The diagonal holds the right answers; each row sums to the images of its class.

    Example: three images of class 0, one taken for class 1; one image of class 1, right.

    >>> import torch
    >>> from wviz.vit.metrics import confusion
    >>> probs = torch.tensor([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.4, 0.6]])
    >>> confusion(probs, torch.tensor([0, 0, 0, 1])).tolist()
    [[2, 1], [0, 1]]
    """
    _check(probs, labels)
    C = probs.shape[1]
    if int(labels.min()) < 0 or int(labels.max()) >= C:
        raise ValueError(f"labels must index the {C} classes, got labels from {int(labels.min())} to "
                         f"{int(labels.max())}")
    pairs = labels.to(probs.device).long() * C + probs.argmax(-1)
    return torch.bincount(pairs, minlength=C * C).reshape(C, C).cpu()


@dataclass(frozen=True)
class Reliability:
    """Reliability-diagram data over equal-width confidence bins [k/B, (k+1)/B) (the last bin includes 1.0):
    edges (B + 1,), count (B,), confidence (B,) mean confidence per bin, accuracy (B,) per bin (NaN where a bin is
    empty), and ece = sum_k count_k / N |accuracy_k - confidence_k|."""

    edges: torch.Tensor
    count: torch.Tensor
    confidence: torch.Tensor
    accuracy: torch.Tensor
    ece: float


def reliability(probs: torch.Tensor, labels: torch.Tensor, n_bins: int = N_BINS) -> Reliability:
    """Bin the max-probability confidence of each prediction (Guo et al. 2017); confidence 1.0 falls in the last
    bin (floor(1.0 * B) would be bin B, one past the end).

    Example: four predictions at confidence 0.75, three of them right, fill one bin whose accuracy equals its
    confidence: a perfectly calibrated predictor.

    >>> import torch
    >>> from wviz.vit.metrics import reliability
    >>> probs = torch.tensor([[0.75, 0.25]] * 4)
    >>> labels = torch.tensor([0, 0, 0, 1])
    >>> r = reliability(probs, labels)
    >>> k = int(r.count.argmax())
    >>> int(r.count.sum()), int(r.count[k]), float(r.confidence[k]), float(r.accuracy[k]), r.ece
    (4, 4, 0.75, 0.75, 0.0)
    """
    _check(probs, labels)
    conf, pred = probs.float().max(-1)
    correct = (pred == labels).float()
    k = (conf * n_bins).floor().long().clamp(0, n_bins - 1)
    count = torch.zeros(n_bins, device=conf.device).index_add_(0, k, torch.ones_like(conf))
    sum_conf = torch.zeros(n_bins, device=conf.device).index_add_(0, k, conf)
    sum_acc = torch.zeros(n_bins, device=conf.device).index_add_(0, k, correct)
    safe = count.clamp_min(1)
    ece_value = float(((sum_acc - sum_conf).abs()).sum() / len(conf))
    nan = torch.full_like(count, float("nan"))
    return Reliability(torch.linspace(0, 1, n_bins + 1), count.cpu(),
                       torch.where(count > 0, sum_conf / safe, nan).cpu(),
                       torch.where(count > 0, sum_acc / safe, nan).cpu(), ece_value)


def ece(probs: torch.Tensor, labels: torch.Tensor, n_bins: int = N_BINS) -> float:
    """Expected calibration error with ``n_bins`` equal-width bins (15 by default).

    Example: ECE is 0 for a perfectly calibrated predictor and 0.5 for one that is always sure and right half the time.

    >>> import torch
    >>> from wviz.vit.metrics import ece
    >>> ece(torch.tensor([[0.75, 0.25]] * 4), torch.tensor([0, 0, 0, 1]))
    0.0
    >>> ece(torch.tensor([[1.0, 0.0]] * 4), torch.tensor([0, 1, 0, 1]))
    0.5
    """
    return reliability(probs, labels, n_bins).ece


def auroc(in_scores: torch.Tensor, out_scores: torch.Tensor) -> float:
    """Area under the ROC curve for telling out-of-distribution inputs by a score that is larger for them:
    P(score_out > score_in) + P(tie) / 2 (Mann-Whitney U over all pairs, ties counted half), from ranks.

    Example: 1 when every OOD score is above every in-distribution score, 0.5 when the score cannot tell them apart.

    >>> import torch
    >>> from wviz.vit.metrics import auroc
    >>> auroc(torch.tensor([0.1, 0.2, 0.3]), torch.tensor([0.5, 0.9]))
    1.0
    >>> auroc(torch.tensor([0.1, 0.2]), torch.tensor([0.1, 0.2]))
    0.5
    """
    a, b = in_scores.reshape(-1).double().cpu(), out_scores.reshape(-1).double().cpu()
    if len(a) == 0 or len(b) == 0:
        raise ValueError("AUROC needs at least one in-distribution and one out-of-distribution score")
    if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
        raise ValueError("an OOD score is NaN or inf")
    x = torch.cat([a, b])
    values, inverse, counts = torch.unique(x, return_inverse=True, return_counts=True)
    # average rank of each distinct value (1-based): ties share the mean of the ranks they span
    ends = counts.cumsum(0).double()
    avg_rank = ends - (counts.double() - 1) / 2
    ranks = avg_rank[inverse]
    u = ranks[len(a):].sum() - len(b) * (len(b) + 1) / 2
    return float(u / (len(a) * len(b)))


def _check_draws(draws: torch.Tensor) -> None:
    if draws.dim() != 3 or draws.shape[0] < 1:
        raise ValueError(f"Monte-Carlo draws must be (S, N, C) with S >= 1, got {tuple(draws.shape)}")


def mutual_information(draws: torch.Tensor) -> torch.Tensor:
    """BALD (Houlsby et al. 2011): the mutual information between the label and the sampled embedding,
    I = H[E_s p_s] - E_s H[p_s] >= 0 (the entropy of the mean minus the mean entropy; >= 0 by the concavity of H),
    per image: (S, N, C) -> (N,). Zero when every draw gives the same probabilities (no epistemic spread), however
    flat they are; the clamp only removes rounding below zero.

    Example: two draws sure of different classes disagree (I = log 2); two equally unsure draws agree (I = 0).

    >>> import torch
    >>> from wviz.vit.metrics import mutual_information
    >>> disagree = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]]])    # (S, N, C) = (2, 1, 2)
    >>> agree = torch.tensor([[[0.5, 0.5]], [[0.5, 0.5]]])
    >>> round(float(mutual_information(disagree)[0]), 4), round(float(mutual_information(agree)[0]), 4)
    (0.6931, 0.0)
    """
    from wviz.vit.model import entropy

    _check_draws(draws)
    return (entropy(draws.mean(0)) - entropy(draws).mean(0)).clamp_min(0)


def class_spread(draws: torch.Tensor) -> torch.Tensor:
    """The spread of the predicted class across draws, as the variation ratio (Freeman 1965): 1 - (draws whose
    argmax is the most frequent class) / S, per image: (S, N, C) -> (N,), in [0, 1 - 1/S]; 0 when all draws agree.

    Example: three of four draws pick class 0, one picks class 1: a spread of 1 - 3/4.

    >>> import torch
    >>> from wviz.vit.metrics import class_spread
    >>> draws = torch.tensor([[[0.9, 0.1]], [[0.8, 0.2]], [[0.6, 0.4]], [[0.3, 0.7]]])   # (S, N, C) = (4, 1, 2)
    >>> float(class_spread(draws)[0])
    0.25
    """
    _check_draws(draws)
    S, _, C = draws.shape
    votes = F.one_hot(draws.argmax(-1), C).sum(0)  # (N, C): draws per predicted class
    return 1 - votes.max(-1).values.to(draws.dtype) / S


FISHER = "Fisher combination"
SCORES = ("max-softmax", "predictive entropy", "mutual information", "class spread", "covariance trace",
          "embedding covariance", "prototype distance", FISHER)
# The scores that need a stochastic model: the spread of its Monte-Carlo draws and its covariances (the prototype
# distance and the Fisher combination: one whose layer 0 has prototypes).
EPISTEMIC = ("mutual information", "class spread", "covariance trace", "embedding covariance", "prototype distance",
             FISHER)
# What the Fisher combination combines: what the classifier makes of the image, and how unlike the training patches
# its patches are (docs/TRAINING.md: each sees OOD sets the other misses)
COMBINED = ("predictive entropy", "prototype distance")


def ood_scores(probs: torch.Tensor, trace: torch.Tensor | None = None, draws: torch.Tensor | None = None,
               embedding: torch.Tensor | None = None, distance: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """OOD scores, larger = more likely out of distribution: 1 - max softmax probability and the predictive entropy
    of ``probs`` (N, C); with the stochastic model's Monte-Carlo ``draws`` (S, N, C), the mutual information and
    the class spread; with its ``trace`` (N,), the mean covariance trace of the last layer's tokens; with its
    ``embedding`` (N,), that of the embedding layer's (layer 0: eq. (5) of 004, or the patches' distance to the
    training patches' prototypes), which no attention has mixed yet; with its ``distance`` (N,), the prototype
    distance (wviz.vit.model.StochasticViT.prototype_distance: how many of the image's patches are unlike every
    training patch).

    Example: a flat prediction scores higher (more likely OOD) than a confident one; draws add the epistemic scores.

    >>> import torch
    >>> from wviz.vit.metrics import ood_scores
    >>> probs = torch.tensor([[0.98, 0.02], [0.5, 0.5]])
    >>> scores = ood_scores(probs)
    >>> list(scores)
    ['max-softmax', 'predictive entropy']
    >>> [round(x, 4) for x in scores["max-softmax"].tolist()]
    [0.02, 0.5]
    >>> [round(x, 4) for x in scores["predictive entropy"].tolist()]
    [0.098, 0.6931]
    >>> list(ood_scores(probs, draws=probs.expand(3, 2, 2)))
    ['max-softmax', 'predictive entropy', 'mutual information', 'class spread']
    """
    from wviz.vit.model import entropy

    out = {"max-softmax": 1 - probs.max(-1).values, "predictive entropy": entropy(probs)}
    if draws is not None:
        out["mutual information"] = mutual_information(draws)
        out["class spread"] = class_spread(draws)
    if trace is not None:
        out["covariance trace"] = trace
    if embedding is not None:
        out["embedding covariance"] = embedding
    if distance is not None:
        out["prototype distance"] = distance
    return out


def tail_p(scores: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """The right-tail p-value of each score among ``reference`` scores of in-distribution images: (1 + #{reference
    >= score}) / (1 + n), never 0; a score above every reference one gets 1 / (1 + n).

    >>> import torch
    >>> from wviz.vit.metrics import tail_p
    >>> tail_p(torch.tensor([0.0, 2.5, 9.0]), torch.tensor([1.0, 2.0, 3.0])).tolist()
    [1.0, 0.5, 0.25]
    """
    ref = torch.sort(reference.reshape(-1).to(scores)).values
    above = len(ref) - torch.searchsorted(ref, scores.contiguous(), right=False)
    return (1 + above).to(scores.dtype) / (1 + len(ref))


def fisher_combination(scores: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> torch.Tensor:
    """Fisher's method on the COMBINED scores: -sum_k log p_k, p_k the :func:`tail_p` of score k among the
    ``reference`` scores of in-distribution images no AUROC compares with (a validation split). Each p-value is
    uniform for an in-distribution image whatever the score's scale, so neither score outweighs the other by its
    units; an image unusual by either scores high.

    >>> import math, torch
    >>> from wviz.vit.metrics import fisher_combination
    >>> ref = {"predictive entropy": torch.tensor([0.1, 0.2, 0.3]),
    ...        "prototype distance": torch.tensor([1.0, 2.0, 3.0])}
    >>> image = {"predictive entropy": torch.tensor([0.25]), "prototype distance": torch.tensor([9.0])}
    >>> math.isclose(float(fisher_combination(image, ref)), -math.log(0.5) - math.log(0.25), rel_tol=1e-6)
    True
    """
    return -sum(tail_p(scores[k], reference[k]).log() for k in COMBINED)
