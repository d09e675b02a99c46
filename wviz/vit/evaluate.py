"""A model's whole evaluation on a test split (004's protocol at demo scale): predictive probabilities, accuracy,
NLL, ECE and reliability, the confusion matrix, OOD scores and AUROC against the OOD sets, error per corruption and
severity, and how well each score tells a corrupted image from its clean original (AUROC per corruption, score and
severity).

The stochastic model's prediction is its Monte-Carlo predictive (``samples`` draws, :func:`wviz.vit.model.
mc_predict`); the deterministic model's is its softmax. Everything runs in batches on the model's device.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from wviz.vit import data, metrics
from wviz.vit.model import mc_predict

__all__ = ["Predictions", "Report", "predict", "evaluate", "summary"]


@dataclass(frozen=True)
class Predictions:
    """probs (N, C) the predictive distribution; draws (S, N, C) its Monte-Carlo draws and trace (N,) the mean
    covariance trace of the last layer's tokens (both None for the deterministic model)."""

    probs: torch.Tensor
    trace: torch.Tensor | None
    draws: torch.Tensor | None = None

    def scores(self) -> dict[str, torch.Tensor]:
        return metrics.ood_scores(self.probs, self.trace, self.draws)


@dataclass(frozen=True)
class Report:
    """accuracy, nll, reliability (with .ece); ood[set][score] = (in-distribution scores, OOD scores, AUROC);
    corruption[kind] = (N_SEV,) error rates at severities 1..5; corruption_auroc[kind][score] = (N_SEV,) AUROC of
    the score for the corrupted test images against the clean ones (0.5: the score does not see the corruption);
    confusion (C, C) the counts of (true class, predicted class), :func:`wviz.vit.metrics.confusion`."""

    accuracy: float
    nll: float
    reliability: metrics.Reliability
    ood: dict
    corruption: dict
    corruption_auroc: dict
    confusion: torch.Tensor | None = None


@torch.no_grad()
def predict(model, images: torch.Tensor, samples: int = 16, batch: int = 256, seed: int = 0) -> Predictions:
    """Predictive probabilities, their Monte-Carlo draws and covariance traces of ``images`` (moved to the model's
    device in batches).
    ValueError when the model's output overflows (inf or NaN) rather than scoring NaN."""
    device = next(model.parameters()).device
    probs, draws, traces = [], [], []
    for i in range(0, len(images), batch):
        x = images[i:i + batch].to(device)
        mc = mc_predict(model, x, samples=samples, seed=seed + i)
        probs.append(mc.mean)
        out = model(x)
        if out.covariances is not None:
            draws.append(mc.probs)
            traces.append(out.covariances[-1].sum(-1).mean(-1))
    p = Predictions(torch.cat(probs), torch.cat(traces) if traces else None, torch.cat(draws, 1) if draws else None)
    if not (bool(torch.isfinite(p.probs).all()) and (p.trace is None or bool(torch.isfinite(p.trace).all()))):
        raise ValueError("the model's output is not a finite number (inf or NaN) on some images: its weights push "
                         "the computation beyond float range")
    return p


def evaluate(model, images: torch.Tensor, labels: torch.Tensor, ood_sets: dict[str, torch.Tensor] | None = None,
             samples: int = 16, corruptions: bool = True, progress=None) -> Report:
    """The full report. ``ood_sets``: name -> images (default: the OOD sets of :mod:`wviz.vit.data`, 360 each,
    shaped like ``images``); ``progress(fraction, text)`` is called before each pass over a set of images (the test
    split, each OOD set, each corruption and severity), with the fraction of those passes done, and with 1.0 at
    the end.

    Example: the bundled stochastic ViT on 20 test digits, with uniform noise as the OOD set (no corruptions, to be
    quick): it reads the digits, is well calibrated, and scores noise as out of distribution.

    >>> from pathlib import Path
    >>> import wviz
    >>> from wviz.vit.checkpoint import load_checkpoint
    >>> from wviz.vit.data import load_dataset, ood_set
    >>> from wviz.vit.evaluate import evaluate
    >>> model, _ = load_checkpoint(Path(wviz.__file__).parents[1] / "assets" / "vit_digits_stochastic.safetensors")
    >>> images, labels = load_dataset("digits", "test")
    >>> report = evaluate(model, images[:20], labels[:20], {"noise": ood_set("uniform noise", 20)}, samples=4,
    ...                   corruptions=False)
    >>> report.accuracy, report.reliability.ece < 0.05
    (1.0, True)
    >>> {score: round(auroc, 4) for score, (_, _, auroc) in report.ood["noise"].items()}
    {'max-softmax': 0.965, 'predictive entropy': 0.9675, 'mutual information': 0.945,
     'class spread': 0.7288, 'covariance trace': 0.2125}
    """
    report = progress or (lambda f, t: None)
    labels = labels.to(next(model.parameters()).device)
    if ood_sets is None:
        ood_sets = {name: data.ood_set(name, len(images), size=images.shape[-1]) for name in data.OOD_SETS}
    passes = 1 + len(ood_sets) + (len(data.CORRUPTIONS) * len(data.SEVERITIES) if corruptions else 0)
    done = 0

    def run(x: torch.Tensor, text: str) -> Predictions:
        nonlocal done
        report(done / passes, text)
        done += 1
        return predict(model, x, samples)

    p = run(images, "test split")
    rel = metrics.reliability(p.probs, labels)
    in_scores = p.scores()

    def aurocs(q: Predictions) -> dict:
        return {s: (in_scores[s], v, metrics.auroc(in_scores[s], v)) for s, v in q.scores().items()}

    ood = {name: aurocs(run(x, f"OOD: {name}")) for name, x in ood_sets.items()}
    errors, seen = {}, {}
    if corruptions:
        for kind in data.CORRUPTIONS:
            qs = [run(data.corrupt(images, kind, sev, seed=sev), f"corruption: {kind}, severity {sev}")
                  for sev in data.SEVERITIES]
            errors[kind] = torch.tensor([1 - metrics.accuracy(q.probs, labels) for q in qs])
            per_sev = [aurocs(q) for q in qs]
            seen[kind] = {s: torch.tensor([a[s][2] for a in per_sev]) for s in in_scores}
    report(1.0, "done")
    return Report(metrics.accuracy(p.probs, labels), metrics.nll(p.probs, labels), rel, ood, errors, seen,
                  metrics.confusion(p.probs, labels))


def summary(report: Report) -> dict:
    """The report's numbers as plain JSON (what a checkpoint's record keeps)."""
    return {
        "accuracy": round(report.accuracy, 4), "nll": round(report.nll, 4), "ece": round(report.reliability.ece, 4),
        "auroc": {name: {s: round(v[2], 4) for s, v in scores.items()} for name, scores in report.ood.items()},
        "corruption_error": {k: [round(float(e), 4) for e in v] for k, v in report.corruption.items()},
        "corruption_auroc": {k: {s: [round(float(a), 4) for a in v] for s, v in scores.items()}
                             for k, scores in report.corruption_auroc.items()},
    }
