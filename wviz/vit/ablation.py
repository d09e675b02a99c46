"""The ablation of docs/TRAINING.md: each training recipe over several seeds, measured at S Monte-Carlo draws over
several Monte-Carlo seeds, as mean and spread, with paired bootstrap intervals against the deterministic twin.

    python -m wviz.vit.ablation --seeds 0 1 2 --jobs 2 --out-dir runs/ablation36 --epochs 40 --val-fraction 0.1

runs ``python -m wviz.vit.train`` once per (recipe, seed) (every recipe with the same augmentation, the twin
included), ``--jobs`` at a time (one torch thread each), then measures each checkpoint once
(``--samples`` draws at Monte-Carlo seeds 0..``--mc-seeds``-1: per image every OOD score, the predictive, the
temperature fitted on the validation split, and tr(Sigma) per layer under both covariance rules), skips whatever
already exists, and prints the tables from those measurements:

* choosing: on the validation split (carved from the training images) against the shipped OOD sets (the digits'
  three, or MNIST's near and far ones with ``--data mnist``, which goes to every training run);
* reporting: on the test split, with the bootstrap 95 % interval of each recipe's difference to the twin (ECE
  before and after temperature scaling, the errors among the 90 % of test images its best score is surest of, the
  best score's AUROC on each OOD set);
* per layer: the AUROC of the tokens' mean tr(Sigma) at every layer, under the recipe's rule and the other one.

A cell "m +- a (+- b)" is the mean over training seeds and Monte-Carlo seeds, a the standard deviation over the
training seeds (n - 1) of each seed's Monte-Carlo mean, b the mean over training seeds of the standard deviation
over the Monte-Carlo seeds. The held-out letters (wviz.vit.data.HELD_OUT) are never measured by the tables above:
once a recipe is chosen, ``--held-out`` measures them on the recipes named (the chosen one and the twin) and prints
that table alone (:func:`measure_held_out`); ``--occlusion N`` measures the AUROC of the MI-occlusion score on the
first N images of each set (:func:`measure_occlusion`).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from wviz.vit import data
from wviz.vit.calibration import fit_temperature, tempered
from wviz.vit.checkpoint import load_checkpoint
from wviz.vit.evaluate import layer_traces, predict
from wviz.vit.intervals import (auroc_difference, ece_difference, mean_sd, selective_risk_difference,
                                weighted_selective_risk)
from wviz.vit.metrics import COMBINED, FISHER, SCORES, accuracy, auroc, ece, fisher_combination, nll
from wviz.vit.model import ViTConfig
from wviz.vit.occlusion import occlusion_mi, occlusion_score

__all__ = ["RECIPES", "TWIN", "run_all", "measure", "tables", "measure_held_out", "held_out_table",
           "measure_occlusion", "occlusion_table", "main"]

TWIN = "deterministic twin"
COVERAGE = 0.9   # selective classification: the share of test images kept (issue 46's risk-coverage goal)
_BASE = ["--lam", "0.1", "--kl", "0.001"]  # the first bundled recipe (docs/TRAINING.md), 10 epochs of pre-training


KAPPA = "0.02"  # layer 0 'prototypes': the mean extra variance per dimension of a training patch


def _recipe(rule: str, term: str, layer0: str, regularised: bool = True) -> tuple[str, list[str]]:
    """The first bundled recipe (docs/TRAINING.md, "The first ablation") with a covariance rule, a pre-training term
    ('none': no pre-training) and a layer-0 variance; not ``regularised``: without its fine-tuning W2 term and KL."""
    pretrain = ["--pretrain-epochs", "0"] if term == "none" else ["--pretrain-epochs", "10", "--pretrain-term", term]
    extra = ["--prototypes", "64", "--kappa", KAPPA] if layer0 == "prototypes" else []
    return (f"rule {rule}, pre-training {term}, layer 0 {layer0}" + ("" if regularised else ", lam 0, kl 0"),
            [*(_BASE if regularised else ["--lam", "0", "--kl", "0"]), "--rule", rule, *pretrain, "--layer0", layer0,
             *extra])


# name -> options of wviz.vit.train beyond the shared ones (data, epochs, seed, threads, out). The likelihood
# pre-training term is in one cell only: at seed 0 every form of it tried cost the accuracy (docs/TRAINING.md). No
# pre-training, one cell: on MNIST the pre-trained recipes ranked far OOD sets below the twin, which has none. The
# last two: the mixture rule without pre-training, with and without the fine-tuning regularisers (the twin has none).
RECIPES = {
    TWIN: ["--kind", "deterministic", "--lam", "0"],
    **dict(_recipe(rule, "w2", layer0) for rule in ("004", "mixture") for layer0 in ("eq5", "prototypes")),
    **dict([_recipe("mixture", "likelihood", "eq5"), _recipe("004", "none", "prototypes"),
            _recipe("mixture", "none", "prototypes"), _recipe("mixture", "none", "prototypes", regularised=False)]),
}


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name).strip("_")


def _path(out_dir: Path, recipe: str, seed: int) -> Path:
    return out_dir / f"{_slug(recipe)}_seed{seed}.safetensors"


def _run(argv: list[str], log: Path) -> None:
    with open(log, "a") as f:
        subprocess.run([sys.executable, *argv], stdout=f, stderr=subprocess.STDOUT, check=True)


def _job(options: list[str], ckpt: Path, extra: list[str], samples: int, mc_seeds: int) -> None:
    """Train (unless the checkpoint exists), then measure (unless measured)."""
    log = ckpt.with_suffix(".log")
    if not ckpt.exists():
        _run(["-m", "wviz.vit.train", *options, "--threads", "1", "--no-progress", "--no-eval", *extra,
              "--out", str(ckpt)], log)
    if not ckpt.with_suffix(".eval.pt").exists():
        _run(["-m", "wviz.vit.ablation", "--measure", str(ckpt), "--samples", str(samples),
              "--mc-seeds", str(mc_seeds)], log)


def run_all(recipes: dict, seeds: list[int], out_dir: Path, jobs: int, extra: list[str], samples: int = 128,
            mc_seeds: int = 4) -> dict:
    """Train and measure what is missing; returns {recipe: [measurement per seed]} (:func:`measure`)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        for f in [pool.submit(_job, recipes[r], _path(out_dir, r, s), [*extra, "--seed", str(s)], samples, mc_seeds)
                  for r in recipes for s in seeds]:
            f.result()
    return {r: [_measured(_path(out_dir, r, s)) for s in seeds] for r in recipes}


def _measured(ckpt: Path) -> dict:
    """The checkpoint's measurement, with the scores that came after it (the latest last)."""
    record = torch.load(ckpt.with_suffix(".eval.pt"), weights_only=True)
    return _with_fisher(_with_distance(_with_embedding(record), ckpt))


def _with_embedding(record: dict) -> dict:
    """A measurement made before the embedding covariance score: its per-image values are the layer-0 traces it
    stored (the same mean tr(Sigma) of layer 0's tokens, which neither the rule nor the draws change)."""
    if record["layers"] is not None:
        layer0 = {split: traces[0] for split, traces in record["layers"][record["config"]["rule"]].items()}
        for run in record["runs"]:
            for split, scores in run["scores"].items():
                scores.setdefault("embedding covariance", layer0[split])
    return record


@torch.no_grad()
def _with_distance(record: dict, ckpt: Path) -> dict:
    """A measurement made before the prototype distance score, of a model with layer-0 prototypes: its per-image
    values computed here from the checkpoint (they depend on neither the draws nor the rule)."""
    if "prototype distance" in record["runs"][0]["scores"]["test"] or not ViTConfig.from_dict(
            record["config"]).has_prototypes:
        return record
    model, checkpoint_record = load_checkpoint(ckpt)
    distance = {n: model.prototype_distance(x) for n, x in _sets(checkpoint_record)["images"].items()}
    for run in record["runs"]:
        for split, scores in run["scores"].items():
            scores["prototype distance"] = distance[split]
    return record


def _with_fisher(record: dict) -> dict:
    """Each run's Fisher combination on every set, against its own validation split's scores (wviz.vit.metrics
    .fisher_combination): on the validation split itself each image is ranked among images that include it, so its
    p-values are still uniform and the choosing table reads it as the test table does."""
    for run in record["runs"]:
        reference = run["scores"]["validation"]
        if all(k in reference for k in COMBINED):
            for scores in run["scores"].values():
                scores[FISHER] = fisher_combination(scores, reference)
    return record


def _dataset(record: dict) -> str:
    return record.get("data", "digits")


def _sets(record: dict) -> dict:
    """The images a checkpoint is measured on: its validation split (the record's fraction of the training
    split), the test split and the shipped OOD sets of its data (as many images as the test split)."""
    xv, yv = data.validation_split(_dataset(record), record.get("val_fraction", 0.0))
    xt, yt = data.load_dataset(_dataset(record), "test")
    return {"labels": {"validation": yv, "test": yt},
            "images": {"validation": xv, "test": xt,
                       **data.shipped_ood_sets(_dataset(record), len(xt), held_out=False)}}


@torch.no_grad()
def measure(path: Path, samples: int = 128, mc_seeds: int = 4) -> dict:
    """One checkpoint's measurement, saved beside it as .eval.pt: per Monte-Carlo seed k (draws seeded 1000 k, as
    wviz.vit.evaluate.evaluate_seeds), per set every OOD score per image, the predictive on the validation and
    test splits, the temperature fitted on the validation split and the test predictive under it; per covariance
    rule, per set, the tokens' mean tr(Sigma) per layer (the pass on the means: no seed); and S (``samples``)."""
    model, record = load_checkpoint(path)
    d = _sets(record)
    stochastic = model.config.kind == "stochastic"
    runs = []
    for k in range(mc_seeds if stochastic else 1):
        preds = {name: predict(model, x, samples, batch=16, seed=1000 * k) for name, x in d["images"].items()}
        tau = fit_temperature(preds["validation"].logits, d["labels"]["validation"])
        runs.append({"scores": {n: p.scores() for n, p in preds.items()}, "tau": tau,
                     "probs": {n: preds[n].probs for n in ("validation", "test")},
                     "tempered": {"test": tempered(preds["test"].logits, tau).float()}})
    layers = {rule: {n: layer_traces(model, x, rule) for n, x in d["images"].items()} for rule in ("004", "mixture")}
    result = {"runs": runs, "layers": layers if stochastic else None, "labels": d["labels"],
              "config": model.config.to_dict(), "train_seconds": record.get("train_seconds"),
              "ood": [o for o in d["images"] if o not in ("validation", "test")], "samples": samples}
    torch.save(result, path.with_suffix(".eval.pt"))
    return result


# ------------------------------------------------------------------------------------------------- tables

def _cell(per_seed: list[list[float]], digits: int) -> str:
    """per_seed[training seed][mc seed] -> 'mean +- sd over training seeds (+- mean sd over MC seeds)'."""
    means = [sum(v) / len(v) for v in per_seed]
    m, sd = mean_sd(means)
    mc = sum(mean_sd(v)[1] for v in per_seed) / len(per_seed)
    text = f"{m:.{digits}f} +- {sd:.{digits}f}"
    return text + (f" (+- {mc:.{digits}f})" if any(len(v) > 1 for v in per_seed) else "")


def _metric(evals: list[dict], fn) -> list[list[float]]:
    return [[fn(run) for run in e["runs"]] for e in evals]


def _auroc(split: str, ood: str, score: str):
    return lambda run: auroc(run["scores"][split][score], run["scores"][ood][score])


def _best(evals: list[dict], split: str, ood: str) -> str:
    """The score with the largest mean AUROC on ``ood`` (against ``split``)."""
    have = [s for s in SCORES if s in evals[0]["runs"][0]["scores"][ood]]
    return max(have, key=lambda s: sum(sum(v) for v in _metric(evals, _auroc(split, ood, s))))


def _oods(records: dict) -> list[str]:
    """The OOD sets the measurements hold (the digits' before they named them)."""
    return next(iter(records.values()))[0].get("ood", list(data.OOD_SETS))


def _choose_table(records: dict) -> list[str]:
    oods = _oods(records)
    lines = ["| recipe | accuracy (validation) | ECE (validation) | " + " | ".join(
        f"tr Sigma AUROC: {o}" for o in oods) + " | " + " | ".join(
        f"best AUROC: {o}" for o in oods) + " |", "|---|" + "---|" * (2 + 2 * len(oods))]
    for r, evals in records.items():
        y = evals[0]["labels"]["validation"]
        cells = [_cell(_metric(evals, lambda run: accuracy(run["probs"]["validation"], y)), 4),
                 _cell(_metric(evals, lambda run: ece(run["probs"]["validation"], y)), 4)]
        for o in oods:
            stochastic = "covariance trace" in evals[0]["runs"][0]["scores"][o]
            cells.append(_cell(_metric(evals, _auroc("validation", o, "covariance trace")), 3) if stochastic else "-")
        for o in oods:
            best = _best(evals, "validation", o)
            cells.append(_cell(_metric(evals, _auroc("validation", o, best)), 3) + f" ({best})")
        lines.append(f"| {r} | " + " | ".join(cells) + " |")
    return lines


def _pairs(evals: list[dict], ood: str, score: str) -> list[tuple]:
    return [(run["scores"]["test"][score], run["scores"][ood][score]) for e in evals for run in e["runs"]]


def _kept(evals: list[dict], score: str) -> list[tuple]:
    """(test scores, correct) per evaluation: what selective classification by ``score`` keeps and gets right."""
    y = evals[0]["labels"]["test"]
    return [(run["scores"]["test"][score], run["probs"]["test"].argmax(-1) == y) for e in evals for run in e["runs"]]


def _perfect(evals: list[dict]) -> list[tuple]:
    """(scores, correct) per evaluation for a score that calls every error less certain than every right answer: the
    fewest errors any score of the model can keep, the limit a claim of fewer errors meets on this test split."""
    return [((~correct).double(), correct) for _, correct in _kept(evals, "max-softmax")]


def _best_selective(evals: list[dict]) -> str:
    """The score with the fewest errors among the COVERAGE share of test images it is surest of (mean over runs)."""
    ones = torch.ones(1, len(evals[0]["labels"]["test"]))
    return min(evals[0]["runs"][0]["scores"]["test"], key=lambda s: sum(
        float(weighted_selective_risk(v, c, ones, COVERAGE)[0]) for v, c in _kept(evals, s)))


def _report_table(records: dict) -> list[str]:
    twin, oods = records.get(TWIN), _oods(records)
    lines = ["| recipe | accuracy | NLL | ECE | ECE after temperature | ECE - twin's [95 % interval] | ECE after "
             f"temperature - twin's | errors at {COVERAGE:.0%} coverage - twin's (score) | the same by a perfect "
             "score (the limit) | " + " | ".join(f"best AUROC - twin's: {o}" for o in oods) + " |",
             "|---|" + "---|" * (8 + len(oods))]
    for r, evals in records.items():
        y = evals[0]["labels"]["test"]
        cells = [_cell(_metric(evals, lambda run: accuracy(run["probs"]["test"], y)), 4),
                 _cell(_metric(evals, lambda run: nll(run["probs"]["test"], y)), 3),
                 _cell(_metric(evals, lambda run: ece(run["probs"]["test"], y)), 4),
                 _cell(_metric(evals, lambda run: ece(run["tempered"]["test"], y)), 4)]
        if twin is None or r == TWIN:
            cells += ["-"] * (4 + len(oods))
        else:
            for kind in ("probs", "tempered"):
                d = ece_difference([run[kind]["test"] for e in evals for run in e["runs"]],
                                   [run[kind]["test"] for e in twin for run in e["runs"]], y)
                cells.append(f"{d.estimate:+.4f} [{d.low:+.4f}, {d.high:+.4f}]")
            mine, theirs = _best_selective(evals), _best_selective(twin)
            d = selective_risk_difference(_kept(evals, mine), _kept(twin, theirs), COVERAGE)
            cells.append(f"{d.estimate:+.4f} [{d.low:+.4f}, {d.high:+.4f}] ({mine})")
            d = selective_risk_difference(_perfect(evals), _kept(twin, theirs), COVERAGE)
            cells.append(f"{d.estimate:+.4f} [{d.low:+.4f}, {d.high:+.4f}]")
            for o in oods:
                mine, theirs = _best(evals, "test", o), _best(twin, "test", o)
                d = auroc_difference(_pairs(evals, o, mine), _pairs(twin, o, theirs))
                cells.append(f"{d.estimate:+.3f} [{d.low:+.3f}, {d.high:+.3f}] ({mine})")
        lines.append(f"| {r} | " + " | ".join(cells) + " |")
    return lines


def _auroc_table(records: dict) -> list[str]:
    lines = ["| recipe | OOD set | " + " | ".join(SCORES) + " |", "|---|---|" + "---|" * len(SCORES)]
    for r, evals in records.items():
        for o in _oods(records):
            have = evals[0]["runs"][0]["scores"][o]
            lines.append(f"| {r} | {o} | " + " | ".join(
                _cell(_metric(evals, _auroc("test", o, s)), 3) if s in have else "-" for s in SCORES) + " |")
    return lines


def _layer_table(records: dict) -> list[str]:
    """Per stochastic recipe, rule (its own, then the other one on the same weights) and OOD set: the AUROC of
    the tokens' mean tr(Sigma) at each layer (no Monte-Carlo seed: the pass on the means)."""
    lines, n = [], 0
    for r, evals in records.items():
        if evals[0]["layers"] is None:
            continue
        own = evals[0]["config"]["rule"]
        for rule in (own, "mixture" if own == "004" else "004"):
            for o in _oods(records):
                n = len(evals[0]["layers"][rule]["test"])
                cells = [_cell([[auroc(e["layers"][rule]["test"][k], e["layers"][rule][o][k])] for e in evals], 3)
                         for k in range(n)]
                tag = "" if rule == own else " (post hoc)"
                lines.append(f"| {r} | rule {rule}{tag} | {o} | " + " | ".join(cells) + " |")
    if not lines:   # no stochastic recipe: no covariance
        return ["(no stochastic recipe)"]
    head = ["| recipe | rule | OOD set | " + " | ".join(f"layer {k}" for k in range(n)) + " |",
            "|---|---|---|" + "---|" * n]
    return head + lines


def tables(records: dict) -> str:
    """The markdown tables of the module docstring."""
    return "\n".join(["### Choosing (validation split against the shipped OOD sets)", "", *_choose_table(records), "",
                      "### Reporting (test split)", "", *_report_table(records), "", *_auroc_table(records), "",
                      "### tr(Sigma) AUROC per layer (test split)", "", *_layer_table(records)])


# ------------------------------------------------------------------------------- after the choice

@torch.no_grad()
def measure_held_out(path: Path, samples: int = 128, mc_seeds: int = 4) -> dict:
    """The held-out letters' OOD scores per image at each Monte-Carlo seed (seeded as :func:`measure`, whose
    test-split scores they are compared with), saved beside the checkpoint as .heldout.pt (once; never re-run)."""
    out = path.with_suffix(".heldout.pt")
    if out.exists():
        return torch.load(out, weights_only=True)
    model, record = load_checkpoint(path)
    if _dataset(record) != "digits":
        raise ValueError(f"{path}: the held-out letters are the digits' (MNIST's sets are all shipped)")
    x = data.ood_set(data.HELD_OUT[0], 360)
    runs = [{"scores": predict(model, x, samples, batch=16, seed=1000 * k).scores()}
            for k in range(mc_seeds if model.config.kind == "stochastic" else 1)]
    torch.save({"runs": runs}, out)
    return {"runs": runs}


def held_out_table(records: dict, held: dict) -> list[str]:
    """Per recipe: each score's AUROC on the held-out letters against the test split (mean +- sd over training
    seeds (+- MC sd)) and its best score's difference to the twin's best, with the paired bootstrap interval."""
    name = data.HELD_OUT[0]
    merged = {r: [{"runs": [{"scores": {"test": run["scores"]["test"], name: h["scores"]}}
                            for run, h in zip(e["runs"], hh["runs"])]} for e, hh in zip(records[r], held[r])]
              for r in records}
    lines = [f"| recipe | {' | '.join(SCORES)} | best AUROC - twin's [95 % interval] |",
             "|---|" + "---|" * (len(SCORES) + 1)]
    twin = merged.get(TWIN)
    for r, evals in merged.items():
        have = evals[0]["runs"][0]["scores"][name]
        cells = [_cell(_metric(evals, _auroc("test", name, s)), 3) if s in have else "-" for s in SCORES]
        if twin is None or r == TWIN:
            cells.append("-")
        else:
            mine, theirs = _best(evals, "test", name), _best(twin, "test", name)
            d = auroc_difference(_pairs(evals, name, mine), _pairs(twin, name, theirs))
            cells.append(f"{d.estimate:+.3f} [{d.low:+.3f}, {d.high:+.3f}] ({mine})")
        lines.append(f"| {r} | " + " | ".join(cells) + " |")
    return lines


@torch.no_grad()
def measure_occlusion(path: Path, n: int, samples: int, mc_seeds: int) -> dict:
    """The MI-occlusion score (wviz.vit.occlusion) of the first ``n`` images of the test split and of each OOD set
    (the digits' held-out letters included) at each Monte-Carlo seed, saved beside the checkpoint as .occlusion.pt."""
    out = path.with_suffix(f".occlusion{n}s{samples}.pt")
    if out.exists():
        return torch.load(out, weights_only=True)
    model, record = load_checkpoint(path)
    xt, _ = data.load_dataset(_dataset(record), "test")
    sets = {"test": xt[:n], **{o: x[:n] for o, x in data.shipped_ood_sets(_dataset(record), len(xt)).items()}}
    runs = [{k: occlusion_score(occlusion_mi(model, x, samples, seed=1000 * m)) for k, x in sets.items()}
            for m in range(mc_seeds)]
    torch.save({"runs": runs}, out)
    return {"runs": runs}


def occlusion_table(occ: dict) -> list[str]:
    """Per stochastic recipe: the MI-occlusion score's AUROC per OOD set (mean +- sd over training seeds (+- MC
    sd))."""
    sets = [o for o in next(iter(occ.values()))[0]["runs"][0] if o != "test"]
    lines = ["| recipe | " + " | ".join(sets) + " |", "|---|" + "---|" * len(sets)]
    for r, evals in occ.items():
        lines.append(f"| {r} | " + " | ".join(_cell([[auroc(run["test"], run[o]) for run in e["runs"]]
                                                      for e in evals], 3) for o in sets) + " |")
    return lines


def main(argv=None) -> str:
    p = argparse.ArgumentParser(prog="python -m wviz.vit.ablation", description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--jobs", type=int, default=2, help="training runs at a time")
    p.add_argument("--out-dir", default="runs/ablation36")
    p.add_argument("--recipes", nargs="+", choices=list(RECIPES), default=list(RECIPES), metavar="RECIPE")
    p.add_argument("--samples", type=int, default=128, help="Monte-Carlo draws per image")
    p.add_argument("--mc-seeds", type=int, default=4, help="Monte-Carlo seeds per checkpoint")
    p.add_argument("--measure", default=None, help="measure this checkpoint only (what each job runs)")
    p.add_argument("--held-out", action="store_true",
                   help="after choosing: measure the held-out letters on --recipes and print their table only")
    p.add_argument("--occlusion", type=int, default=0, metavar="N",
                   help="measure the MI-occlusion AUROC on the first N images of each set and print its table only")
    p.add_argument("--occlusion-samples", type=int, default=32, help="Monte-Carlo draws of --occlusion")
    args, extra = p.parse_known_args(argv)  # the rest (e.g. --epochs 40) goes to every training run
    torch.set_num_threads(1)
    if args.measure:
        measure(Path(args.measure), args.samples, args.mc_seeds)
        return ""
    records = run_all({r: RECIPES[r] for r in args.recipes}, args.seeds, Path(args.out_dir), args.jobs, extra,
                      args.samples, args.mc_seeds)
    paths = {r: [_path(Path(args.out_dir), r, s) for s in args.seeds] for r in args.recipes}
    if args.held_out:
        held = {r: [measure_held_out(f, args.samples, args.mc_seeds) for f in fs] for r, fs in paths.items()}
        text = "\n".join(held_out_table(records, held))
    elif args.occlusion:
        text = "\n".join(occlusion_table({r: [measure_occlusion(f, args.occlusion, args.occlusion_samples,
                                                                   args.mc_seeds) for f in fs]
                                            for r, fs in paths.items() if r != TWIN}))
    else:
        text = tables(records)
    print(text)
    return text


if __name__ == "__main__":
    main()
