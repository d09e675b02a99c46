"""Your model under the lens: what a swapped normaliser costs against the model's own eager forward, and what a
loaded model costs in memory.

Speed. The bundled all-MiniLM-L6-v2 at 128 and 512 tokens (the bundled corpus's word pieces) and a BERT-base-sized
encoder with random weights (BertConfig's defaults: 12 layers, 12 heads, hidden size 768, 110M parameters; random
token ids) at 512 tokens: the model's forward with every head normalised by wviz (wviz.models.swap: softmax / tau at
tau = 0.5, sparsemax, entmax 1.5, Sinkhorn with 5 iterations) against the same weights' forward with transformers'
eager attention, median wall time over repeats, the variants taking turns within each repeat, on
WVIZ_BENCH_THREADS threads (default 1). Goals: softmax / tau <= 1.1x, sparsemax and entmax <= 1.5x the eager
forward. The last column is wviz.models.lens.forward with softmax / tau, the whole notebook call (tokens in, every
layer's maps stacked), against the same eager forward.

Memory. A fresh process, as a replica holding two user models: its resident memory after importing torch,
transformers and wviz.models, then for each of two 110M-parameter BERT-base folders (different random weights, saved
with save_pretrained) after loading it through wviz.models.hub.load, with the maps of one 512-token forward through
wviz.models.lens.forward kept, and after dropping them; and at its peak.

``python -m bench.bench_models`` rewrites the section "## Your model under the lens" of BENCHMARKS.md;
``python -m bench.bench_models --print`` prints the tables only.
"""
from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from bench.common import bench_threads, cpu_name, median_ms, write_section

SECTION = "## Your model under the lens"
SWAPS = {"softmax / tau": ("softmax", {"tau": 0.5}), "sparsemax": ("sparsemax", {}),
         "entmax 1.5": ("entmax", {"alpha": 1.5}), "sinkhorn (5 it)": ("sinkhorn", {"n_iter": 5})}
GOALS = {"softmax / tau": 1.1, "sparsemax": 1.5, "entmax 1.5": 1.5}
CASES = (("all-MiniLM-L6-v2", 128, 21), ("all-MiniLM-L6-v2", 512, 7), ("BERT-base size, random weights", 512, 5))


def _models(name: str):
    """(eager, lens): the model with transformers' eager attention, and the same weights as a wviz Lens."""
    from transformers import AutoModel, BertConfig, BertModel

    from wviz.models import hub
    from wviz.models.swap import register

    register()
    if name == "all-MiniLM-L6-v2":
        lens = hub.load(None, "cpu")
        eager = AutoModel.from_pretrained(hub.bundled_dir(), local_files_only=True, attn_implementation="eager")
        return eager.eval(), lens
    torch.manual_seed(0)
    eager = BertModel(BertConfig(), add_pooling_layer=False).eval()
    eager.set_attn_implementation("eager")
    swapped = copy.deepcopy(eager)
    swapped.set_attn_implementation("wviz")
    info = hub.ModelInfo(name=name, path="", family="encoder", model_type="bert",
                         parameters=sum(p.numel() for p in eager.parameters()), key="bench")
    return eager, hub.Lens(info, swapped, tokenizer=hub.load(None, "cpu").tokenizer)


def _ids(name: str, tokens: int, tokenizer) -> torch.Tensor:
    """(1, tokens) ids: [CLS], the bundled corpus's word pieces, [SEP] for MiniLM; random ids for random weights."""
    from wviz.models.corpus import CORPUS

    if name != "all-MiniLM-L6-v2":
        return torch.randint(1000, 30522, (1, tokens), generator=torch.Generator().manual_seed(0))
    pieces = tokenizer(" ".join(CORPUS * 4), add_special_tokens=False)["input_ids"][:tokens - 2]
    return torch.tensor([[tokenizer.cls_token_id, *pieces, tokenizer.sep_token_id]])


@torch.inference_mode()
def run(cases=CASES, log=print) -> list[dict]:
    """Time each case: the eager forward, the forward under each swap, and lens.forward under softmax / tau."""
    from wviz.models import lens as lenses
    from wviz.models.normalisers import make_normaliser
    from wviz.models.swap import swapped

    rows = []
    for name, tokens, repeats in cases:
        eager, lens = _models(name)
        ids = _ids(name, tokens, lens.tokenizer)
        text = lens.tokenizer.decode(ids[0, 1:-1]) if name == "all-MiniLM-L6-v2" else None
        norms = {label: make_normaliser(kind, **p) for label, (kind, p) in SWAPS.items()}

        def under(norm):
            with swapped(norm, details=False):
                return lens.model(input_ids=ids).last_hidden_state

        fns = {"eager": lambda: eager(input_ids=ids).last_hidden_state}
        fns |= {label: (lambda n=n: under(n)) for label, n in norms.items()}
        if text is not None:
            fns["lens.forward"] = lambda: lenses.forward(lens, text, "softmax", tau=0.5, max_tokens=512)
        t = median_ms(fns, repeats)
        diff = float((fns["eager"]() - under(make_normaliser("softmax"))).abs().max())
        rows.append(dict(model=name, tokens=tokens, times=t, diff=diff))
        log(f"  {name} at {tokens} tokens: eager {t['eager']:.0f} ms, "
            + ", ".join(f"{k} {v / t['eager']:.2f}x" for k, v in t.items() if k != "eager"), flush=True)
    return rows


def table(rows: list[dict]) -> str:
    """Markdown: eager ms, then each swap as a ratio to it (**bold** where it meets its goal, a cross where not)."""
    labels = list(SWAPS) + ["lens.forward"]
    head = ("| model | tokens | eager ms | " + " | ".join(f"{k} / eager" for k in labels)
            + " | max abs diff at tau = 1 |")
    lines = [head, "|---" * (head.count("|") - 1) + "|"]
    for r in rows:
        t = r["times"]
        cells = []
        for k in labels:
            if k not in t:
                cells.append("-")
                continue
            ratio = t[k] / t["eager"]
            goal = GOALS.get(k)
            cells.append(f"{ratio:.2f}" if goal is None else (f"**{ratio:.2f}**" if ratio <= goal else
                                                              f"{ratio:.2f} (goal {goal})"))
        lines.append(f"| {r['model']} | {r['tokens']} | {t['eager']:.0f} | " + " | ".join(cells)
                     + f" | {r['diff']:.1e} |")
    return "\n".join(lines)


_MEMORY = r"""
import gc, json, resource, sys
def status():
    out = {}
    for line in open("/proc/self/status"):
        key = line.split(":")[0]
        if key in ("VmRSS", "RssAnon", "RssFile"):
            out[key] = int(line.split()[1]) / 1024
    return out
import torch, transformers
from wviz.models import hub, lens
torch.set_num_threads(1)
marks = {"torch, transformers, wviz.models imported": status()}
models = []  # kept, as a replica keeps its loaded models
for i, folder in enumerate(sys.argv[1:], 1):
    models.append(hub.load(folder, "cpu"))
    marks[f"model {i} loaded (weights mapped, not yet read)"] = status()
    fwd = lens.forward(models[-1], "cat " * 510, max_tokens=512, details=False)
    marks[f"model {i}: a 512-token forward's maps kept"] = status()
    del fwd
    gc.collect()
    marks[f"model {i}: forward dropped, {i} model{'s' * (i > 1)} held"] = status()
marks["peak"] = {"VmRSS": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
print(json.dumps(marks))
"""


def memory() -> dict:
    """RSS marks (MB) of a fresh process loading two random 110M-parameter BERT-base folders, each with its own
    weights (module docstring)."""
    from transformers import BertConfig, BertModel

    from wviz.models import hub

    root = Path(tempfile.mkdtemp(prefix="wviz-bench-"))
    try:
        folders = [root / f"bert-base-random-{seed}" for seed in (0, 1)]
        for seed, folder in enumerate(folders):
            torch.manual_seed(seed)  # different weights: nothing shared between the two models' files
            BertModel(BertConfig()).save_pretrained(folder)
            for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
                shutil.copy(Path(hub.bundled_dir()) / name, folder / name)
        params = hub.describe(folders[0]).parameters
        env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
        out = subprocess.run([sys.executable, "-c", _MEMORY, *map(str, folders)], capture_output=True, text=True,
                             env=env, check=True)
        return {"parameters": params, "marks": json.loads(out.stdout.strip().splitlines()[-1])}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def memory_table(mem: dict) -> str:
    lines = ["| process | RSS MB | anonymous MB | file-backed MB |", "|---|---|---|---|"]
    for mark, s in mem["marks"].items():
        cells = [f"{s[k]:.0f}" if k in s else "-" for k in ("VmRSS", "RssAnon", "RssFile")]
        lines.append(f"| {mark} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def memory_summary(mem: dict) -> str:
    """One sentence: what the first model costs the process once it has run, and what the second adds."""
    rss = [s["VmRSS"] for s in mem["marks"].values()]
    first, second = rss[3] - rss[0], rss[6] - rss[3]  # marks: imported, then 3 per model (module docstring)
    return (f"A {mem['parameters'] / 1e6:.0f}M-parameter model costs a process {first:.0f} MB once it has run, and "
            f"a second one adds {second:.0f} MB (the float32 weights of each are {4 * mem['parameters'] / 2 ** 20:.0f}"
            " MB, memory-mapped from the safetensors file: file-backed pages that processes loading the same folder "
            "share), plus what a forward keeps while it is shown.")


def main(write: bool | None = None) -> str:
    write = "--print" not in sys.argv[1:] if write is None else write
    with bench_threads() as threads:
        machine = f"{cpu_name()}, {os.cpu_count()} cores, torch {torch.__version__} ({threads} thread(s))"
        print(f"{SECTION}\nmachine: {machine}", flush=True)
        tab = table(run())
    mem = memory()
    mtab = memory_table(mem)
    summary = memory_summary(mem)
    print(tab + "\n\n" + mtab + "\n\n" + summary)
    if write:
        body = (f"Machine: {machine}. Produced by `make bench` (`bench/bench_models.py`): the model's forward with "
                "every head's normaliser swapped against the same weights' eager forward (transformers 5, "
                "attn_implementation='eager'), median wall time, the variants taking turns within each repeat; "
                "ratios > 1 are slower than eager. Goals: softmax / tau <= 1.1x, sparsemax and entmax <= 1.5x "
                "(bold: met). lens.forward is the whole notebook call (tokenizer, forward, every layer's maps "
                "stacked). Max abs diff: the last hidden states of wviz's softmax at tau = 1 against eager.\n\n"
                f"{tab}\n\nMemory of one process as a replica holding two user models (two random BERT-base folders "
                "loaded one after the other with wviz.models.hub.load and kept, each followed by one 512-token "
                f"forward through wviz.models.lens.forward):\n\n{mtab}\n\n{summary}")
        write_section(SECTION, body)
    return tab


if __name__ == "__main__":
    main()
