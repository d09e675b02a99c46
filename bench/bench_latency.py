"""Latency in a real browser: slider move -> chart updated, per page, against Streamlit's own floor.

Three servers run side by side: the app (app.py), bench/floor_app.py (one slider, one bar chart, no work) and
bench/plan_figure_app.py (the same slider driving the Transport plans page's plan figure alone: what drawing
that one figure adds).
Debian's chromium (Playwright) moves one sidebar slider per page by keyboard, one step at a time, alternating
right and left, and times keypress -> the browser's Plotly data differs from before (polled every animation
frame). After each change it waits for the run to end, so moves never overlap. p50 and p95 per page at the
default sizes, and p50 as a ratio to the floor's p50 measured in the same run. Writes "## Slider latency in the
browser (issue 8)" of BENCHMARKS.md.
"""
from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

from bench.common import cpu_name, write_section
from tests.e2e.harness import SLIDERS, launch_browser, running_app, wait_until_idle

SECTION = "## Slider latency in the browser (issue 8)"
GOAL = 1.5
MOVES, WARMUP = 30, 3
SNAPSHOT = ("() => JSON.stringify(Array.from(document.querySelectorAll('.js-plotly-plot'))"
            ".map(gd => gd.data || []))")


NOTES = """Where the time goes. The reference row is the Transport plans page's plan figure alone: a 40 x 30 heatmap
with the marginals as bars, drawn from a random matrix, with nothing else on the page. Drawing it already
takes 2.2x the floor, more than the whole 1.5x budget. Most pages' main figures are heatmaps or grids of
subplots of this kind.
Frame timings (the page's websocket) and Chrome's profiler show the server's answer reaching the browser
well before the chart changes. In between, the browser's main thread is busy: Plotly relays out and redraws
each changed figure (forced layouts, SVG attribute writes), and Streamlit re-renders its elements. The
browser is headless chromium drawing in software on the same 2 cores as the server.

Two server settings cut the time of every move:
- `.streamlit/config.toml` turns off the file watcher.
- `wviz.ui.freeze_imports` keeps the libraries' objects out of the gc.collect() that Streamlit runs after
  each rerun. With torch loaded, that collection held the GIL for 130-160 ms.

This run followed the change of every page to ui.live / ui.views (issue 15). Against the run before it
(floor 81 ms), six pages' p50 moved by 4-25 ms either way, within the 10-30 % that single runs move on this
shared machine; particles fell from 387 to 227 ms and real_transformer from 314 to 257 ms, which this run
does not explain (a move reruns the same figures as before). The floor gets the same garbage-collector set-up,
so the ratios compare like with like; they rose where the floor fell by more than the page."""


def measure(page, url: str, key: str, moves: int = MOVES) -> list[float]:
    """Milliseconds from each keypress on slider ``key`` to the changed chart."""
    page.goto(url)
    wait_until_idle(page)
    page.wait_for_selector(".js-plotly-plot", timeout=60_000)
    thumb = page.locator(f".st-key-{key}").get_by_role("slider")
    thumb.focus()
    times = []
    for i in range(moves + WARMUP):
        before = page.evaluate(SNAPSHOT)
        t0 = time.perf_counter()
        thumb.press("ArrowRight" if i % 2 == 0 else "ArrowLeft")
        page.wait_for_function(f"(before) => ({SNAPSHOT})() !== before", arg=before, polling="raf",
                               timeout=60_000)
        ms = (time.perf_counter() - t0) * 1e3
        wait_until_idle(page)
        if i >= WARMUP:
            times.append(ms)
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
    from playwright.sync_api import sync_playwright

    rows = []
    here = Path(__file__).parent
    with running_app() as app, running_app(here / "floor_app.py") as floor, \
            running_app(here / "plan_figure_app.py") as plan, sync_playwright() as pw:
        browser = launch_browser(pw)
        page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
        floor_ms = measure(page, floor, "x")
        rows.append(dict(page="floor (one slider, one chart)", ms=floor_ms))
        rows.append(dict(page="reference: Transport plans' plan figure alone", ms=measure(page, plan, "x")))
        for path, key in pages.items():
            rows.append(dict(page=path, ms=measure(page, f"{app}/{path}", key)))
            print(f"{path}: p50 {pct(rows[-1]['ms'], 50):.0f} ms", flush=True)
        browser.close()
    floor_p50 = pct(floor_ms, 50)
    for r in rows:
        r.update(p50=pct(r["ms"], 50), p95=pct(r["ms"], 95))
        r["ratio"] = r["p50"] / floor_p50
    return rows


def table(rows: list[dict]) -> str:
    out = ["| page | slider | p50 ms | p95 ms | p50 / floor p50 | goal <= 1.5 |", "|---|---|---|---|---|---|"]
    for r in rows:
        key = SLIDERS.get(r["page"], "x")
        met = "-" if r["page"].startswith(("floor", "reference")) else ("met" if r["ratio"] <= GOAL else "**missed**")
        out.append(f"| {r['page']} | {key} | {r['p50']:.0f} | {r['p95']:.0f} | {r['ratio']:.2f} | {met} |")
    return "\n".join(out)


def main(write: bool = True) -> str:
    from tests.e2e.harness import page_paths

    pages = {p: SLIDERS[p] for p in page_paths() if p in SLIDERS}
    t0 = time.time()
    tab = table(run(pages))
    print(tab)
    if write:
        write_section(SECTION, f"Machine: {machine()}; Debian chromium (Playwright), server and "
                      f"browser on the same machine. Produced by `make bench` (`bench/bench_latency.py`, "
                      f"{time.time() - t0:.0f} s); {MOVES} moves per page after {WARMUP} warm-up moves.\n\n{tab}\n\n{NOTES}")
    return tab


if __name__ == "__main__":
    main()
