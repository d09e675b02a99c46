"""Latency in a real browser: slider move -> chart updated, per page, against that page's main figure drawn alone.

Three servers run side by side: the app (app.py), bench/floor_app.py (one slider, one small bar chart, no work)
and bench/main_figure_app.py (per page, ``?page=<stem>``: the page's main figure alone, built by its own views and
figures functions at the page's defaults, under a slider with the page's key and option grid).
Debian's chromium (Playwright) moves one sidebar slider per page by keyboard, one step at a time, alternating
right and left, and times keypress -> the browser's Plotly data differs from before (polled every animation
frame). After each change it waits for the run to end, so moves never overlap. A page and its reference are open
in two browsers that take turns, move by move. p50 and p95 per page at the default sizes; the goal is the
page's p50 within 1.25x of its main figure's alone. Writes "## Slider latency in the browser" of
BENCHMARKS.md.

    python -m bench latency                                       every page; writes BENCHMARKS.md
    python -m bench.bench_latency attention_transport particles   these pages only; prints, writes nothing
    python -m bench.bench_latency "transport_plans?view=Mass+moved"   a page opened with these URL parameters (its
                                                                      reference with those its at_defaults takes)
"""
from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

from bench.common import cpu_name, slider_pages, write_section
from tests.e2e.harness import launch_browser, running_app, wait_until_idle

SECTION = "## Slider latency in the browser"
GOAL = 1.25   # the goal: a page's p50 at most this many times its main figure's p50 alone
MOVES, WARMUP = 30, 3
# The Plotly data of every chart, as a string that changes when any of it does. A long array (a heatmap's z, a
# typed array Plotly decoded) is written as its length and a position-weighted sum: JSON.stringify writes a
# Float32Array of n numbers as an object of n keys, which at 500 tokens (four 500 x 500 maps) took the page's main
# thread hundreds of ms per animation frame polled and slowed the move it was timing.
SNAPSHOT = ("() => JSON.stringify(Array.from(document.querySelectorAll('.js-plotly-plot')).map(gd => gd.data || []),"
            " (k, v) => { if (!(ArrayBuffer.isView(v) || (Array.isArray(v) && v.length > 64))) return v;"
            " let s = 0; const add = (x, i) => { if (Array.isArray(x) || ArrayBuffer.isView(x))"
            " { for (let j = 0; j < x.length; j++) add(x[j], j); } else if (typeof x === 'string')"
            " { for (let j = 0; j < x.length; j++) s += x.charCodeAt(j) * (i % 97 + 1); }"
            " else { s += (Number(x) || 0) * (i % 97 + 1); } };"
            " add(v, 0); return `[${v.length}:${s}]`; })")
HERE = Path(__file__).parent


NOTES = """What the columns mean. "figure alone" is the page's main figure drawn by itself (bench/main_figure_app.py):
the first figure the page's main slider redraws (its key in "main figure"), built by the page's own
wviz.figures function from its wviz.views result at the page's default inputs, under a slider with the page's
key and option grid, with nothing else on the page. Its views results are cached, so a move there costs
Streamlit's rerun, building and sending that one figure, and the browser's drawing of it: what the page cannot
do without while it shows that figure. "page / figure alone" is then what the page adds on top: its own
computation, the other figures the slider redraws and the secondary view drawn, tables, equations, export
menus and the share link. The goal is at most 1.25. "figure alone / floor" is the cost of drawing the
figure itself against Streamlit's floor (one slider, one small bar chart): a 40 x 30 heatmap with its marginals
as bars (transport_plans) is about 2.2x, whatever the library, which is why the goal is per page and not
against the floor. A page and its reference take turns move by move, each in a browser of its own, so that a
change of load on this shared machine hits both alike.

Where the time goes. Frame timings (the page's websocket) and Chrome's profiler show the server's answer
reaching the browser well before the chart changes. In between, the browser's main thread is busy: Plotly
relays out and redraws each changed figure (forced layouts, SVG attribute writes), and Streamlit re-renders its
elements: every element of the page on every run, a fragment's included (an element's rendering depends on the
run), so a page also pays for the elements outside its slider's fragment. The browser is headless chromium
drawing in software on the same 2 cores as the server.

Four settings cut the time of every move, and a fifth change is less work:
- `.streamlit/config.toml` turns off the file watcher.
- `wviz.ui.freeze_imports` keeps the libraries' objects out of the gc.collect() that Streamlit runs after
  each rerun. With torch loaded, that collection held the GIL for 130-160 ms. The floor and the references get
  the same garbage-collector set-up, so the ratios compare like with like.
- The script that fits display equations to their column (`wviz.ui.style`) takes sizes from a ResizeObserver.
  Reading each column's width after every change to the page forced a layout in the middle of Plotly's redraw,
  10-17 ms a move in Chrome's profiler of WSA; a move that changes no equation now reads no layout.
- One torch thread on this 2-core machine (`wviz.ui.process.torch_threads`: a core is left to the browser and
  the other sessions). With 2 threads, MKL runs even a 2 x 2 Cholesky on both and waits for a core: called from
  a new thread (Streamlit starts one per run) while another process kept a core busy, it took 0.4-8 ms a call,
  against 0.02 ms on one thread. The Fenchel page's solve (about six such calls) took a median 34 ms a move in the
  server instead of 12 (8 moves each).
- A fragment run draws the share link once, at its end (before 2026-11-26 also after its first figure when the
  URL had changed); it also drew it at its start, one more message before the figures. Measured with one torch
  thread, 40 moves each, taking turns with the reference: Fenchel 1.12 with the first copy, 1.00 without;
  Attention 1.02 and 1.11, inside the spread of runs. Kept for being less work, not for a measured gain."""


class Slider:
    """A browser tab open on ``url``, whose slider ``key`` is moved by keyboard."""

    def __init__(self, browser, url: str, key: str):
        self.page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self.page.goto(url)
        wait_until_idle(self.page)
        self.page.wait_for_selector(".js-plotly-plot", timeout=60_000)
        self.thumb = self.page.locator(f".st-key-{key}").get_by_role("slider")

    def move(self, right: bool) -> float:
        """Milliseconds from one keypress to the changed chart; returns once the run has ended."""
        self.thumb.focus()
        before = self.page.evaluate(SNAPSHOT)
        t0 = time.perf_counter()
        self.thumb.press("ArrowRight" if right else "ArrowLeft")
        self.page.wait_for_function(f"(before) => ({SNAPSHOT})() !== before", arg=before, polling="raf",
                                    timeout=60_000)
        ms = (time.perf_counter() - t0) * 1e3
        wait_until_idle(self.page)
        return ms

    def close(self):
        self.page.close()


def measure(tabs: list[Slider], moves: int = MOVES) -> list[list[float]]:
    """Each tab's milliseconds per move, the tabs taking turns move by move (so that a change of load on this
    shared machine hits them alike), after WARMUP moves each."""
    times = [[] for _ in tabs]
    for i in range(moves + WARMUP):
        for tab, ms in zip(tabs, times):
            t = tab.move(right=i % 2 == 0)
            if i >= WARMUP:
                ms.append(t)
    return times


def machine() -> str:
    """This machine, as the tables are read: CPU model, core count, and whether a GPU was there (the server runs on
    the CPU either way: the harness sets WVIZ_DEVICE=cpu)."""
    import torch

    gpu = f"GPU {torch.cuda.get_device_name()} present (unused: the server runs with WVIZ_DEVICE=cpu)" \
        if torch.cuda.is_available() else "no GPU"
    return f"{cpu_name()}, {os.cpu_count()} cores, {gpu}"


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def run(pages: dict[str, str]) -> list[dict]:
    """The floor's row, then one row per page: its moves and its main figure's moves alone, taking turns."""
    from playwright.sync_api import sync_playwright

    from wviz.registry import BY_STEM

    with running_app() as app, running_app(HERE / "floor_app.py") as floor, \
            running_app(HERE / "main_figure_app.py") as alone, sync_playwright() as pw:
        # page and reference in browsers of their own: each tab always in front, in its own renderer process (two
        # tabs of one browser: the one behind is reniced and gets its animation frames once a second)
        browsers = [launch_browser(pw), launch_browser(pw)]
        floor_tab = Slider(browsers[0], floor, "x")
        rows = [{"page": "floor (one slider, one small bar chart)", "key": "x", "figure": "floor",
                 "ms": measure([floor_tab])[0]}]
        floor_tab.close()
        for path, key in pages.items():
            stem, _, query = path.partition("?")
            reference = f"{alone}/?page={stem}" + (f"&{query}" if query else "")   # the page's inputs, if it takes them
            tabs = [Slider(browsers[0], f"{app}/{path}", key), Slider(browsers[1], reference, key)]
            row = {"page": path, "key": key, "figure": BY_STEM[stem].figure}
            row["ms"], row["alone"] = measure(tabs)
            for tab in tabs:
                tab.close()
            rows.append(row)
            print(f"{path}: p50 {pct(row['ms'], 50):.0f} ms, its figure alone {pct(row['alone'], 50):.0f} ms",
                  flush=True)
        for browser in browsers:
            browser.close()
    floor_p50 = pct(rows[0]["ms"], 50)
    for r in rows:
        r.update(p50=pct(r["ms"], 50), p95=pct(r["ms"], 95))
        if "alone" in r:
            r.update(alone_p50=pct(r["alone"], 50), ratio=r["p50"] / pct(r["alone"], 50),
                     alone_floor=pct(r["alone"], 50) / floor_p50)
    return rows


def table(rows: list[dict]) -> str:
    out = [(f"| page | slider | main figure | p50 ms | p95 ms | figure alone p50 ms | page / figure alone "
            f"| goal <= {GOAL} | figure alone / floor |"), "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "alone" not in r:
            out.append(f"| {r['page']} | {r['key']} | {r['figure']} | {r['p50']:.0f} | {r['p95']:.0f} | - | - | - "
                       f"| 1.00 |")
            continue
        met = "met" if r["ratio"] <= GOAL else "**missed**"
        out.append(f"| {r['page']} | {r['key']} | {r['figure']} | {r['p50']:.0f} | {r['p95']:.0f} "
                   f"| {r['alone_p50']:.0f} | {r['ratio']:.2f} | {met} | {r['alone_floor']:.2f} |")
    return "\n".join(out)


def main(only: list[str] | None = None, write: bool | None = None) -> str:
    """Every page (wviz.registry), or only those named (each may carry URL
    parameters after a "?"); the table goes to BENCHMARKS.md when every page ran (``write`` overrides)."""
    keys = slider_pages([o.split("?")[0] for o in only] if only else None)
    pages = {o: keys[o.split("?")[0]] for o in only} if only else keys
    write = not only if write is None else write
    t0 = time.time()
    tab = table(run(pages))
    print(tab)
    if write:
        write_section(SECTION, f"Machine: {machine()}; Debian chromium (Playwright), server and "
                      f"browser on the same machine. Produced by `make bench` (`bench/bench_latency.py`, "
                      f"{time.time() - t0:.0f} s); {MOVES} moves per page and per reference after {WARMUP} "
                      f"warm-up moves.\n\n{tab}\n\n{NOTES}")
    return tab


if __name__ == "__main__":
    main(sys.argv[1:])
