"""What every benchmark shares: timing by turns, the CPU's name for the tables, a server process's CPU time and
memory, and writing one's own section of BENCHMARKS.md."""
from __future__ import annotations

import os
import platform
import re
import statistics
import time
from contextlib import contextmanager
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "BENCHMARKS.md"


def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo (platform.processor() is often empty on Linux)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def slider_pages(only: list[str] | None = None) -> dict[str, str]:
    """page url path -> its main slider's key, in the app's order (wviz.registry): every page, or those in ``only``
    (SystemExit naming the choices when one of them is not a page)."""
    from wviz.registry import PAGES

    pages = {page.stem: page.slider for page in PAGES}
    unknown = sorted(set(only or ()) - set(pages))
    if unknown:
        raise SystemExit(f"no such page: {', '.join(unknown)}; choose from {', '.join(pages)}")
    return {p: k for p, k in pages.items() if not only or p in only}


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system, every thread) that process ``pid`` has used so far, from /proc/<pid>/stat."""
    # The fields after the command name, which is in parentheses and may hold spaces; utime and stime are the
    # 14th and 15th fields of the line, in clock ticks.
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    """Resident memory of process ``pid`` in MB, from /proc/<pid>/status."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


@contextmanager
def bench_threads():
    """While a benchmark runs: WVIZ_BENCH_THREADS threads (default 1: the machine is shared) for torch and numpy's
    BLAS alike, so that every library in a table gets the same count; yields that count, restores torch's after."""
    import torch
    from threadpoolctl import threadpool_limits

    threads = int(os.environ.get("WVIZ_BENCH_THREADS", "1"))
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with threadpool_limits(threads):
            yield threads
    finally:
        torch.set_num_threads(saved)


def write_section(section: str, body: str, path: Path = BENCHMARKS) -> None:
    """Add or replace the section headed ``section`` ('## ...') of BENCHMARKS.md, leaving the others alone."""
    text = path.read_text() if path.exists() else "# wviz benchmarks\n"
    block = f"{section}\n\n{body.strip()}\n"
    pattern = re.compile(rf"^{re.escape(section)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: block + "\n", text).rstrip() + "\n"
    else:
        text = text.rstrip() + "\n\n" + block
    path.write_text(text)


def median_ms(fns: dict, repeats: int, device=None) -> dict:
    """Median wall time in ms of each function, after one warm-up call each. The functions take turns within
    every repeat, so that a change of load on a shared machine hits all of them alike; on a CUDA ``device`` each
    call is synchronised before the clock stops."""
    import torch

    def sync():
        if device is not None and torch.device(device).type == "cuda":
            torch.cuda.synchronize(device)

    for fn in fns.values():
        fn()
    sync()
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            sync()
            times[name].append(time.perf_counter() - t0)
    return {name: 1e3 * statistics.median(t) for name, t in times.items()}
