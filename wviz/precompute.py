"""The results that ship in assets/cache (wviz.disk_cache.PRECOMPUTED): what a first visit at the app's defaults would
otherwise compute on the CPU, seconds to minutes of it. The Uncertainty inspector's dataset panel and calibration
of each bundled model on its test split, and Figure 4 of the Fenchel heads page at the default alpha over the
bundled corpus.

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
from wviz.views import heads_dual
from wviz.vit import demo, panel

__all__ = ["run", "main"]

DEVICE = "cpu"   # a GPU computes them in a moment; their files are keyed by the device


def run() -> None:
    """Each shipped result, through wviz.disk_cache.cached: computed, or loaded where it is found."""
    models = demo.model_set(demo.load_bundled("stochastic", DEVICE), demo.load_bundled("deterministic", DEVICE))
    for job in panel.panel_jobs(models, demo.digits_split()):
        panel.evaluate_panel(job)
        panel.calibrate_panel(job)
    heads_dual.deviation(heads_dual.DEFAULT_ALPHA, DEVICE)


def main() -> None:
    """Compute every result afresh in an empty folder, then make assets/cache hold those files and nothing else."""
    shipped = disk_cache.PRECOMPUTED
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["WVIZ_CACHE_DIR"] = tmp
        disk_cache.PRECOMPUTED = Path(tmp) / "none"   # not loaded from the files it replaces
        run()
        shutil.rmtree(shipped, ignore_errors=True)
        shipped.mkdir(parents=True)
        for f in sorted(Path(tmp).glob("*.safetensors")):
            shutil.copy(f, shipped / f.name)
            print(f"wrote {shipped / f.name} ({f.stat().st_size // 1024} kB)")


if __name__ == "__main__":
    main()
