"""The ablation of docs/TRAINING.md: each training recipe over several seeds, as mean and spread.

    python -m wviz.vit.ablation --seeds 0 1 2 --jobs 2 --out-dir runs/ablation

runs ``python -m wviz.vit.train`` once per (recipe, seed), ``--jobs`` at a time (one torch thread each), skips a
run whose checkpoint already exists, and prints two markdown tables from the checkpoints' records: accuracy, NLL
and ECE per recipe; AUROC per recipe, OOD set and score. Each cell is the mean over the seeds +- their standard
deviation (n - 1 in the denominator).
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from wviz.vit.checkpoint import load_checkpoint
from wviz.vit.metrics import SCORES

__all__ = ["RECIPES", "run_all", "tables", "main"]

# name -> options of wviz.vit.train beyond the shared ones (data, epochs, seed, threads, out)
RECIPES = {
    "deterministic twin": ["--kind", "deterministic", "--lam", "0"],
    "stochastic, no W2 term": ["--lam", "0"],
    "+ fine-tuning W2 term": ["--lam", "0.1"],
    "+ both W2 terms": ["--lam", "0.1", "--pretrain-epochs", "10"],
    # the prior that keeps Sigma from collapsing (wviz.vit.model.covariance_kl), at three weights beta
    "+ both W2 terms + KL prior, beta 0.0003": ["--lam", "0.1", "--pretrain-epochs", "10", "--kl", "0.0003"],
    "+ both W2 terms + KL prior, beta 0.001": ["--lam", "0.1", "--pretrain-epochs", "10", "--kl", "0.001"],
    "+ both W2 terms + KL prior, beta 0.003": ["--lam", "0.1", "--pretrain-epochs", "10", "--kl", "0.003"],
}


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name).strip("_")


def _path(out_dir: Path, recipe: str, seed: int) -> Path:
    return out_dir / f"{_slug(recipe)}_seed{seed}.safetensors"


def _train(argv: list[str], log: Path) -> None:
    with open(log, "w") as f:
        subprocess.run([sys.executable, "-m", "wviz.vit.train", *argv], stdout=f, stderr=subprocess.STDOUT,
                       check=True)


def run_all(recipes: dict, seeds: list[int], out_dir: Path, jobs: int, extra: list[str]) -> dict:
    """Train what is missing; returns {recipe: [record per seed]}."""
    out_dir.mkdir(parents=True, exist_ok=True)
    todo = [(r, s) for r in recipes for s in seeds if not _path(out_dir, r, s).exists()]
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        for f in [pool.submit(_train, [*recipes[r], "--seed", str(s), "--threads", "1", "--no-progress", *extra,
                                       "--out", str(_path(out_dir, r, s))], _path(out_dir, r, s).with_suffix(".log"))
                  for r, s in todo]:
            f.result()
    return {r: [load_checkpoint(_path(out_dir, r, s))[1] for s in seeds] for r in recipes}


def _cell(values: list[float], digits: int) -> str:
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} +- {statistics.stdev(values):.{digits}f}"


def tables(records: dict) -> str:
    """The two markdown tables of the module docstring."""
    lines = ["| recipe | accuracy | NLL | ECE |", "|---|---|---|---|"]
    for r, recs in records.items():
        m = [rec["metrics"] for rec in recs]
        lines.append(f"| {r} | {_cell([x['accuracy'] for x in m], 4)} | {_cell([x['nll'] for x in m], 3)} | "
                     f"{_cell([x['ece'] for x in m], 4)} |")
    first = next(iter(records.values()))[0]["metrics"]["auroc"]
    lines += ["", "| recipe | OOD set | " + " | ".join(SCORES) + " |", "|---|---|" + "---|" * len(SCORES)]
    for r, recs in records.items():
        for ood in first:
            cells = [_cell([rec["metrics"]["auroc"][ood][s] for rec in recs], 3)
                     if s in recs[0]["metrics"]["auroc"][ood] else "-" for s in SCORES]
            lines.append(f"| {r} | {ood} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> str:
    p = argparse.ArgumentParser(prog="python -m wviz.vit.ablation", description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--jobs", type=int, default=2, help="training runs at a time")
    p.add_argument("--out-dir", default="runs/ablation")
    p.add_argument("--recipes", nargs="+", choices=list(RECIPES), default=list(RECIPES), metavar="RECIPE")
    args, extra = p.parse_known_args(argv)  # the rest (e.g. --epochs 40) goes to every training run
    records = run_all({r: RECIPES[r] for r in args.recipes}, args.seeds, Path(args.out_dir), args.jobs, extra)
    text = tables(records)
    print(text)
    return text


if __name__ == "__main__":
    main()
