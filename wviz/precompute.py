"""The results that ship in assets/cache (wviz.disk_cache.PRECOMPUTED): what a first visit at the app's defaults would
otherwise compute on the CPU, seconds to minutes of it. For each bundled pair of the Uncertainty inspector (MNIST,
the 8 x 8 digits): each model's dataset panel and calibration on its test split, the stochastic model's per-layer
map AUROCs and its MI occlusion of the first test image at the page's defaults. Figure 4 of the Fenchel heads page
over the bundled corpus at the default alpha and at those of its guided experiments (a minute or two each on two
cores).

``python -m wviz.precompute`` (`make cache`) computes them again, into assets/cache alone: run it when a bundled
checkpoint, a test split, the corpus or the version of one of these computations changes (tests/test_precompute.py
fails until then, naming what is missing).
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from wviz import disk_cache
from wviz.views import heads_dual, uncertainty_inspector as inspector
from wviz.vit import demo, panel

__all__ = ["run", "requests", "main"]

DEVICE = "cpu"   # a GPU computes them in a moment; their files are keyed by the device


def run() -> None:
    """Each shipped result, through wviz.disk_cache.cached: computed, or loaded where it is found."""
    for dataset in demo.DEMOS:
        models = demo.bundled_pair(DEVICE, dataset)
        split = demo.shipped_split(dataset)
        for job in panel.panel_jobs(models, split):
            panel.evaluate_panel(job)
            panel.calibrate_panel(job)
        panel.map_aurocs(models.main.model, split)
        first = inspector.test_image(split, 0).image   # the page's first image, at its default S and seed
        inspector.occlusion(models, first, inspector.DEFAULT_SAMPLES, 0, share=True)
    for alpha in sorted({heads_dual.DEFAULT_ALPHA, *(t.params[heads_dual.Keys.ALPHA] for t in heads_dual.TRY_THIS
                                                   if heads_dual.Keys.ALPHA in t.params)}):
        heads_dual.deviation(alpha, DEVICE)


def requests() -> list[tuple[str, dict, int]]:
    """(name, params, version) of each shipped result, as the app asks wviz.disk_cache for it now; none computed."""
    asked: list[tuple[str, dict, int]] = []
    cached = disk_cache.cached
    disk_cache.cached = lambda name, params, version, compute, types=(): asked.append((name, params, version))
    try:
        run()
    finally:
        disk_cache.cached = cached
    return asked


def main() -> None:
    """Make assets/cache hold the results asked for now and nothing else: those missing are computed (a file
    already there under the same key is kept: the same computation, whose last bits vary with the threads)."""
    wanted = {disk_cache.address(*request)[0] for request in requests()}
    for old in disk_cache.PRECOMPUTED.glob("*"):
        if old.name not in wanted:
            old.unlink()
            print(f"removed {old}")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["WVIZ_CACHE_DIR"] = tmp
        run()
        disk_cache.PRECOMPUTED.mkdir(parents=True, exist_ok=True)
        for f in sorted(Path(tmp).glob("*.safetensors")):
            shutil.copy(f, disk_cache.PRECOMPUTED / f.name)
            print(f"wrote {disk_cache.PRECOMPUTED / f.name} ({f.stat().st_size // 1024} kB)")


if __name__ == "__main__":
    main()
