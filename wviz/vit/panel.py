"""The Uncertainty inspector's dataset panel: each model shown evaluated on its test split (wviz.vit.demo.TestSplit)
by 004's protocol at demo scale (:func:`wviz.vit.evaluate.evaluate`: accuracy, NLL, ECE and reliability, the
confusion matrix, OOD scores and AUROC against the split's OOD sets, error and AUROC under corruption), computed
once per (weights, samples, corruptions, split, device) for every server process (wviz.disk_cache).

A bundled checkpoint's record holds this same evaluation of its shipped dataset, run on those weights by the
training CLI: its corruption curves are read from there. An upload's record is only a claim: everything is measured.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from wviz import disk_cache
from wviz.vit import calibration, data, metrics
from wviz.vit import evaluate as vit_evaluate  # looked up at call time: tests spy on evaluate
from wviz.vit.demo import Loaded, Models, TestSplit, weights_digest
from wviz.vit.maps import trace_aurocs
from wviz.vit.occlusion import occlusion_mi, occlusion_score

__all__ = ["MAX_PANEL_SAMPLES", "PANEL_VERSION", "PanelJob", "panel_jobs", "evaluate_panel", "ood_scores",
           "corruption_curves", "corruption_aurocs", "Calibration", "calibrate_panel", "CONFORMAL_ALPHA",
           "CONFORMAL_SEVERITY", "MAPS_VERSION", "map_aurocs", "seeds_said", "has_validation"]

# S x 360 test images x (5 sets + 18 corrupted for an upload) + the calibration panel: its budget
MAX_PANEL_SAMPLES = 32
# The panel's version in the shared disk cache: raise it when evaluate's numbers change (3: the confusion matrix;
# 4: the held-out letters, the test predictive; 5: the embedding covariance score; 6: the prototype distance and
# the Fisher combination).
PANEL_VERSION = 6


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


def panel_jobs(models: Models, split: TestSplit) -> tuple[PanelJob, ...]:
    """A job per model shown, on ``split``."""
    jobs = []
    for m in models.by_name.values():
        asked = m.record.get("eval_samples", 16)
        from_record = m.bundled and bool(split.dataset) and "corruption_error" in m.record.get("metrics", {})
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
              "split": split.digest, "device": str(next(model.parameters()).device),
              "validation": job.loaded.record.get("val_fraction") if has_validation(job.loaded, split) else None}

    def compute() -> vit_evaluate.Report:
        held_out = _validation(job.loaded, split)   # the Fisher combination's reference
        return vit_evaluate.evaluate(model, split.images, split.labels, ood_sets=split.ood_images,
                                     samples=job.samples, corruptions=() if job.from_record else split.corruptions,
                                     progress=step, reference=None if held_out is None else held_out[0])

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
    out: dict[str, dict | None] = {}
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


MAPS_VERSION = 1


def map_aurocs(model, split: TestSplit) -> dict:
    """rule -> {OOD set: (L + 1,) AUROC of the tokens' mean tr(Sigma) per layer} of ``model`` on ``split`` and its
    OOD sets (wviz.vit.maps.trace_aurocs; {} for a deterministic model), computed once per (weights, split, device)
    for every server process (wviz.disk_cache): a pass on the means per set and rule, 2 s on the digits' 360 test
    images, half a minute on MNIST's 1,000."""
    params = {"weights": weights_digest(model), "split": split.digest, "device": str(next(model.parameters()).device)}
    return disk_cache.cached("vit_maps", params, MAPS_VERSION,
                             lambda: trace_aurocs(model, split.images, split.ood_images))


# ---- calibration, selective classification, conformal sets, and what the maps track ----------------------------

# 2: the occlusion at the panel's S (at most OCCLUSION_SAMPLES); 3: the risk by the embedding covariance; 4: a
# record of one Monte-Carlo seed says so; 5: the risk by the prototype distance and the Fisher combination
CALIBRATION_VERSION = 5
CONFORMAL_ALPHA = 0.1          # 90 % prediction sets
CONFORMAL_SEVERITY = 3         # the corrupted test images the sets are also shown on
OCCLUSION_IMAGES = 60          # MI-occlusion AUROC here: the first images of each set (a bundled record may hold it)
OCCLUSION_SAMPLES = 16


@dataclass(frozen=True)
class Calibration:
    """The calibration panel of one model on its test split: the temperature tau fitted on ``source`` (a
    validation split carved from the training images, or the first half of the test split), the reliability of
    the evaluated test images before and after it with bootstrap 95 % bands per bin, risk-coverage per OOD score,
    split-conformal 90 % sets on clean and corrupted test images, and the MI-occlusion score's AUROC per OOD set
    (None: the model has none) with where it comes from."""

    tau: float
    source: str
    before: metrics.Reliability
    after: metrics.Reliability
    bands: dict
    risk: dict
    conformal: calibration.ConformalSets
    occlusion: dict | None
    occlusion_note: str


def has_validation(loaded: Loaded, split: TestSplit) -> bool:
    """Whether the model's record says it held a validation split out of the training images of the split's
    shipped dataset (not an upload of another dataset, nor one trained without)."""
    return bool(split.dataset and loaded.record.get("data") == split.dataset and loaded.record.get("val_fraction"))


def _validation(loaded: Loaded, split: TestSplit) -> tuple[torch.Tensor, torch.Tensor] | None:
    """That validation split (images, labels), or None."""
    if not has_validation(loaded, split):
        return None
    return data.validation_split(split.dataset, loaded.record["val_fraction"])


def _calibration_split(job: PanelJob) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, str]:
    """(calibration images, labels, evaluated images, labels, what the calibration split is)."""
    split, held_out = job.split, _validation(job.loaded, job.split)
    if held_out is not None:
        xv, yv = held_out
        return xv, yv, split.images, split.labels, f"the validation split ({len(yv)} training images held out)"
    half = len(split.labels) // 2
    return (split.images[:half], split.labels[:half], split.images[half:], split.labels[half:],
            f"the first half of the test split ({half} images; the panel then shows the other half)")


def seeds_said(seeds: int) -> str:
    """What a recorded number over ``seeds`` Monte-Carlo seeds is, in words."""
    return f"mean of {seeds} Monte-Carlo seeds" if seeds > 1 else "one Monte-Carlo seed"


def _occlusion(job: PanelJob, images: torch.Tensor, ood: dict) -> tuple[dict | None, str]:
    recorded = job.loaded.record.get("metrics", {}).get("occlusion_auroc")
    if job.loaded.model.config.kind != "stochastic":
        return None, "a deterministic model has no Monte-Carlo draws: its mutual information is 0"
    if job.loaded.bundled and job.split.dataset and recorded:
        seeds = len(next(iter(recorded.values())))
        return ({k: sum(v) / len(v) for k, v in recorded.items()},
                f"from the checkpoint's record: S = {job.loaded.record.get('eval_samples')}, {seeds_said(seeds)}")
    # the panel's S, at most OCCLUSION_SAMPLES: P + 1 passes per image, the panel's costliest part for many patches
    n, model, s = OCCLUSION_IMAGES, job.loaded.model, min(job.samples, OCCLUSION_SAMPLES)
    clean = occlusion_score(occlusion_mi(model, images[:n], s))
    out = {k: metrics.auroc(clean, occlusion_score(occlusion_mi(model, x[:n], s))) for k, x in ood.items()}
    return out, f"measured here on the first {n} images of each set at S = {s}"


def _calibrate(job: PanelJob) -> Calibration:
    model, samples = job.loaded.model, job.samples
    xc, yc, xe, ye, source = _calibration_split(job)
    cal_pred = vit_evaluate.predict(model, xc, samples)
    pred = vit_evaluate.predict(model, xe, samples)
    tau = calibration.fit_temperature(cal_pred.logits, yc)
    after = calibration.tempered(pred.logits, tau).float()
    correct = pred.probs.argmax(-1).cpu() == ye.cpu()
    scores = pred.scores()
    if model.config.has_prototypes:   # the calibration split is the reference: no image of it is evaluated
        scores[metrics.FISHER] = metrics.fisher_combination(scores, cal_pred.scores())
    risk = {s: calibration.risk_coverage(v, correct) for s, v in scores.items()}
    corrupted = {f"{k}, severity {CONFORMAL_SEVERITY}": (vit_evaluate.predict(
        model, data.corrupt(xe, k, CONFORMAL_SEVERITY, seed=CONFORMAL_SEVERITY), samples).probs, ye)
        for k in job.split.corruptions}
    sets = calibration.conformal_sets((cal_pred.probs, yc), {"clean": (pred.probs, ye), **corrupted},
                                      CONFORMAL_ALPHA)
    occ, note = _occlusion(job, job.split.images, job.split.ood_images)
    return Calibration(tau, source, metrics.reliability(pred.probs, ye), metrics.reliability(after, ye),
                       {"before": calibration.reliability_bands(pred.probs, ye),
                        "after": calibration.reliability_bands(after, ye)},
                       risk, sets, occ, note)


def calibrate_panel(job: PanelJob, progress=None) -> Calibration:
    """:class:`Calibration` of the job's model, computed once per (weights, S, split, device) for every server
    process (wviz.disk_cache); ``progress(done, total)`` is called once at the start and once at the end."""
    if progress is not None:
        progress(0, 1)
    params = {"weights": weights_digest(job.loaded.model), "samples": job.samples, "split": job.split.digest,
              "device": str(next(job.loaded.model.parameters()).device)}
    out = disk_cache.cached("vit_calibration", params, CALIBRATION_VERSION, lambda: _calibrate(job),
                            types=(Calibration, metrics.Reliability, calibration.RiskCoverage,
                                   calibration.ConformalSets))
    if progress is not None:
        progress(1, 1)
    return out
