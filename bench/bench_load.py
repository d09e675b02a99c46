"""Load: 8 browser users (separate contexts of Debian's chromium) move sliders on different pages for 60 s
against one server. Counts answered moves and errors per user (a move not answered within 30 s, a page error,
a Streamlit exception box) and samples the server's resident memory every 2 s. Writes "## Load: 8 users on one
server (issue 8)" of BENCHMARKS.md, with a verdict on each of the issue's three goals:

- no error: no user saw one;
- every page keeps answering: every user loaded its page and, while moving, never waited more than 30 s
  (ANSWER_S) for an answer, from its first move to the end of its 60 s;
- server memory bounded: once every user has its page loaded (or from the middle of the run, if later), the
  server's RSS grows by at most 100 MB (GROWTH_MB) to the end of the run. The caches are bounded (max_entries), so
  after each page has been opened once the memory should level off; a leak of one figure or result per move
  (about 200 moves a minute across the users) would climb past that.
"""
from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path

from bench.bench_latency import SNAPSHOT, machine
from bench.common import write_section
from tests.e2e.harness import CHROMIUM, CHROMIUM_ARGS, SLIDERS, page_paths, serving

SECTION = "## Load: 8 users on one server (issue 8)"
USERS, SECONDS, ANSWER_S = 8, 60, 30
GROWTH_MB = 100


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
    latencies, answered_at, started, moved = [], [], None, False
    try:
        await page.goto(url, timeout=120_000)
        await page.wait_for_selector(".js-plotly-plot", timeout=120_000)
        thumb = page.locator(f".st-key-{key}").get_by_role("slider")
        await thumb.focus()
        started = time.time()
        i, stop = 0, started + SECONDS
        while time.time() < stop:
            before = await page.evaluate(SNAPSHOT)
            t0 = time.perf_counter()
            await thumb.press("ArrowRight" if i % 2 == 0 else "ArrowLeft")
            try:
                await page.wait_for_function(f"(b) => ({SNAPSHOT})() !== b", arg=before, polling="raf",
                                             timeout=ANSWER_S * 1000)
                latencies.append((time.perf_counter() - t0) * 1e3)
                answered_at.append(time.time())
            except Exception:  # noqa: BLE001  (a timeout: the page stopped answering)
                errors.append(f"move {i} not answered within {ANSWER_S} s")
            if await page.locator('[data-testid="stException"]').count():
                errors.append("exception shown: " + await page.locator('[data-testid="stException"]').first
                              .inner_text())
                break
            await page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached", timeout=60_000)
            i += 1
        moved = True
    except Exception as err:  # noqa: BLE001
        errors.append(f"{type(err).__name__}: {err}")
    finally:
        await context.close()
    # Longest time without an answer, from the first move to the planned end (None: the page never loaded, or a
    # wait failed); a user that broke off early has a long last gap.
    gap = max(b - a for a, b in zip([started, *answered_at], [*answered_at, started + SECONDS])) if moved else None
    return dict(page=url.rsplit("/", 1)[-1], moves=len(latencies), errors=errors, ms=latencies, started=started,
                longest_gap_s=gap)


async def run(pages: list[str]) -> tuple[list[dict], list[tuple[float, float]]]:
    """The users' results and the server's memory samples, (time, RSS in MB)."""
    from playwright.async_api import async_playwright

    with serving() as (url, proc):
        memory = [(time.time(), rss_mb(proc.pid))]
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            tasks = [asyncio.create_task(user(browser, f"{url}/{pages[i % len(pages)]}", SLIDERS[pages[i % len(pages)]]))
                     for i in range(USERS)]
            while not all(t.done() for t in tasks):
                memory.append((time.time(), rss_mb(proc.pid)))
                await asyncio.sleep(2)
            memory.append((time.time(), rss_mb(proc.pid)))
            await browser.close()
        return [t.result() for t in tasks], memory


def verdict(users: list[dict], memory: list[tuple[float, float]]) -> tuple[str, str]:
    """The memory line and the issue's goals, each marked met or missed from this run."""
    def mark(ok):
        return "met" if ok else "**missed**"

    mb = [m for _, m in memory]
    # Growth is measured from when every user had its page (first loads and model caches are not a leak) or from
    # the middle of the run, whichever is later.
    loaded = [u["started"] for u in users if u["started"] is not None]
    since = max([(memory[0][0] + memory[-1][0]) / 2] + loaded)
    steady = [m for t, m in memory if t >= since] or mb[-1:]
    growth = steady[-1] - steady[0]
    mem = (f"Server memory (RSS): {mb[0]:.0f} MB at start, peak {max(mb):.0f} MB, {mb[-1]:.0f} MB at the end "
           f"({len(mb)} samples, every 2 s); {growth:+.0f} MB over the last {memory[-1][0] - since:.0f} s, from "
           f"when every user had its page loaded (or mid-run, if later) to the end.")
    errors = sum(len(u["errors"]) for u in users)
    gaps = [u["longest_gap_s"] for u in users]
    answering = all(g is not None and g <= ANSWER_S for g in gaps) and all(u["moves"] for u in users)
    worst = max((g for g in gaps if g is not None), default=float("nan"))
    lines = [f"- No error: {mark(errors == 0)} ({errors} across {len(users)} users).",
             f"- Every page keeps answering (each user loaded its page and never waited more than {ANSWER_S} s "
             f"for a move): {mark(answering)}; {sum(g is not None for g in gaps)} of {len(users)} users got to move, "
             f"longest wait {worst:.1f} s, fewest moves {min(u['moves'] for u in users)}.",
             f"- Server memory bounded (RSS growth at most {GROWTH_MB} MB once every page is loaded): "
             f"{mark(growth <= GROWTH_MB)}, {growth:+.0f} MB (peak {max(mb):.0f} MB, end {mb[-1]:.0f} MB)."]
    return mem, "\n".join(lines)


def main(write: bool = True) -> str:
    pages = [p for p in page_paths() if p in SLIDERS]
    t0 = time.time()
    users, memory = asyncio.run(run(pages))
    lines = ["| user | page | moves answered | p50 ms | p95 ms | longest wait s | errors |",
             "|---|---|---|---|---|---|---|"]
    for i, u in enumerate(users, 1):
        q = statistics.quantiles(u["ms"], n=20, method="inclusive") if len(u["ms"]) > 1 else [float("nan")] * 19
        p50 = statistics.median(u["ms"]) if u["ms"] else float("nan")
        gap = "-" if u["longest_gap_s"] is None else f"{u['longest_gap_s']:.1f}"
        lines.append(f"| {i} | {u['page']} | {u['moves']} | {p50:.0f} | {q[18]:.0f} | {gap} | "
                     f"{'; '.join(u['errors'][:3]) or 'none'} |")
    tab = "\n".join(lines)
    mem, goals = verdict(users, memory)
    print(f"{tab}\n{mem}\n{goals}")
    if write:
        write_section(SECTION, f"Machine: {machine()}; server and the 8 browser contexts (one "
                      f"chromium) on the same machine. Produced by `make bench` (`bench/bench_load.py`, "
                      f"{time.time() - t0:.0f} s); {USERS} users for {SECONDS} s, each on its own page, moving one "
                      f"slider and waiting for the chart and the end of the run before the next move.\n\n"
                      f"### Goals of the issue, as measured in this run\n\n{goals}\n\n{tab}\n\n{mem}")
    return tab


if __name__ == "__main__":
    main()
