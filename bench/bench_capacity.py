"""Capacity: what one student costs the server, per page, for a lecturer to plan replicas with.

Per page (wviz.registry), on a fresh server (app.py, one Streamlit process, WVIZ_DEVICE=cpu; the
results shared on disk, wviz.disk_cache, are loaded from there when a run before computed them):

- CPU per move: Debian's chromium (Playwright) opens the page, waits for its background work (Figure 4, the
  uncertainty panel) to end, makes WARMUP moves of the page's main slider, then MOVES more, alternating right
  and left as bench_latency does and waiting for each move's chart change and the end of its run. The server's
  CPU time (utime + stime of the streamlit process, /proc/<pid>/stat) over those MOVES, less what the server
  spends idle over the same wall time (measured with the page open and nobody moving), divided by MOVES: the
  rerun, the figures' serialisation and the websocket, measured on the server and not in the browser. These
  moves go back and forth between two values, so the page's st.cache_* results are reused, as in a class whose
  students move through the same values; the first move, to a value this server has not seen, is reported
  beside it.
- Memory per session: the server's RSS after SESSIONS more browser contexts open that page (each waits for the
  end of its run), less its RSS before they opened, divided by SESSIONS. The first context has opened the page
  and moved its slider already: the RSS before is the server with one session (the "server RSS" column).

Students per core = 5000 ms / CPU ms per move: each student moving a slider once every 5 s. Writes "## Capacity:
server CPU per move and memory per session" of BENCHMARKS.md.

    python -m bench capacity                                           every page; writes BENCHMARKS.md
    python -m bench.bench_capacity gaussian_w2 --moves 5 --sessions 2  a smoke run; prints, writes nothing
"""
from __future__ import annotations

import argparse
import time

from bench.bench_latency import SNAPSHOT, machine
from bench.common import cpu_s, rss_mb, slider_pages, write_section
from tests.e2e.harness import launch_browser, serving, wait_until_idle

SECTION = "## Capacity: server CPU per move and memory per session"
MOVES, WARMUP, SESSIONS = 30, 3, 5
IDLE_S = 10
MOVE_EVERY_MS = 5000  # the student planned for: one slider move every 5 s
BACKGROUND_S = 900    # Figure 4 on 2 shared cores takes minutes


def open_page(browser, url: str):
    """A new browser context on ``url``, once the page has drawn its figures and its background work is done."""
    page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    page.goto(url, timeout=120_000)
    page.wait_for_selector(".js-plotly-plot", timeout=120_000)
    progress = '[data-testid="stProgress"]'
    # A background job shows a progress bar, polled by a fragment, until its result is drawn by one more rerun;
    # wait_until_idle sees the polls as runs, so it waits through the job: give it the job's time.
    wait_until_idle(page, timeout_ms=BACKGROUND_S * 1000)
    while page.locator(progress).count():
        page.wait_for_selector(progress, state="detached", timeout=BACKGROUND_S * 1000)
        wait_until_idle(page)
    return page


def move(page, thumb, right: bool) -> None:
    """One step of the slider; returns once the chart has changed and the run has ended."""
    before = page.evaluate(SNAPSHOT)
    thumb.press("ArrowRight" if right else "ArrowLeft")
    page.wait_for_function(f"(before) => ({SNAPSHOT})() !== before", arg=before, polling="raf", timeout=120_000)
    wait_until_idle(page)


def idle_cpu_per_s(pid: int, seconds: float = IDLE_S) -> float:
    """The server's CPU seconds per wall second while a page is open and nobody moves."""
    c0, t0 = cpu_s(pid), time.time()
    time.sleep(seconds)
    return (cpu_s(pid) - c0) / (time.time() - t0)


def cpu_per_move(page, pid: int, key: str, moves: int, idle: float) -> tuple[float, float]:
    """(CPU ms of the first move, to a value the server has not seen; CPU ms per move over ``moves`` moves after
    the warm-up, back and forth between two values), each less the idle CPU over its wall time."""
    thumb = page.locator(f".st-key-{key}").get_by_role("slider")
    thumb.focus()

    def cpu_ms(n: int, first: int) -> float:
        c0, t0 = cpu_s(pid), time.time()
        for i in range(first, first + n):
            move(page, thumb, right=i % 2 == 0)
        return (cpu_s(pid) - c0 - idle * (time.time() - t0)) * 1e3 / n

    first = cpu_ms(1, 0)
    cpu_ms(WARMUP - 1, 1)
    return first, cpu_ms(moves, WARMUP)


def session_mb(browser, url: str, pid: int, sessions: int) -> tuple[float, float]:
    """(RSS before, MB per session): the server's RSS growth while ``sessions`` more contexts open ``url``."""
    before = rss_mb(pid)
    pages = [open_page(browser, url) for _ in range(sessions)]
    grown = rss_mb(pid) - before
    for p in pages:
        p.context.close()
    return before, grown / sessions


def measure(browser, path: str, key: str, moves: int, sessions: int) -> dict:
    """One page on its own fresh server."""
    with serving() as (url, proc):
        page = open_page(browser, f"{url}/{path}")
        idle = idle_cpu_per_s(proc.pid)
        first, per_move = cpu_per_move(page, proc.pid, key, moves, idle)
        rss, per_session = session_mb(browser, f"{url}/{path}", proc.pid, sessions)
        page.context.close()
    row = dict(page=path, key=key, first_ms=first, move_ms=per_move, idle_ms_per_s=idle * 1e3, rss_mb=rss,
               session_mb=per_session, students=MOVE_EVERY_MS / per_move)
    print(f"{path}: {per_move:.0f} CPU ms per move (first {first:.0f}), {per_session:.1f} MB per session, "
          f"{row['students']:.0f} students per core (idle {row['idle_ms_per_s']:.1f} ms/s)", flush=True)
    return row


def table(rows: list[dict]) -> str:
    out = ["| page | slider | server CPU ms per move | first move, new value, CPU ms | students per core (1 move / 5 s)"
           " | server RSS, one session, MB | MB per extra session |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['page']} | {r['key']} | {r['move_ms']:.0f} | {r['first_ms']:.0f} | {r['students']:.0f} "
                   f"| {r['rss_mb']:.0f} | {r['session_mb']:.1f} |")
    return "\n".join(out)


def planning(rows: list[dict]) -> str:
    """The figures a lecturer plans with: the dearest page and the largest server bound the rest."""
    dear = max(rows, key=lambda r: r["move_ms"])
    big = max(rows, key=lambda r: r["rss_mb"])
    idle = max(r["idle_ms_per_s"] for r in rows)
    return (f"Planning: the dearest page is {dear['page']} ({dear['move_ms']:.0f} CPU ms per move, "
            f"{dear['students']:.0f} students per core at full use); the largest server, with one session, holds "
            f"{big['rss_mb']:.0f} MB ({big['page']}), and each further student adds about "
            f"{max(r['session_mb'] for r in rows):.1f} MB at most. One Streamlit process runs its reruns on one "
            f"Python interpreter, so it uses about one core: students per core is also students per replica. "
            f"These are averages at full use; a class moving in bursts needs headroom. An idle server with a page "
            f"open used at most {idle:.1f} CPU ms per second, subtracted above.")


def main(only: list[str] | None = None, moves: int = MOVES, sessions: int = SESSIONS,
         write: bool | None = None) -> str:
    """Every page with a main slider, or only those named; BENCHMARKS.md is written when every page ran with the
    default counts (``write`` overrides)."""
    from playwright.sync_api import sync_playwright

    pages = slider_pages(only)
    write = (not only and (moves, sessions) == (MOVES, SESSIONS)) if write is None else write
    t0 = time.time()
    with sync_playwright() as pw:
        browser = launch_browser(pw)
        rows = [measure(browser, path, key, moves, sessions) for path, key in pages.items()]
        browser.close()
    tab = table(rows)
    plan = planning(rows)
    print(f"{tab}\n\n{plan}")
    if write:
        write_section(SECTION, f"Machine: {machine()}; server and Debian chromium (Playwright) on the same machine, "
                      f"the server's CPU time read from /proc, not timed in the browser. Produced by `make bench` "
                      f"(`bench/bench_capacity.py`, {time.time() - t0:.0f} s); per page, a fresh server, "
                      f"{moves} moves of its main slider after {WARMUP} warm-up moves, then {sessions} more "
                      f"sessions opening the page.\n\n{tab}\n\n{plan}")
    return tab


if __name__ == "__main__":
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("pages", nargs="*", help="page url paths (default: every page with a main slider)")
    cli.add_argument("--moves", type=int, default=MOVES)
    cli.add_argument("--sessions", type=int, default=SESSIONS)
    args = cli.parse_args()
    main(args.pages, args.moves, args.sessions)
