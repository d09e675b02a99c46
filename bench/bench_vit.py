"""Stochastic ViT: the bundled digits demo models on the CPU.

* one image, S = 32 Monte-Carlo samples: wviz.vit.model.mc_predict (all draws in one batch) against the peer, a
  python loop of 32 single-draw forward passes; goal: under 200 ms;
* test-set evaluation throughput (360 digits): the stochastic model's MC predictive (S = 16, as in the training
  record) and the deterministic twin's softmax, images per second;
* stochastic vs deterministic cost: one forward pass over the 360 test digits (no sampling), the ratio of times;
* the bundled MNIST model (50 tokens), 256 test images at S = 16: mc_predict's passes of DRAW_BATCH image-draws
  against one pass of all 4096 (the same draws: max abs diff 0);
* cutting MNIST-size images (28 x 28, patch 4) into patches, a training batch (64) and an evaluation batch
  (S = 16 draws of 256 images): wviz.vit.model's reshapes against torch's F.unfold, which they replaced.

Run with ``python -m bench vit`` (or ``python -m bench``); it rewrites the section "## Stochastic ViT"
of BENCHMARKS.md. WVIZ_BENCH_THREADS sets the threads of torch and numpy's BLAS (default 1).
"""
from __future__ import annotations

import os
import time

import torch
import torch.nn.functional as F

from bench.common import bench_threads, cpu_name, median_ms, write_section
from wviz.vit import data
from wviz.views import uncertainty_inspector as views
from wviz.vit.checkpoint import load_checkpoint
from wviz.vit.evaluate import predict
from wviz.vit.model import DRAW_BATCH, ViTConfig, build_model, mc_predict

SECTION = "## Stochastic ViT"
GOAL_MS = 200


@torch.no_grad()
def rows(repeats: int = 9) -> list[dict]:
    sto, _ = load_checkpoint(views.BUNDLED["digits"]["stochastic"])
    det, _ = load_checkpoint(views.BUNDLED["digits"]["deterministic"])
    x, _ = data.load_dataset("digits", "test")
    one = x[:1]

    def loop():
        g = torch.Generator().manual_seed(0)
        return torch.stack([sto(one, sample=True, generator=g).logits.softmax(-1) for _ in range(32)]).mean(0)

    t = median_ms({"batched": lambda: mc_predict(sto, one, 32), "loop": loop,
                    "det": lambda: mc_predict(det, one, 32)}, repeats)
    diff = float((mc_predict(sto, one, 32, seed=0).mean - loop()).abs().max())
    out = [{"case": "1 image, S = 32 MC samples (stochastic)", "wviz": t["batched"],
            "peer": "python loop of 32 forward passes", "peer_ms": t["loop"], "diff": f"{diff:.1e}"},
           {"case": "1 image, deterministic twin (1 pass)", "wviz": t["det"], "peer": "-", "peer_ms": None,
            "diff": "-"}]
    t = median_ms({"sto": lambda: predict(sto, x, samples=16), "det": lambda: predict(det, x, samples=16)},
                   max(3, repeats // 3))
    for kind, ms in (("stochastic, S = 16", t["sto"]), ("deterministic", t["det"])):
        out.append({"case": f"test split (360 images), {kind}", "wviz": ms, "peer": "images / s",
                    "peer_ms": None, "diff": f"{360 / ms * 1e3:.0f} img/s"})
    t = median_ms({"sto": lambda: sto(x), "det": lambda: det(x)}, repeats)
    out.append({"case": "forward pass, 360 images (no sampling)", "wviz": t["sto"],
                "peer": "deterministic twin", "peer_ms": t["det"], "diff": "-"})
    return out + draw_rows(max(3, repeats // 3)) + patch_rows(repeats)


def draw_rows(repeats: int) -> list[dict]:
    """The bundled MNIST model's MC predictive of 256 test images at S = 16: mc_predict's passes of DRAW_BATCH
    image-draws against the plain one pass of all 4096 (what mc_predict did before), the same draws."""
    sto, _ = load_checkpoint(views.BUNDLED["mnist"]["stochastic"])
    x = data.load_dataset("mnist", "test")[0][:256]

    def one_pass():
        g = torch.Generator().manual_seed(0)
        return sto(x.repeat(16, 1, 1, 1), sample=True, generator=g).logits.reshape(16, 256, -1)

    t = median_ms({"passes": lambda: mc_predict(sto, x, 16), "one": one_pass}, repeats)
    diff = float((mc_predict(sto, x, 16, seed=0).logits - one_pass()).abs().max())
    return [{"case": f"MNIST, 256 images, S = 16 (passes of {DRAW_BATCH['cpu']} image-draws)", "wviz": t["passes"],
             "peer": "one pass of all 4096 image-draws", "peer_ms": t["one"], "diff": f"{diff:.1e}"}]


def patch_rows(repeats: int) -> list[dict]:
    """The model's patches against F.unfold's, on 28 x 28 images cut into 7 x 7 patches of 4 x 4."""
    mnist_size = build_model(ViTConfig(image_size=28, patch_size=4))
    out = []
    for n, what in ((64, "a training batch"), (16 * 256, "S = 16 draws of 256 images")):
        x = torch.rand(n, 1, 28, 28, generator=torch.Generator().manual_seed(0))
        unfold = lambda: F.unfold(x, 4, stride=4).transpose(1, 2)  # noqa: E731
        t = median_ms({"wviz": lambda: mnist_size.patches(x), "unfold": unfold}, repeats)
        diff = float((mnist_size.patches(x) - unfold()).abs().max())
        out.append({"case": f"patches of {n} images 28 x 28, p = 4 ({what})", "wviz": t["wviz"],
                    "peer": "F.unfold", "peer_ms": t["unfold"], "diff": f"{diff:.1e}"})
    return out


def table(rs: list[dict]) -> str:
    lines = ["| case | wviz ms | peer | peer ms | ratio peer/wviz | max abs diff / throughput |",
             "|---|---|---|---|---|---|"]
    for r in rs:
        peer_ms = "-" if r["peer_ms"] is None else f"{r['peer_ms']:.1f}"
        ratio = "-" if r["peer_ms"] is None else f"**{r['peer_ms'] / r['wviz']:.2f}**"
        lines.append(f"| {r['case']} | {r['wviz']:.1f} | {r['peer']} | {peer_ms} | {ratio} | {r['diff']} |")
    return "\n".join(lines)


def machine(threads: int) -> str:
    return f"{cpu_name()}, {os.cpu_count()} cores, {threads} torch thread(s), torch {torch.__version__}, on the CPU"


def main(write: bool = True) -> str:
    with bench_threads() as threads:
        print(f"{SECTION}\nmachine: {machine(threads)}", flush=True)
        t0 = time.perf_counter()
        rs = rows()
        tab = table(rs)
        mc_ms = rs[0]["wviz"]
        tab += (f"\n\nGoal (one image, S = 32, under {GOAL_MS} ms): "
                f"{'met' if mc_ms < GOAL_MS else '**missed**'} ({mc_ms:.1f} ms).")
        wall = time.perf_counter() - t0
    print(tab)
    if write:
        body = (f"Machine: {machine(threads)}. Produced by `make bench` (`bench/bench_vit.py`, {wall:.0f} s wall "
                "time); median wall time over repeats after a warm-up, the variants taking turns within each "
                "repeat. Models: the bundled digits demo checkpoints (assets/), 16 x 16 inputs, 17 tokens (but the "
                "MNIST row).\n\n"
                "Goal: one image with 32 Monte-Carlo samples under 200 ms on the CPU. The batched MC predictive "
                "puts the 32 draws through the network as one batch; the peer loops over S single-image passes "
                "(max abs diff of the two predictive distributions, same draws). The last row is the cost of "
                "W2 attention and the covariance stream against the dot-product twin (ratio < 1: the stochastic "
                "model is slower by 1 / ratio). The MNIST row (28 x 28 inputs, 50 tokens) times mc_predict's "
                "passes of a few hundred image-draws, which stay in cache, against one pass of all S x B (the "
                "same draws). The patch rows time the model's cut into patches against F.unfold, "
                "which it replaced (the same layout: max abs diff 0).\n\n" + tab)
        write_section(SECTION, body)
    return tab
