"""A model's whole evaluation on a test split (004's protocol at demo scale): predictive probabilities, accuracy,
NLL, ECE and reliability, the confusion matrix, OOD scores and AUROC against the OOD sets, error per corruption and
severity, and how well each score tells a corrupted image from its clean original (AUROC per corruption, score and
severity).

The stochastic model's prediction is its Monte-Carlo predictive (``samples`` draws, :func:`wviz.vit.model.
mc_predict`); the deterministic model's is its softmax. Everything runs in batches on the model's device.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from wviz.vit import data, intervals, metrics
from wviz.vit.model import mc_predict
from wviz.vit.occlusion import occlusion_mi, occlusion_score

__all__ = ["Predictions", "Report", "predict", "layer_traces", "evaluate", "summary", "evaluate_seeds",
           "summary_seeds", "twin_intervals", "occlusion_aurocs"]


@dataclass(frozen=True)
class Predictions:
    """probs (N, C) the predictive distribution; draws (S, N, C) its Monte-Carlo draws, trace (N,) the mean
    covariance trace of the last layer's tokens and embedding (N,) that of layer 0's (all three None for the
    deterministic model); logits (S, N, C) the draws' logits (one draw for the deterministic model); distance (N,)
    the prototype distance (None without layer-0 prototypes)."""

    probs: torch.Tensor
    trace: torch.Tensor | None
    draws: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    embedding: torch.Tensor | None = None
    distance: torch.Tensor | None = None

    def scores(self) -> dict[str, torch.Tensor]:
        return metrics.ood_scores(self.probs, self.trace, self.draws, self.embedding, self.distance)


@dataclass(frozen=True)
class Report:
    """accuracy, nll, reliability (with .ece); ood[set][score] = (in-distribution scores, OOD scores, AUROC);
    corruption[kind] = (N_SEV,) error rates at severities 1..5; corruption_auroc[kind][score] = (N_SEV,) AUROC of
    the score for the corrupted test images against the clean ones (0.5: the score does not see the corruption);
    confusion (C, C) the counts of (true class, predicted class), :func:`wviz.vit.metrics.confusion`; probs (N, C)
    the predictive on the test split."""

    accuracy: float
    nll: float
    reliability: metrics.Reliability
    ood: dict
    corruption: dict
    corruption_auroc: dict
    confusion: torch.Tensor | None = None
    probs: torch.Tensor | None = None

    def test_scores(self) -> dict[str, torch.Tensor]:
        """Each score of the test split's images, what every OOD AUROC compares with (the report of at least one
        OOD set)."""
        return {score: v[0] for score, v in next(iter(self.ood.values())).items()}


@torch.no_grad()
def predict(model, images: torch.Tensor, samples: int = 16, batch: int = 256, seed: int = 0) -> Predictions:
    """Predictive probabilities, their Monte-Carlo draws and covariance traces of ``images`` (moved to the model's
    device in batches).
    ValueError when the model's output overflows (inf or NaN) rather than scoring NaN."""
    device = next(model.parameters()).device
    prototypes = model.config.has_prototypes
    probs, draws, traces, embedding, logits, distance = [], [], [], [], [], []
    for i in range(0, len(images), batch):
        x = images[i:i + batch].to(device)
        mc = mc_predict(model, x, samples=samples, seed=seed + i)
        probs.append(mc.mean)
        logits.append(mc.logits[:1] if mc.logits.stride(0) == 0 else mc.logits)  # the twin's S draws are one
        out = model(x)
        if out.covariances is not None:
            draws.append(mc.probs)
            traces.append(out.covariances[-1].sum(-1).mean(-1))
            embedding.append(out.covariances[0].sum(-1).mean(-1))
        if prototypes:
            distance.append(model.prototype_distance(x))
    p = Predictions(torch.cat(probs), torch.cat(traces) if traces else None, torch.cat(draws, 1) if draws else None,
                    torch.cat(logits, 1), torch.cat(embedding) if embedding else None,
                    torch.cat(distance) if distance else None)
    if not (bool(torch.isfinite(p.probs).all()) and (p.trace is None or bool(torch.isfinite(p.trace).all()))):
        raise ValueError("the model's output is not a finite number (inf or NaN) on some images: its weights push "
                         "the computation beyond float range")
    return p


@torch.no_grad()
def layer_traces(model, images: torch.Tensor, rule: str | None = None, batch: int = 256) -> torch.Tensor | None:
    """(L + 1, N): per layer l = 0..depth, the mean over each image's tokens of tr(Sigma) (the pass on the means),
    under the covariance ``rule`` (default: the model's own); None for the deterministic model."""
    device = next(model.parameters()).device
    parts = []
    for i in range(0, len(images), batch):
        out = model(images[i:i + batch].to(device), rule=rule)
        if out.covariances is None:
            return None
        parts.append(torch.stack([c.sum(-1).mean(-1) for c in out.covariances]))
    return torch.cat(parts, 1)


def evaluate(model, images: torch.Tensor, labels: torch.Tensor, ood_sets: dict[str, torch.Tensor],
             samples: int = 16, corruptions: tuple[str, ...] = data.CORRUPTIONS, progress=None,
             seed: int = 0, reference: torch.Tensor | None = None) -> Report:
    """The full report. ``ood_sets``: name -> images (a shipped dataset's: wviz.vit.data.shipped_ood_sets);
    ``corruptions``: the kinds of :func:`wviz.vit.data.corrupt` measured at every severity (none: ``()``);
    ``progress(fraction, text)`` is called before each pass over a set of images (the test split, each OOD set,
    each corruption and severity), with the fraction of those passes done, and with 1.0 at the end; ``seed`` seeds
    the Monte-Carlo draws; ``reference``: in-distribution images that are not the test split's (a validation split),
    whose scores give a model with layer-0 prototypes the Fisher combination (wviz.vit.metrics.fisher_combination).

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
    ...                   corruptions=())
    >>> report.accuracy, report.reliability.ece < 0.05
    (1.0, True)
    >>> {score: round(auroc, 4) for score, (_, _, auroc) in report.ood["noise"].items()}
    {'max-softmax': 1.0, 'predictive entropy': 1.0, 'mutual information': 1.0,
     'class spread': 0.975, 'covariance trace': 1.0, 'embedding covariance': 1.0, 'prototype distance': 1.0}
    """
    report = progress or (lambda f, t: None)
    labels = labels.to(next(model.parameters()).device)
    fisher = reference is not None and model.config.has_prototypes
    passes = fisher + 1 + len(ood_sets) + len(corruptions) * len(data.SEVERITIES)
    done = 0

    def run(x: torch.Tensor, text: str) -> Predictions:
        nonlocal done
        report(done / passes, text)
        done += 1
        return predict(model, x, samples, seed=seed)

    ref = run(reference, "reference split").scores() if fisher else None

    def scored(q: Predictions) -> dict[str, torch.Tensor]:
        s = q.scores()
        return s if ref is None else {**s, metrics.FISHER: metrics.fisher_combination(s, ref)}

    p = run(images, "test split")
    rel = metrics.reliability(p.probs, labels)
    in_scores = scored(p)

    def aurocs(q: Predictions) -> dict:
        return {s: (in_scores[s], v, metrics.auroc(in_scores[s], v)) for s, v in scored(q).items()}

    ood = {name: aurocs(run(x, f"OOD: {name}")) for name, x in ood_sets.items()}
    errors, seen = {}, {}
    for kind in corruptions:
        qs = [run(data.corrupt(images, kind, sev, seed=sev), f"corruption: {kind}, severity {sev}")
              for sev in data.SEVERITIES]
        errors[kind] = torch.tensor([1 - metrics.accuracy(q.probs, labels) for q in qs])
        per_sev = [aurocs(q) for q in qs]
        seen[kind] = {s: torch.tensor([a[s][2] for a in per_sev]) for s in in_scores}
    report(1.0, "done")
    return Report(metrics.accuracy(p.probs, labels), metrics.nll(p.probs, labels), rel, ood, errors, seen,
                  metrics.confusion(p.probs, labels), p.probs.cpu())


def covariate_shift(model, test_scores: dict[str, torch.Tensor], shifted: torch.Tensor,
                    shifted_labels: torch.Tensor, samples: int = 16, seed: int = 0) -> dict:
    """How a model meets pictures of its classes drawn by other writers (``shifted``, not OOD): its accuracy on
    them, and for each score the AUROC of telling them from the test split (its ``test_scores``, Report.test_scores:
    above 0.5, its uncertainty rises on them), as plain JSON."""
    device = next(model.parameters()).device
    q = predict(model, shifted.to(device), samples, seed=seed)
    return {"accuracy": round(metrics.accuracy(q.probs, shifted_labels.to(device)), 4),
            "auroc": {s: round(metrics.auroc(test_scores[s], v), 4) for s, v in q.scores().items()}}


def summary(report: Report) -> dict:
    """The report's numbers as plain JSON (what a checkpoint's record keeps)."""
    return {
        "accuracy": round(report.accuracy, 4), "nll": round(report.nll, 4), "ece": round(report.reliability.ece, 4),
        "auroc": {name: {s: round(v[2], 4) for s, v in scores.items()} for name, scores in report.ood.items()},
        "corruption_error": {k: [round(float(e), 4) for e in v] for k, v in report.corruption.items()},
        "corruption_auroc": {k: {s: [round(float(a), 4) for a in v] for s, v in scores.items()}
                             for k, scores in report.corruption_auroc.items()},
    }


def evaluate_seeds(model, images: torch.Tensor, labels: torch.Tensor, ood_sets: dict[str, torch.Tensor],
                   samples: int = 16, seeds: int = 1, corruptions: tuple[str, ...] = data.CORRUPTIONS,
                   reference: torch.Tensor | None = None) -> list[Report]:
    """:func:`evaluate` at Monte-Carlo seeds 0..seeds-1 (one report for the deterministic model, whose draws do not
    depend on the seed): a number that moves with the draws is reported as its mean over them, never one draw."""
    stochastic = model.config.kind == "stochastic"
    return [evaluate(model, images, labels, ood_sets, samples, corruptions, seed=1000 * k, reference=reference)
            for k in range(seeds if stochastic else 1)]


def _mean(values: list) -> float:
    return round(sum(values) / len(values), 4)


def summary_seeds(reports: list[Report]) -> dict:
    """The :func:`summary` of each report (one per Monte-Carlo seed), averaged entry by entry, with the per-seed
    accuracy, NLL, ECE and AUROC under "mc" (what the mean +- sd of a table is computed from)."""
    per = [summary(r) for r in reports]
    first = per[0]
    out: dict[str, Any] = {k: _mean([p[k] for p in per]) for k in ("accuracy", "nll", "ece")}
    out["auroc"] = {o: {s: _mean([p["auroc"][o][s] for p in per]) for s in sc} for o, sc in first["auroc"].items()}
    out["corruption_error"] = {k: [_mean([p["corruption_error"][k][i] for p in per]) for i in range(len(v))]
                               for k, v in first["corruption_error"].items()}
    out["corruption_auroc"] = {k: {s: [_mean([p["corruption_auroc"][k][s][i] for p in per]) for i in range(len(a))]
                                   for s, a in sc.items()} for k, sc in first["corruption_auroc"].items()}
    out["mc"] = {"seeds": len(per), **{k: [p[k] for p in per] for k in ("accuracy", "nll", "ece")},
                 "auroc": {o: {s: [p["auroc"][o][s] for p in per] for s in sc} for o, sc in first["auroc"].items()}}
    return out


def _best(report: Report, ood: str) -> str:
    return max(report.ood[ood], key=lambda s: report.ood[ood][s][2])


def twin_intervals(reports: list[Report], twin: Report, labels: torch.Tensor) -> dict:
    """The paired bootstrap intervals of the model (its reports at several Monte-Carlo seeds) against its twin, as
    [estimate, low, high]: ECE - the twin's ECE, and per OOD set the AUROC of the model's best score there (by its
    mean over the seeds) - the AUROC of the twin's best (wviz.vit.intervals)."""
    ece = intervals.ece_difference([r.probs for r in reports], [twin.probs], labels.cpu()).to_list()
    out: dict[str, Any] = {"ece": ece, "best_auroc": {}, "best_score": {}}
    for ood in reports[0].ood:
        mine = max(reports[0].ood[ood], key=lambda s: sum(r.ood[ood][s][2] for r in reports))
        pairs = [(r.ood[ood][mine][0], r.ood[ood][mine][1]) for r in reports]
        theirs = twin.ood[ood][_best(twin, ood)]
        out["best_auroc"][ood] = intervals.auroc_difference(pairs, [(theirs[0], theirs[1])]).to_list()
        out["best_score"][ood] = mine
    return out


def occlusion_aurocs(model, images: torch.Tensor, ood_sets: dict, n: int, samples: int, seeds: int) -> dict:
    """Per OOD set, the AUROC of the MI-occlusion score (wviz.vit.occlusion) of its first ``n`` images against the
    first ``n`` test images, at each Monte-Carlo seed (lists)."""
    out: dict[str, list[float]] = {name: [] for name in ood_sets}
    for k in range(seeds):
        clean = occlusion_score(occlusion_mi(model, images[:n], samples, seed=1000 * k))
        for name, x in ood_sets.items():
            out[name].append(round(metrics.auroc(clean, occlusion_score(occlusion_mi(model, x[:n], samples,
                                                                                     seed=1000 * k))), 4))
    return out
