"""The Uncertainty inspector's dataset panel: each model shown evaluated on its test split (wviz.vit.demo.TestSplit)
by 004's protocol at demo scale (:func:`wviz.vit.evaluate.evaluate`: accuracy, NLL, ECE and reliability, the
confusion matrix, OOD scores and AUROC against the split's OOD sets, error and AUROC under corruption), computed
once per (weights, samples, corruptions, split, device) for every server process (wviz.disk_cache).

A bundled checkpoint's record holds this same evaluation of the digits, run at the end of training: its corruption
curves are read from there. An upload's record is only a claim: everything is measured.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from wviz import disk_cache
from wviz.vit import data, metrics
from wviz.vit import evaluate as vit_evaluate  # looked up at call time: tests spy on evaluate
from wviz.vit.demo import Loaded, Models, TestSplit, digits_split, weights_digest

__all__ = ["MAX_PANEL_SAMPLES", "PANEL_VERSION", "PanelJob", "panel_jobs", "evaluate_panel", "ood_scores",
           "corruption_curves", "corruption_aurocs"]

MAX_PANEL_SAMPLES = 64  # S x 360 test digits x 18 sets of images per model: the dataset panel's budget
# The panel's version in the shared disk cache: raise it when evaluate's numbers change (3: the confusion matrix).
PANEL_VERSION = 3


@dataclass(frozen=True)
class PanelJob:
    """One model's evaluation for the panel on ``split``: S Monte-Carlo samples per image (``asked`` by its record,
    capped at MAX_PANEL_SAMPLES), and whether its corruption curves are measured here or read from its record."""

    loaded: Loaded
    samples: int
    asked: int
    from_record: bool
    split: TestSplit

    @property
    def name(self) -> str:
        return self.loaded.name

    @property
    def capped(self) -> bool:
        return self.asked > self.samples

    @property
    def cache_key(self) -> tuple:
        """What the evaluation depends on: the weights, S, whether the corruptions are run, the test split."""
        return self.loaded.weights_id, self.samples, not self.from_record, self.split.digest


def panel_jobs(models: Models, split: TestSplit | None = None) -> tuple[PanelJob, ...]:
    """A job per model shown, on ``split`` (default: the digits)."""
    split = digits_split() if split is None else split
    jobs = []
    for m in models.by_name.values():
        asked = m.record.get("eval_samples", 16)
        from_record = m.bundled and split.digits and "corruption_error" in m.record.get("metrics", {})
        jobs.append(PanelJob(m, min(asked, MAX_PANEL_SAMPLES), asked, from_record, split))
    return tuple(jobs)


def evaluate_panel(job: PanelJob, progress=None) -> vit_evaluate.Report:
    """The model's report on its test split and the OOD sets (and the corruptions unless read from its record);
    ``progress(done, total)`` as the passes over the sets of images start.

    Seconds per pass: computed once per (weights, S, corruptions, split, device) for every server process
    (wviz.disk_cache); a report loaded from there reports no progress."""
    split, model = job.split, job.loaded.model
    step = None if progress is None else (lambda fraction, text: progress(fraction, 1.0))
    params = {"weights": weights_digest(model), "samples": job.samples, "corruptions": not job.from_record,
              "split": split.digest, "device": str(next(model.parameters()).device)}

    def compute() -> vit_evaluate.Report:
        ood = None if split.digits else data.ood_sets(split.images, split.labels)
        return vit_evaluate.evaluate(model, split.images, split.labels, ood_sets=ood, samples=job.samples,
                                     corruptions=not job.from_record, progress=step)

    return disk_cache.cached("vit_panel", params, PANEL_VERSION, compute,
                             types=(vit_evaluate.Report, metrics.Reliability))


def ood_scores(reports: dict[str, vit_evaluate.Report], ood_name: str, score: str) -> dict:
    """model name -> (test-image scores, OOD scores, AUROC) of one score on one OOD set, for the models that have
    that score."""
    return {n: r.ood[ood_name][score] for n, r in reports.items() if score in r.ood.get(ood_name, {})}


def corruption_curves(jobs: tuple[PanelJob, ...], reports: dict[str, vit_evaluate.Report]) -> dict:
    """model name -> {corruption: (5,) test error at severities 1..5}: from the record or measured here."""
    return {j.name: ({k: torch.tensor(v) for k, v in j.loaded.record["metrics"]["corruption_error"].items()}
                     if j.from_record else reports[j.name].corruption) for j in jobs}


def corruption_aurocs(jobs: tuple[PanelJob, ...], reports: dict[str, vit_evaluate.Report], score: str) -> dict:
    """model name -> {corruption: (5,) AUROC of ``score`` for corrupted against clean test images}, from the record
    or measured here, for the models that have the score; a record without these AUROCs (a checkpoint from before
    they were measured) gives None."""
    out = {}
    for j in jobs:
        if j.from_record:
            recorded = j.loaded.record["metrics"].get("corruption_auroc")
            if recorded is None:
                out[j.name] = None
            elif all(score in per for per in recorded.values()):
                out[j.name] = {k: torch.tensor(per[score]) for k, per in recorded.items()}
        elif all(score in per for per in reports[j.name].corruption_auroc.values()):
            out[j.name] = {k: per[score] for k, per in reports[j.name].corruption_auroc.items()}
    return out
