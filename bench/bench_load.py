"""Load: 8 browser users (separate contexts of Debian's chromium) move sliders on different pages for 60 s
against one server. Counts answered moves and errors per user (a move not answered within 30 s, a page error,
a Streamlit exception box) and samples the server's resident memory every 2 s. Writes "## Load: 8 users on one
server (issue 8)" of BENCHMARKS.md.
"""
from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path

from bench.bench_latency import SNAPSHOT
from bench.common import cpu_name, write_section
from tests.e2e.harness import CHROMIUM, CHROMIUM_ARGS, SLIDERS, page_paths, serving

SECTION = "## Load: 8 users on one server (issue 8)"
USERS, SECONDS, ANSWER_S = 8, 60, 30


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def user(browser, url: str, key: str) -> dict:
    """One user on one page: once it has loaded, move its slider back and forth for SECONDS; every move must
    redraw a chart."""
    context = await browser.new_context(viewport={"width": 1400, "height": 1000})
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    latencies = []
    try:
        await page.goto(url, timeout=120_000)
        await page.wait_for_selector(".js-plotly-plot", timeout=120_000)
        thumb = page.locator(f".st-key-{key}").get_by_role("slider")
        await thumb.focus()
        i, stop = 0, time.time() + SECONDS
        while time.time() < stop:
            before = await page.evaluate(SNAPSHOT)
            t0 = time.perf_counter()
            await thumb.press("ArrowRight" if i % 2 == 0 else "ArrowLeft")
            try:
                await page.wait_for_function(f"(b) => ({SNAPSHOT})() !== b", arg=before, polling="raf",
                                             timeout=ANSWER_S * 1000)
                latencies.append((time.perf_counter() - t0) * 1e3)
            except Exception:  # noqa: BLE001  (a timeout: the page stopped answering)
                errors.append(f"move {i} not answered within {ANSWER_S} s")
            if await page.locator('[data-testid="stException"]').count():
                errors.append("exception shown: " + await page.locator('[data-testid="stException"]').first
                              .inner_text())
                break
            await page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached", timeout=60_000)
            i += 1
    except Exception as err:  # noqa: BLE001
        errors.append(f"{type(err).__name__}: {err}")
    finally:
        await context.close()
    return dict(page=url.rsplit("/", 1)[-1], moves=len(latencies), errors=errors, ms=latencies)


async def run(pages: list[str]) -> tuple[list[dict], list[float]]:
    from playwright.async_api import async_playwright

    with serving() as (url, proc):
        memory = [rss_mb(proc.pid)]
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            tasks = [asyncio.create_task(user(browser, f"{url}/{pages[i % len(pages)]}", SLIDERS[pages[i % len(pages)]]))
                     for i in range(USERS)]
            while not all(t.done() for t in tasks):
                memory.append(rss_mb(proc.pid))
                await asyncio.sleep(2)
            memory.append(rss_mb(proc.pid))
            await browser.close()
        return [t.result() for t in tasks], memory


def main(write: bool = True) -> str:
    pages = [p for p in page_paths() if p in SLIDERS]
    t0 = time.time()
    users, memory = asyncio.run(run(pages))
    lines = ["| user | page | moves answered | p50 ms | p95 ms | errors |", "|---|---|---|---|---|---|"]
    for i, u in enumerate(users, 1):
        q = statistics.quantiles(u["ms"], n=20, method="inclusive") if len(u["ms"]) > 1 else [float("nan")] * 19
        p50 = statistics.median(u["ms"]) if u["ms"] else float("nan")
        lines.append(f"| {i} | {u['page']} | {u['moves']} | {p50:.0f} | {q[18]:.0f} | "
                     f"{'; '.join(u['errors'][:3]) or 'none'} |")
    tab = "\n".join(lines)
    mem = (f"Server memory (RSS): {memory[0]:.0f} MB at start, peak {max(memory):.0f} MB, {memory[-1]:.0f} MB at "
           f"the end ({len(memory)} samples, every 2 s).")
    print(tab + "\n" + mem)
    if write:
        write_section(SECTION, f"Machine: {cpu_name()}, 2 cores, no GPU; server and the 8 browser contexts (one "
                      f"chromium) on the same machine. Produced by `make bench` (`bench/bench_load.py`, "
                      f"{time.time() - t0:.0f} s); {USERS} users for {SECONDS} s, each on its own page, moving one "
                      f"slider and waiting for the chart and the end of the run before the next move.\n\n{tab}\n\n"
                      f"{mem}")
    return tab


if __name__ == "__main__":
    main()
