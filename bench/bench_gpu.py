"""The benchmarks' GPU rows (attention maps, OT engine, Gaussian W2, stochastic ViT, models), run only where CUDA is
available, and the GPU goals, each marked met or missed with the limit that stops it measured in the same run.

* attention maps: bench_attention's cases on CUDA tensors (wviz against the entmax package and torch.softmax);
* OT engine: bench_ot's grid with wviz and POT's torch variants on CUDA tensors (POT's numpy variants on the
  host CPU), 16 problems batched on the GPU against 16 sequential POT calls, and the interactive recompute;
* Gaussian W2: the diagonal path against the plain torch broadcast and the bare matrix product it is built on;
* stochastic ViT: one image with 32 Monte-Carlo samples (batched against a python loop), test-split throughput,
  and one epoch of training on digits with mixed precision (AMP) and without;
* models: a BERT encoder with MiniLM-L6's config (all-MiniLM-L6-v2's config.json) and one of BERT-base's size, random
  weights (the bundled MiniLM weights do not travel to the GPU machine; the speed is the same), 512 tokens: the
  forward with every head's normaliser swapped (wviz.models.minilm's attention function) against the model's own
  eager forward, on the GPU and on the host CPU;
* limits: the cost of one kernel launch and of one host synchronisation, and what each timed call launches and
  synchronises (torch's profiler and its sync debug mode), so that a missed goal comes with its floor.

Run with ``python -m bench gpu`` (or ``python -m bench``); on a machine without CUDA it says so and writes nothing.
Otherwise it rewrites the section "## On a GPU" of BENCHMARKS.md (the other sections stay CPU-only, so the two kinds
of machine never overwrite each other's tables), and also writes the section alone to the file WVIZ_GPU_SECTION
names, if set (bench/gpu_check.sh sets it so that the section comes back from the GPU machine).
WVIZ_BENCH_GPU_DRY=1 runs everything on the CPU at toy sizes and writes only WVIZ_GPU_SECTION: a check of the
plumbing (bench/gpu_check.sh's dry run), whose numbers mean nothing.
"""
from __future__ import annotations

import copy
import math
import os
import tempfile
import time
import traceback
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import torch

from bench import bench_attention, bench_ot
from bench.common import bench_threads, cpu_name, median_ms, write_section
from wviz import attention, gaussian, ot

SECTION = "## On a GPU"
# POT's slowest host variants (log-domain numpy at n = 2048) run for tens of seconds and never win a cell: capped
# at this budget they are reported "did not reach tol", which keeps the whole check inside one device call.
POT_BUDGET_S = float(os.environ.get("WVIZ_GPU_POT_BUDGET_S", "4"))
MINILM = dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536)
BERT_BASE = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)
SWAPS = {"wviz softmax": ("softmax", {}), "sparsemax": ("sparsemax", {}), "entmax 1.5": ("entmax", {}),
               "sinkhorn (5 it)": ("sinkhorn", {"n_iter": 5})}


@dataclass(frozen=True)
class Sizes:
    """What the bench measures: the GPU run's sizes, or toy ones for the dry run on a CPU."""

    attention: tuple = ((1024, 1024), (4096, 4096))
    grid: tuple = bench_ot.SIZES
    gammas: tuple = bench_ot.GAMMAS
    batched: tuple = (64, 256)
    interactive: tuple = (256, 512)
    gauss_n: int = 2048
    tokens: int = 512
    models: dict = field(default_factory=lambda: {"MiniLM-L6 config": MINILM, "BERT-base size": BERT_BASE})
    vit_limit: int = 0


DRY = Sizes(attention=((64, 64),), grid=(64,), gammas=(0.05,), batched=(16,), interactive=(32,), gauss_n=64,
            tokens=32, models={"toy BERT": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                                intermediate_size=128)}, vit_limit=64)


def gaussian_rows(device, n: int = 2048, d: int = 64, repeats: int = 21) -> str:
    """Diagonal W2^2 for all n x n pairs: wviz against the torch broadcast and the bare (n, 2d) x (2d, n) matmul."""
    lines = ["| case | dtype | wviz ms | torch broadcast ms | broadcast / wviz | matmul ms | wviz / matmul "
             "| max abs diff vs broadcast |", "|---|---|---|---|---|---|---|---|"]
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float64):
        mq, mk = (torch.randn(n, d, generator=g, dtype=torch.float64).to(device, dtype) for _ in range(2))
        vq, vk = ((torch.rand(n, d, generator=g, dtype=torch.float64) + 0.05).to(device, dtype) for _ in range(2))

        def broadcast():
            sq, sk = vq.sqrt(), vk.sqrt()
            return ((mq[:, None] - mk[None]) ** 2).sum(-1) + ((sq[:, None] - sk[None]) ** 2).sum(-1)

        xq, xk = torch.cat([mq, vq.sqrt()], -1), torch.cat([mk, vk.sqrt()], -1)
        t = median_ms({"wviz": lambda: gaussian.pairwise_w2_squared(mq, vq, mk, vk), "broadcast": broadcast,
                       "matmul": lambda: xq @ xk.mT}, repeats, device)
        diff = float((gaussian.pairwise_w2_squared(mq, vq, mk, vk).double() - broadcast().double()).abs().max())
        lines.append(f"| diagonal, n = m = {n}, d = {d} | {str(dtype)[6:]} | {t['wviz']:.3f} | {t['broadcast']:.3f} "
                     f"| **{t['broadcast'] / t['wviz']:.1f}** | {t['matmul']:.3f} | {t['wviz'] / t['matmul']:.1f} "
                     f"| {diff:.1e} |")
    return "\n".join(lines)


@torch.no_grad()
def vit_rows(device, repeats: int = 21) -> str:
    from wviz.vit import data
    from wviz.views import uncertainty_inspector as views
    from wviz.vit.checkpoint import load_checkpoint
    from wviz.vit.evaluate import predict
    from wviz.vit.model import mc_predict

    sto = load_checkpoint(views.BUNDLED["digits"]["stochastic"])[0].to(device)
    det = load_checkpoint(views.BUNDLED["digits"]["deterministic"])[0].to(device)
    x = data.load_dataset("digits", "test")[0].to(device)
    one = x[:1]

    def loop():
        g = torch.Generator(device).manual_seed(0)
        return torch.stack([sto(one, sample=True, generator=g).logits.softmax(-1) for _ in range(32)]).mean(0)

    t = median_ms({"batched": lambda: mc_predict(sto, one, 32), "loop": loop}, repeats, device)
    tp = median_ms({"sto": lambda: predict(sto, x, samples=16), "det": lambda: predict(det, x, samples=16)},
                   max(3, repeats // 3), device)
    return "\n".join([
        "| case | wviz ms | peer | peer ms | ratio peer / wviz |", "|---|---|---|---|---|",
        f"| 1 image, S = 32 MC samples (stochastic) | {t['batched']:.2f} | python loop of 32 forward passes "
        f"| {t['loop']:.2f} | **{t['loop'] / t['batched']:.1f}** |",
        f"| test split (360 images), stochastic, S = 16 | {tp['sto']:.1f} | images / s | - "
        f"| {360 / tp['sto'] * 1e3:.0f} img/s |",
        f"| test split (360 images), deterministic | {tp['det']:.1f} | images / s | - "
        f"| {360 / tp['det'] * 1e3:.0f} img/s |"])


# ---- the stochastic ViT's training, one epoch ----------------------------------------------------------------------

def vit_training(device, limit: int = 0) -> list[dict]:
    """One epoch of ``python -m wviz.vit.train`` on digits with mixed precision (the default on CUDA) and without
    (--no-amp): its seconds, and whether its loss stayed finite (the weights and, on the GPU, the test NLL)."""
    from wviz.vit import train
    from wviz.vit.checkpoint import load_checkpoint

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for amp in (True, False):
            out = f"{tmp}/vit_{int(amp)}.safetensors"
            argv = ["--data", "digits", "--epochs", "1", "--device", device.type, "--no-progress", "--out", out,
                    "--eval-samples", "4"] + ([] if amp else ["--no-amp"])
            argv += ["--limit", str(limit), "--no-eval"] if limit else []
            record = train.main(argv)
            model = load_checkpoint(out)[0]
            nll = (record.get("metrics") or {}).get("nll", float("nan"))
            finite = all(bool(torch.isfinite(p).all()) for p in model.parameters()) and (limit or math.isfinite(nll))
            on_gpu = amp and device.type == "cuda"
            amp_kind = ("bf16" if torch.cuda.is_bf16_supported() else "fp16") if on_gpu else "off"
            rows.append(dict(amp=amp_kind, seconds=record["train_seconds"], images=record["train_images"], nll=nll,
                             finite=bool(finite)))
    return rows


def vit_training_table(rows) -> str:
    lines = ["| mixed precision | epoch s (first epoch, warm-up included) | images / s | test NLL | loss finite |",
             "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['amp']} | {r['seconds']:.1f} | {r['images'] / max(r['seconds'], 1e-9):.0f} "
                     f"| {r['nll']:.3f} | {'yes' if r['finite'] else '**NO**'} |")
    return "\n".join(lines)


# ---- models: swapped normalisers against the eager forward ---------------------------------------------------------

def _encoders(config: dict):
    """(eager, swapped): one random-weight BERT encoder with ``config``, with transformers' eager attention and with
    wviz's attention function (wviz.models.minilm), the same weights."""
    from transformers import AutoModel, BertConfig

    from wviz.models import minilm

    minilm._register()
    torch.manual_seed(0)
    eager = AutoModel.from_config(BertConfig(**config), attn_implementation="eager").eval()
    swapped = copy.deepcopy(eager)
    swapped.set_attn_implementation(minilm.IMPLEMENTATION)
    return eager, swapped


def _swapped_forward(model, ids, normaliser):
    """One forward with every head normalised by ``normaliser``, recording Q, K, V, scores and weights as
    wviz.models.minilm.forward does. Its private record is used because the "your model" entry point (a model
    built from a config) has not landed; that entry point replaces this."""
    from wviz.models import minilm

    token = minilm._RECORD.set(minilm._Record(normaliser))
    try:
        return model(input_ids=ids).last_hidden_state
    finally:
        minilm._RECORD.reset(token)


@torch.inference_mode()
def model_rows(device, configs: dict, tokens: int, repeats: int) -> list[dict]:
    """Per model: the eager forward and each swapped one at ``tokens`` tokens (one sentence), in ms, with the
    normaliser alone on one layer's scores times the layers (the floor of what a swap adds)."""
    from wviz.models import minilm

    rows = []
    for name, config in configs.items():
        eager, swapped = (m.to(device) for m in _encoders(config))
        ids = torch.randint(1000, config.get("vocab_size", 30522), (1, tokens),
                            generator=torch.Generator().manual_seed(0)).to(device)
        norms = {label: minilm.make_normaliser(kind, **p) for label, (kind, p) in SWAPS.items()}
        fns = {"eager": lambda: eager(input_ids=ids).last_hidden_state}
        fns |= {label: (lambda n=n: _swapped_forward(swapped, ids, n)) for label, n in norms.items()}
        t = median_ms(fns, repeats, device)
        diff = float((fns["eager"]() - fns["wviz softmax"]()).abs().max())
        H, L = config["num_attention_heads"], config["num_hidden_layers"]
        scores = torch.randn(1, H, tokens, tokens, generator=torch.Generator().manual_seed(1)).to(device) * 2
        alone = median_ms({label: (lambda n=n: n(scores)) for label, n in norms.items()}, repeats, device)
        rows.append(dict(model=name, device=device.type, tokens=tokens, times=t, diff=diff,
                         alone={k: v * L for k, v in alone.items()}))
        print(f"  {name} on {device.type}: eager {t['eager']:.1f} ms, "
              + ", ".join(f"{k} {t[k]:.1f} ms" for k in norms), flush=True)
    return rows


def models_table(rows) -> str:
    labels = list(SWAPS)
    head = ("| model | device | tokens | eager ms | " + " | ".join(f"{k} ms (/ eager; normaliser alone x L)"
                                                                  for k in labels) + " | max abs diff, wviz softmax |")
    lines = [head, "|---" * (head.count("|") - 1) + "|"]
    for r in rows:
        t = r["times"]
        cells = [f"{t[k]:.1f} (**{t[k] / t['eager']:.2f}**; {r['alone'][k]:.1f})" for k in labels]
        lines.append(f"| {r['model']} | {r['device']} | {r['tokens']} | {t['eager']:.1f} | " + " | ".join(cells)
                     + f" | {r['diff']:.1e} |")
    return "\n".join(lines)


# ---- limits: launches and synchronisations -------------------------------------------------------------------------

def launch_costs(device) -> dict:
    """ms per kernel launch (1000 one-element adds, one synchronisation) and per host synchronisation round trip
    (one add, then synchronise): the floors that launch-bound timings sit on."""
    x = torch.zeros(1, device=device)

    def many():
        for _ in range(1000):
            x.add_(1)

    t = median_ms({"many": many, "one": lambda: x.add_(1)}, 21, device)
    return {"launch": t["many"] / 1000, "sync": t["one"]}


def _sync_count(fn, device) -> int | None:
    """Host synchronisations that fn makes (torch's sync debug mode warns at each); None off CUDA."""
    if device.type != "cuda":
        return None
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


def _launch_count(fn, device) -> tuple[int | None, int | None]:
    """(kernel launches, CUDA graph launches) that fn makes, read off torch's profiler; (None, None) off CUDA."""
    if device.type != "cuda":
        return None, None
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = Counter()
    for e in prof.key_averages():
        names[e.key] += e.count
    kernels = sum(c for k, c in names.items() if k.startswith(("cudaLaunchKernel", "cuLaunchKernel")))
    return kernels, names.get("cudaGraphLaunch", 0)


def counts(cases: dict, device, cost: dict) -> list[dict]:
    """For each named call: its median time, launches, graph launches, synchronisations and the floor they make."""
    rows = []
    for name, fn in cases.items():
        fn()
        ms = median_ms({"fn": fn}, 11, device)["fn"]
        try:
            kernels, graphs = _launch_count(fn, device)
            syncs = _sync_count(fn, device)
        except Exception as err:   # a profiler that cannot start must not cost the rest of the run
            print(f"  counting {name}: {type(err).__name__}: {err}", flush=True)
            kernels = graphs = syncs = None
        floor = None if kernels is None else (kernels + graphs) * cost["launch"] + (syncs or 0) * cost["sync"]
        rows.append(dict(name=name, ms=ms, kernels=kernels, graphs=graphs, syncs=syncs, floor=floor))
    return rows


def counts_table(rows, cost) -> str:
    na = lambda v, f="{}": "-" if v is None else f.format(v)  # noqa: E731
    lines = [f"One kernel launch: {1e3 * cost['launch']:.1f} us; one host synchronisation (launch, wait, return): "
             f"{1e3 * cost['sync']:.1f} us.", "",
             "| call | ms | kernel launches | CUDA graph launches | host synchronisations "
             "| floor ms: launches x launch + syncs x sync |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['name']} | {r['ms']:.2f} | {na(r['kernels'])} | {na(r['graphs'])} | {na(r['syncs'])} "
                     f"| {na(r['floor'], '{:.2f}')} |")
    return "\n".join(lines)


GPU_LOOP = "wviz.ot.sinkhorn route=False"   # the limits rows of the GPU's own Sinkhorn loop


def limit_cases(device, sizes: Sizes) -> dict:
    """The calls whose launches and synchronisations the limits table counts."""
    import entmax

    n = sizes.attention[0][0]
    x = torch.randn(n, n, generator=torch.Generator().manual_seed(0)).to(device)
    small = sizes.interactive[0]
    a, b, C = bench_ot.problem(small, dtype=torch.float32, device=device)
    B = sizes.batched[0]
    probs = [bench_ot.problem(B, seed=s) for s in range(16)]
    ab, bb, Cb = (torch.stack([p[i] for p in probs]).to(device) for i in range(3))
    return {f"wviz.sparsemax {n} x {n}": lambda: attention.sparsemax(x),
            f"entmax.sparsemax {n} x {n}": lambda: entmax.sparsemax(x, dim=-1),
            f"wviz.entmax 1.5 {n} x {n}": lambda: attention.entmax(x, alpha=1.5),
            f"entmax.entmax15 {n} x {n}": lambda: entmax.entmax15(x, dim=-1),
            f"wviz.ot.sinkhorn n = {small}, gamma = 0.01, float32": lambda: ot.sinkhorn(a, b, C, 0.01),
            f"wviz.ot.sinkhorn 16 x {B}, gamma = 0.05, float64": lambda: ot.sinkhorn(ab, bb, Cb, 0.05, tol=1e-6),
            # the GPU's own loop, which the problems above (below CPU_ROUTE_SIZE) leave for the CPU
            f"{GPU_LOOP} n = {small}, gamma = 0.05, float32": lambda: ot.sinkhorn(a, b, C, 0.05, route=False),
            f"{GPU_LOOP} n = {small}, gamma = 0.01, float32": lambda: ot.sinkhorn(a, b, C, 0.01, route=False),
            f"{GPU_LOOP} n = {small}, gamma = 0.001, float32": lambda: ot.sinkhorn(a, b, C, 0.001, route=False),
            f"{GPU_LOOP} 16 x {B}, gamma = 0.05, float64": lambda: ot.sinkhorn(ab, bb, Cb, 0.05, tol=1e-6,
                                                                               route=False)}


# ---- the goals ------------------------------------------------------------------------------------------------------

def _mark(ok) -> str:
    return "met" if ok else "**missed**"


def _limit(limits, start: str) -> str:
    """'floor F ms (K launches, G graph launches, S syncs)' of the limits row whose name starts with ``start``."""
    for r in limits:
        if r["name"].startswith(start) and r["kernels"] is not None:
            return (f"floor {r['floor']:.2f} ms of {r['ms']:.2f} ms ({r['kernels']} launches, {r['graphs']} graph "
                    f"launches, {r['syncs']} syncs)")
    return "floor not measured"


def sparse_goals(att_rows, limits) -> list[str]:
    sparse = [r for r in att_rows if r["map"] != "softmax"]
    slow = [f"{r['size']} {r['dist']} {r['map']}: {r['ratio']:.2f}x" for r in sparse if not r["ratio"] >= 1]
    big = [r for r in sparse if r["size"] == "4096x4096"]
    bmiss = [f"{r['dist']} {r['map']}: {r['ratio']:.2f}x" for r in big if not r["ratio"] >= 2]
    if not sparse:
        return ["- Sparse maps at least as fast as the entmax package at every size, 2x at 4096 x 4096: not measured."]
    n = att_rows[0]["size"].split("x")[0]
    return [f"- Sparse maps at least as fast as the entmax package at every size: {_mark(not slow)}, "
            f"{len(sparse) - len(slow)} of {len(sparse)} rows" + (f" (missed at {'; '.join(slow)})" if slow else "")
            + f". Limit at {n} x {n}: wviz.sparsemax {_limit(limits, 'wviz.sparsemax')}; entmax.sparsemax "
            f"{_limit(limits, 'entmax.sparsemax')}; wviz.entmax 1.5 {_limit(limits, 'wviz.entmax')}.",
            f"- At least 2x the entmax package at 4096 x 4096: {_mark(big and not bmiss)}"
            + (f" (missed at {'; '.join(bmiss)})" if bmiss else "") + ("" if big else " (not measured)") + "."]


def _pot_best(row, backend: str):
    """(time, variant, capped) of the fastest POT variant of ``backend`` ('numpy' on the host, 'torch' on the GPU)
    that reached the tolerance; else the fastest capped one (it ran its whole budget without reaching it)."""
    peers = {k: p for k, p in row["peers"].items() if bench_ot.POT_VARIANTS[k][0] == backend}
    for ok in ([k for k, p in peers.items() if p["reached"]], [k for k, p in peers.items() if p["capped"]]):
        if ok:
            best = min(ok, key=lambda k: peers[k]["time"])
            return peers[best]["time"], best, not peers[best]["reached"]
    return None, None, False


def sinkhorn_goals(grid, inter, inter_cpu, limits) -> list[str]:
    lines = []
    for backend, where in (("torch", "POT with its torch backend on the same GPU"), ("numpy", "POT on the host")):
        miss, cells = [], 0
        for r in grid:
            t, name, capped = _pot_best(r, backend)
            if t is None:
                continue
            cells += 1
            if not t >= r["wviz"]:
                miss.append(f"n = {r['n']}, gamma = {r['gamma']}: {t / r['wviz']:.2f}x ({name})")
        missed = f" (missed at {'; '.join(miss)})" if miss else ""
        verdict = f"{_mark(not miss)}, {cells - len(miss)} of {cells} cells{missed}" if cells else "not measured"
        lines.append(f"- Sinkhorn at least as fast as {where}, every cell of the grid: {verdict} (a POT variant that "
                     f"ran out of its {POT_BUDGET_S:g} s budget counts as slower).")
    small = [r for r in inter if r["n"] == 256] or inter[:1]
    if small:
        r = small[0]
        limit = "the GPU's own loop (route=False): " + _limit(limits, f"{GPU_LOOP} n = {r['n']}, gamma = 0.01")
        lines.append(f"- One problem, n = {r['n']} (float32, gamma = 0.01): a slider's recompute in at most 2 ms: "
                     f"{_mark(r['cold'] <= 2e-3)} ({1e3 * r['cold']:.2f} ms cold, {1e3 * r['warm']:.2f} ms "
                     f"warm-started). Limit: {limit}.")
    if small and inter_cpu:
        g, c = small[0]["cold"], inter_cpu[0]["cold"]
        lines.append(f"- Small problems where the CPU is faster: n = {small[0]['n']} takes {1e3 * c:.2f} ms on the "
                     f"host CPU, {1e3 * g:.2f} ms with GPU tensors; "
                     + ("the GPU is faster here, nothing to route." if g <= c else
                        f"routed to the CPU: {_mark(g <= 1.2 * c)} (met when the GPU tensors' solve takes at most "
                        "1.2x the CPU's). The page check reports what the sidebar says."))
    return lines


def batched_goal(batched, limits) -> list[str]:
    rows = [r for r in batched if r["n"] == 64] or batched[:1]
    miss = [f"gamma = {r['gamma']}: {r['ratio']:.2f}x" for r in rows if not r["ratio"] >= 8]
    per_it = "; ".join(f"gamma = {r['gamma']}: {1e3 * r['wviz'] / max(r['iters'], 1):.3f} ms per iteration over "
                       f"{r['iters']} iterations" for r in rows)
    if not rows:
        return ["- 16 problems of 64 x 64 at once at least 8x sixteen POT calls: not measured."]
    n = rows[0]["n"]
    return [f"- 16 problems of {n} x {n} at once at least 8x sixteen POT calls: {_mark(not miss)}, "
            f"{len(rows) - len(miss)} of {len(rows)} gammas" + (f" (missed at {'; '.join(miss)})" if miss else "")
            + f". Limit: {per_it}; the GPU's own loop (route=False): {_limit(limits, f'{GPU_LOOP} 16 x')}."]


def means_goals(limits) -> list[str]:
    solves = [r for r in limits if r["name"].startswith(f"{GPU_LOOP} n =") and r["kernels"] is not None]
    if not solves:
        return ["- The means (CUDA graphs; no host synchronisation inside the loop): not measured (no profiler)."]
    graphs = sum(r["graphs"] for r in solves)
    syncs = ", ".join(f"{r['syncs']} at {r['name'].split(', ', 1)[1]}" for r in solves)
    grow = solves[-1]["syncs"] - solves[0]["syncs"]
    return [f"- CUDA graphs for the fixed-size iteration: {_mark(graphs > 0)} ({graphs} graph launches over "
            f"{len(solves)} single-problem solves kept on the GPU, route=False).",
            f"- No host synchronisation inside the loop: {_mark(grow <= 2)} (host synchronisations per solve: {syncs}; "
            "met when a smaller gamma, with its many more iterations, adds at most 2)."]


def models_goals(model_rows_, vit_rows_) -> list[str]:
    """GPU ratio swapped / eager at most 1.25x the CPU's in the same run, per model and normaliser."""
    cpu = {r["model"]: r["times"] for r in model_rows_ if r["device"] == "cpu"}
    miss, cells = [], 0
    for r in model_rows_:
        if r["device"] == "cpu" or r["model"] not in cpu:
            continue
        for k in SWAPS:
            gpu_ratio, cpu_ratio = r["times"][k] / r["times"]["eager"], cpu[r["model"]][k] / cpu[r["model"]]["eager"]
            cells += 1
            if not gpu_ratio <= 1.25 * cpu_ratio:
                miss.append(f"{r['model']} {k}: {gpu_ratio:.2f} on the GPU, {cpu_ratio:.2f} on the CPU")
    verdict = (f"{_mark(not miss)}, {cells - len(miss)} of {cells}" + (f" (missed at {'; '.join(miss)})" if miss
                                                                       else "") if cells else "not measured (no GPU)")
    lines = [f"- Models (random weights, one sentence): swapped / eager forward on the GPU within 1.25x of the same "
             f"ratio on the CPU: {verdict}. Limit: the normaliser alone x the layers, in the table."]
    amp = [r for r in vit_rows_ if r["amp"] != "off"] or vit_rows_[:1]
    if amp:
        r = amp[0]
        lines.append(f"- The stochastic ViT's training with AMP ({r['amp']}) for one epoch, its loss finite: "
                     f"{_mark(r['finite'])} ({r['seconds']:.1f} s, {r['images'] / max(r['seconds'], 1e-9):.0f} "
                     "images / s).")
    return lines


# ---- the run --------------------------------------------------------------------------------------------------------

def machine(threads: int, device) -> str:
    card = f"GPU {torch.cuda.get_device_name()}" if device.type == "cuda" else "no GPU (dry run on the CPU)"
    return (f"{card}, host {cpu_name()} ({os.cpu_count()} cores, {threads} thread(s) for torch and numpy's BLAS), "
            f"torch {torch.__version__} (CUDA {torch.version.cuda})")


def _attempt(m: dict, key: str, fn, default):
    """m[key] = fn(), or ``default`` with the error kept in m["errors"]: one failing table must not cost the others
    (the GPU machine gives one run)."""
    try:
        m[key] = fn()
    except (Exception, SystemExit) as err:   # SystemExit: python -m wviz.vit.train's way of refusing its options
        traceback.print_exc()
        m["errors"][key] = f"{type(err).__name__}: {err}"
        m[key] = default


def _cpu_models(sizes: Sizes) -> list[dict]:
    """The models' CPU rows, on every core of the host: the ratios the GPU's are compared with."""
    saved = torch.get_num_threads()
    torch.set_num_threads(os.cpu_count() or 1)
    try:
        return model_rows(torch.device("cpu"), sizes.models, sizes.tokens, repeats=3)
    finally:
        torch.set_num_threads(saved)


def _grid(device, sizes: Sizes) -> list[dict]:
    saved, bench_ot.POT_BUDGET_S = bench_ot.POT_BUDGET_S, POT_BUDGET_S
    try:
        return bench_ot.bench_grid(sizes=sizes.grid, gammas=sizes.gammas, device=device)
    finally:
        bench_ot.POT_BUDGET_S = saved


def _measure(device, sizes: Sizes) -> dict:
    """Every table's rows, in the order the section prints them."""
    m = {"errors": {}}
    _attempt(m, "att", lambda: bench_attention.run(devices=[device], sizes=list(sizes.attention)), [])
    _attempt(m, "grid", lambda: _grid(device, sizes), [])
    _attempt(m, "batched", lambda: bench_ot.bench_batched(n_list=sizes.batched, gammas=sizes.gammas, device=device), [])
    _attempt(m, "inter", lambda: bench_ot.bench_interactive(n_list=sizes.interactive, device=device), [])
    _attempt(m, "inter_cpu", lambda: bench_ot.bench_interactive(n_list=sizes.interactive[:1], device="cpu"), [])
    _attempt(m, "gauss", lambda: gaussian_rows(device, n=sizes.gauss_n), "")
    _attempt(m, "vit", lambda: vit_rows(device), "")
    _attempt(m, "vit_train", lambda: vit_training(device, sizes.vit_limit), [])
    _attempt(m, "models", lambda: model_rows(device, sizes.models, sizes.tokens, repeats=11), [])
    if device.type == "cuda":
        _attempt(m, "models_cpu", lambda: _cpu_models(sizes), [])
        m["models"] += m.pop("models_cpu")
    # last: the profiler's start-up must not sit inside any table's timings
    _attempt(m, "cost", lambda: launch_costs(device), {"launch": math.nan, "sync": math.nan})
    _attempt(m, "limits", lambda: counts(limit_cases(device, sizes), device, m["cost"]), [])
    return m


def section(m: dict, mach: str, wall: float, card: str) -> str:
    goals = (sparse_goals(m["att"], m["limits"]) + sinkhorn_goals(m["grid"], m["inter"], m["inter_cpu"], m["limits"])
             + batched_goal(m["batched"], m["limits"]) + means_goals(m["limits"])
             + models_goals(m["models"], m["vit_train"]))
    return (f"Machine: {mach}. Produced by `python -m bench gpu` (`bench/bench_gpu.py`, {wall:.0f} s wall time); each "
            "table is measured as its CPU section describes, with every CUDA call synchronised before the clock "
            f"stops. POT variants are capped at {POT_BUDGET_S:g} s per run here.\n\n"
            f"### Goals, as measured in this run ({card})\n\n" + "\n".join(goals) + "\n\n"
            + "".join(f"**{k} failed**: {v} (bench.log has the traceback).\n\n" for k, v in m["errors"].items())
            + f"### Limits: launches and synchronisations ({card})\n\n{counts_table(m['limits'], m['cost'])}\n\n"
            f"### Attention maps, float32 on CUDA\n\n{bench_attention.table(m['att'])}\n\n"
            "### OT engine: Sinkhorn, float64, stopped at L1 marginal error <= 1e-6\n\n"
            "wviz and POT's torch variants on CUDA tensors; POT's numpy variants on the host CPU.\n\n"
            f"{bench_ot.grid_table(m['grid'])}\n\n"
            "### OT engine: 16 problems at once on CUDA against 16 sequential POT (numpy) calls\n\n"
            f"{bench_ot.batched_table(m['batched'])}\n\n"
            "### OT engine: interactive recompute, gamma = 0.01, float32 (the GPU, then the host CPU)\n\n"
            f"{bench_ot.interactive_table(m['inter'] + m['inter_cpu'])}\n\n"
            f"### Gaussian W2 on CUDA\n\n{m['gauss']}\n\n"
            f"### Stochastic ViT on CUDA (bundled digits models)\n\n{m['vit']}\n\n"
            f"### Stochastic ViT: one epoch of training on digits\n\n{vit_training_table(m['vit_train'])}\n\n"
            "### Models: swapped normalisers against the eager forward (random weights; GPU rows, then the host "
            f"CPU's on every core)\n\n{models_table(m['models'])}\n\n{NOTES}")


def main(write: bool = True) -> str:
    dry = os.environ.get("WVIZ_BENCH_GPU_DRY") == "1"
    if not torch.cuda.is_available() and not dry:
        print(f"{SECTION}: no CUDA device here, nothing measured (BENCHMARKS.md keeps its last GPU run)")
        return ""
    device, sizes = (torch.device("cpu"), DRY) if dry else (torch.device("cuda"), Sizes())
    card = torch.cuda.get_device_name() if device.type == "cuda" else "dry run on the CPU"
    t0 = time.perf_counter()
    with bench_threads() as threads:
        print(f"{SECTION}\nmachine: {machine(threads, device)}", flush=True)
        m = _measure(device, sizes)
    body = section(m, machine(threads, device), time.perf_counter() - t0, card)
    print(body, flush=True)
    if write and os.environ.get("WVIZ_GPU_SECTION"):
        Path(os.environ["WVIZ_GPU_SECTION"]).write_text(f"{SECTION}\n\n{body.strip()}\n")
    if write and not dry:
        write_section(SECTION, body)
    return body


NOTES = """What the GPU tables say (read with the limits table of the same run):

- At these sizes the GPU work takes less time than launching it: a call that launches K kernels and synchronises
  S times cannot take less than K launches plus S round trips, the floor in the limits table. wviz's sparse maps
  launch more kernels than the entmax package (a float64 threshold, and the check that refuses NaN / +inf / all
  -inf rows, which ends in a host synchronisation).
- OT: a problem of at most 2^18 entries on CUDA tensors is solved on the host CPU (wviz.ot.CPU_ROUTE_SIZE; the
  tables mark those cells "solved on the CPU"): there every GPU variant is launch-bound, each iteration a few
  kernels of microseconds, and the host's one thread is faster. The limits table also measures the GPU's own loop
  on those problems (route=False): on CUDA it checks convergence every few iterations, each check a host
  synchronisation, which the table counts. A routed solve cannot be faster than the host CPU's own solve (the
  interactive table's cpu row) plus the copies to and from the GPU (the synchronisations of the limits table's
  routed rows are those copies): there the limit is the host's one thread.
- CUDA graphs (wviz.ot.graphs): each solve captures its own graphs, one per (steps between checks, plain or
  over-relaxed); a capture runs its iterations once and records them, and every later check interval is one graph
  launch (the route=False rows: launches against graph launches). A solve of many check intervals gains (the
  grid's small gammas); one of a single interval or two pays the capture without replaying it (the grid's
  gamma = 0.05 cells).
- The torch on that machine is its image's (2.11 + CUDA 13.0), not the pinned 2.13.0: the machine has no
  network, and the CUDA build of 2.13.0 is several GB.
"""


if __name__ == "__main__":
    main()
