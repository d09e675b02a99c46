"""Load through the proxy: 16 browser users (separate contexts of Debian's chromium) move sliders on different
pages for 60 s against `deploy/serve.py` (what `make serve` runs: Streamlit replicas behind nginx, sticky by
cookie), once with 2 replicas and once with 1. Counts answered moves and errors per user (a move not answered
within 30 s, a page error, a Streamlit exception box), and every 2 s samples each replica's resident memory and
CPU time (the replicas' pids are in `.serve/<port>/replicas`). Writes "## Load: 16 users through nginx"
of BENCHMARKS.md, with a verdict per run on these goals:

- no error: no user saw one;
- every user answered: every user loaded its page and, while moving, never waited more than 30 s (ANSWER_S) for
  an answer, from its first move to the end of its 60 s;
- memory bounded: once every user has its page loaded (or from the middle of the run, if later), no replica's RSS
  grows by more than 100 MB (GROWTH_MB) to the end of the run. The caches are bounded (max_entries), so after each
  page has been opened once the memory should level off; a leak of one figure or result per move would climb
  past that;
- and the servers' own CPU per move: the replicas' CPU time over that same stretch divided by the moves answered
  in it. The browsers run on the same 2 cores and compete with the servers, so the latencies say less about the
  servers than this does.

Each run starts its own deploy/serve.py on free ports, with `make serve`'s disk cache (WVIZ_CACHE_DIR, by default
~/.cache/wviz). Before the runs the bench opens, on one replica, the pages whose results the replicas share there
(wviz.disk_cache: Figure 4 on the page Heads solve the dual, the uncertainty inspector's dataset panel), which
computes them only if they are not there yet: as at a lecture after the first, the runs measure the students'
moves, not those one-off computations.

    python -m bench load                                             both runs; writes BENCHMARKS.md
    python -m bench.bench_load --users 2 --seconds 10 --replicas 2   a smoke run; prints, writes nothing
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.bench_latency import SNAPSHOT, machine
from bench.common import cpu_s, rss_mb, slider_pages, write_section
from deploy.serve import free_ports, read_replicas
from tests.e2e.harness import CHROMIUM, CHROMIUM_ARGS, ROOT, SLIDERS

SECTION = "## Load: 16 users through nginx"
USERS, SECONDS, REPLICAS, ANSWER_S = 16, 60, (2, 1), 30
GROWTH_MB = 100
SAMPLE_S = 2
READY = re.compile(r"wviz: \d+ replicas? behind nginx at \S+")
START_S, STOP_S = 300, 60
# The pages whose results the replicas share through the disk cache (ui.background jobs): opened once before the runs.
SHARED_ON_DISK = ("heads_dual", "uncertainty_inspector")


@contextlib.contextmanager
def serving_class(replicas: int):
    """deploy/serve.py with ``replicas`` replicas on free ports; yields (the proxy's URL, its runtime folder
    .serve/<port>, what serve.py printed so far as a function). Stops it with SIGINT, as Ctrl-C does, and removes
    the folder if all went well."""
    port = free_ports(replicas + 1)
    folder = ROOT / ".serve" / str(port)
    env = {**os.environ, "WVIZ_DEVICE": "cpu"}
    with tempfile.TemporaryFile() as log:  # a file, not a pipe: a full pipe would block serve.py
        proc = subprocess.Popen([sys.executable, "deploy/serve.py", "--replicas", str(replicas), "--port", str(port)],
                                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)

        def said() -> str:
            log.seek(0)
            return log.read().decode(errors="replace")

        try:
            deadline = time.time() + START_S
            while not READY.search(said()):
                if proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"deploy/serve.py did not get ready (exit {proc.poll()}):\n{said()}")
                time.sleep(1)
            yield f"http://127.0.0.1:{port}", folder, said
        finally:
            stop(proc, folder)
    shutil.rmtree(folder)  # kept when the run failed: its logs say why


def stop(proc: subprocess.Popen, folder: Path) -> None:
    """SIGINT to serve.py, which stops nginx and its replicas; if it has not exited within STOP_S, SIGKILL to it,
    nginx and the replicas (each in its own process group), so that a failed run leaves nothing behind."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(STOP_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        nginx, listed = folder / "nginx.pid", folder / "replicas"
        left = [*(read_replicas(folder).values() if listed.exists() else ()),
                *([int(nginx.read_text())] if nginx.exists() else [])]
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        raise RuntimeError(f"deploy/serve.py did not stop within {STOP_S} s of SIGINT; killed it and pids {left}") \
            from None


def sample(folder: Path) -> tuple[float, dict[int, tuple[int, float, float]]]:
    """(time, port -> (pid, RSS MB, CPU s)) of every replica still running."""
    now, out = time.time(), {}
    for port, pid in read_replicas(folder).items():
        with contextlib.suppress(OSError):  # a replica that just died: serve.py restarts it
            out[port] = (pid, rss_mb(pid), cpu_s(pid))
    return now, out


def warm_disk_cache(pages: list[str]) -> None:
    """Open each of ``pages`` that shares its results on disk until its background work is done (bench_capacity's
    open_page), on a one-replica deploy/serve.py: the disk cache then holds them."""
    from playwright.sync_api import sync_playwright

    from bench.bench_capacity import open_page
    from tests.e2e.harness import launch_browser

    shared = [p for p in pages if p in SHARED_ON_DISK]
    if not shared:
        return
    with serving_class(1) as (url, _, _), sync_playwright() as pw:
        browser = launch_browser(pw)
        for path in shared:
            open_page(browser, f"{url}/{path}").context.close()
        browser.close()


async def user(browser, url: str, key: str, seconds: float) -> dict:
    """One user on one page: once it has loaded, move its slider back and forth for ``seconds``; every move must
    redraw a chart."""
    context = await browser.new_context(viewport={"width": 1400, "height": 1000})
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    latencies, answered_at, started, moved, cookie = [], [], None, False, None
    try:
        await page.goto(url, timeout=120_000)
        await page.wait_for_selector(".js-plotly-plot", timeout=120_000)
        cookie = next((c["value"] for c in await context.cookies() if c["name"] == "wviz_replica"), None)
        thumb = page.locator(f".st-key-{key}").get_by_role("slider")
        await thumb.focus()
        started = time.time()
        i, stop_at = 0, started + seconds
        while time.time() < stop_at:
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
    gap = max(b - a for a, b in zip([started, *answered_at], [*answered_at, started + seconds])) if moved else None
    return dict(page=url.rsplit("/", 1)[-1], moves=len(latencies), errors=errors, ms=latencies, started=started,
                answered_at=answered_at, longest_gap_s=gap, cookie=cookie)


def upstreams(access_log: str, cookie: str | None, ports: set[int]) -> list[int]:
    """The replica ports that nginx's access log shows for the requests carrying this sticky cookie value: one,
    if the session stayed on its replica."""
    if not cookie:
        return []
    found = {int(p) for line in access_log.splitlines() if cookie in line
             for p in re.findall(r"127\.0\.0\.1:(\d+)", line)}
    return sorted(found & ports)


async def drive(url: str, folder: Path, pages: list[str], users: int, seconds: float):
    """The users' results and the replicas' samples, from the browsers' start to their end."""
    from playwright.async_api import async_playwright

    samples = [sample(folder)]
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        tasks = [asyncio.create_task(user(browser, f"{url}/{pages[i % len(pages)]}", SLIDERS[pages[i % len(pages)]],
                                          seconds)) for i in range(users)]
        while not all(t.done() for t in tasks):
            samples.append(sample(folder))
            await asyncio.sleep(SAMPLE_S)
        samples.append(sample(folder))
        await browser.close()
    return [t.result() for t in tasks], samples


def run(replicas: int, users: int, seconds: float, pages: list[str]) -> dict:
    """One run on a fresh deploy/serve.py: the users, the samples, each user's replica, and what serve.py said
    after it was ready (restarts of replicas, warnings)."""
    with serving_class(replicas) as (url, folder, said):
        ready = len(said())
        results, samples = asyncio.run(drive(url, folder, pages, users, seconds))
        access = (folder / "access.log").read_text()
        ports = set(read_replicas(folder))
        after = said()[ready:].strip()
    for u in results:
        u["replicas"] = upstreams(access, u.pop("cookie"), ports)
    return dict(replicas=replicas, users=results, samples=samples, ports=sorted(ports), said=after)


def steady_since(r: dict) -> float:
    """When every user had its page loaded, or the middle of the run if later: growth and CPU per move are taken
    from there (first loads and per-process caches filling are not a leak, nor a move)."""
    samples = r["samples"]
    loaded = [u["started"] for u in r["users"] if u["started"] is not None]
    return max([(samples[0][0] + samples[-1][0]) / 2] + loaded)


def replica_memory(r: dict, port: int, since: float) -> dict:
    """One replica's RSS: start, peak and end of the run, and its growth from ``since`` to the end."""
    mb = [(t, s[port][1]) for t, s in r["samples"] if port in s]
    steady = [m for t, m in mb if t >= since] or [mb[-1][1]]
    return dict(start=mb[0][1], peak=max(m for _, m in mb), end=mb[-1][1], growth=steady[-1] - steady[0])


def cpu_since(r: dict, since: float) -> float:
    """The replicas' CPU seconds from ``since`` to the end: the sum of each replica's increments between samples,
    skipping an interval in which its pid changed (a restart)."""
    kept = [s for t, s in r["samples"] if t >= since]
    return sum(b[port][2] - a[port][2] for a, b in zip(kept, kept[1:]) for port in b
               if port in a and a[port][0] == b[port][0])


def summary(r: dict) -> dict:
    """One run's figures for the tables and the verdict."""
    users, since = r["users"], steady_since(r)
    ms = [m for u in users for m in u["ms"]]
    q = statistics.quantiles(ms, n=20, method="inclusive") if len(ms) > 1 else [float("nan")] * 19
    moves_since = sum(t >= since for u in users for t in u["answered_at"])
    gaps = [u["longest_gap_s"] for u in users]
    return dict(
        moves=sum(u["moves"] for u in users), p50=statistics.median(ms) if ms else float("nan"), p95=q[18],
        errors=sum(len(u["errors"]) for u in users),
        answering=all(g is not None and g <= ANSWER_S for g in gaps) and all(u["moves"] for u in users),
        loaded=sum(g is not None for g in gaps), worst=max((g for g in gaps if g is not None), default=float("nan")),
        fewest=min(u["moves"] for u in users), since_s=r["samples"][-1][0] - since,
        memory={p: replica_memory(r, p, since) for p in r["ports"]},
        cpu_ms=cpu_since(r, since) * 1e3 / moves_since if moves_since else float("nan"), moves_since=moves_since,
        cores=cpu_since(r, since) / (r["samples"][-1][0] - since),
        sessions={p: sum(u["replicas"] == [p] for u in users) for p in r["ports"]},
        unstuck=sum(len(u["replicas"]) > 1 for u in users))


def goals(r: dict, s: dict) -> str:
    """The module docstring's goals (no error, every user answered, memory bounded) for one run, each marked met
    or missed."""
    def mark(ok):
        return "met" if ok else "**missed**"

    growth = max(m["growth"] for m in s["memory"].values())
    lines = [f"- No error: {mark(s['errors'] == 0)} ({s['errors']} across {len(r['users'])} users).",
             f"- Every user answered (loaded its page and never waited more than {ANSWER_S} s for a move): "
             f"{mark(s['answering'])}; {s['loaded']} of {len(r['users'])} users got to move, longest wait "
             f"{s['worst']:.1f} s, fewest moves {s['fewest']}.",
             f"- Memory bounded (no replica's RSS grows by more than {GROWTH_MB} MB once every page is loaded): "
             f"{mark(growth <= GROWTH_MB)}, largest growth {growth:+.0f} MB over the last {s['since_s']:.0f} s.",
             f"- The servers' own CPU per move: {s['cpu_ms']:.0f} ms (the replicas' CPU time over the last "
             f"{s['since_s']:.0f} s / the {s['moves_since']} moves answered in it).",
             "- Sessions per replica (nginx's access log, by sticky cookie): "
             + ", ".join(f"{n} on :{p}" for p, n in s["sessions"].items())
             + (f"; **{s['unstuck']} sessions reached more than one replica**" if s["unstuck"] else
                "; every session stayed on one replica.")]
    if r["said"]:
        lines.append(f"- deploy/serve.py said during the run: `{' / '.join(r['said'].splitlines()[:5])}`")
    return "\n".join(lines)


def user_table(r: dict) -> str:
    lines = ["| user | page | replica | moves answered | p50 ms | p95 ms | longest wait s | errors |",
             "|---|---|---|---|---|---|---|---|"]
    for i, u in enumerate(r["users"], 1):
        q = statistics.quantiles(u["ms"], n=20, method="inclusive") if len(u["ms"]) > 1 else [float("nan")] * 19
        p50 = statistics.median(u["ms"]) if u["ms"] else float("nan")
        gap = "-" if u["longest_gap_s"] is None else f"{u['longest_gap_s']:.1f}"
        where = ", ".join(f":{p}" for p in u["replicas"]) or "?"
        lines.append(f"| {i} | {u['page']} | {where} | {u['moves']} | {p50:.0f} | {q[18]:.0f} | {gap} | "
                     f"{'; '.join(u['errors'][:3]) or 'none'} |")
    return "\n".join(lines)


def memory_line(s: dict) -> str:
    return "Replica memory (RSS, every 2 s): " + "; ".join(
        f":{p} {m['start']:.0f} MB at start, peak {m['peak']:.0f}, end {m['end']:.0f} ({m['growth']:+.0f} MB)"
        for p, m in s["memory"].items()) + "."


def comparison(runs: list[dict], sums: list[dict]) -> str:
    lines = ["| replicas | users | moves answered | p50 ms | p95 ms | longest wait s | errors "
             "| servers' CPU ms per move | servers' cores in use | peak RSS per replica MB |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r, s in zip(runs, sums):
        peak = max(m["peak"] for m in s["memory"].values())
        lines.append(f"| {r['replicas']} | {len(r['users'])} | {s['moves']} | {s['p50']:.0f} | {s['p95']:.0f} "
                     f"| {s['worst']:.1f} | {s['errors']} | {s['cpu_ms']:.0f} | {s['cores']:.2f} | {peak:.0f} |")
    busiest = max(s["cores"] for s in sums)
    lines.append(f"\nThe servers' cores in use are the replicas' CPU seconds per second of the run's steady stretch: "
                 f"at most {busiest:.2f} of the machine's {os.cpu_count()}.")
    if busiest < 1:   # one replica alone could use a core: the servers were not what held the moves back
        lines[-1] += (" The browsers drawing the users' pages on the same cores took the rest, so the answer times "
                      "here are mostly the browsers', and a second replica cannot show its full gain on this machine: "
                      "plan replicas with the capacity table above (the server's CPU per move).")
    return "\n".join(lines)


def main(users: int = USERS, seconds: float = SECONDS, replicas: tuple[int, ...] = REPLICAS,
         write: bool | None = None) -> str:
    """One run per replica count, in order; BENCHMARKS.md is written for the default counts (``write``
    overrides)."""
    pages = list(slider_pages())
    write = (users, seconds, tuple(replicas)) == (USERS, SECONDS, REPLICAS) if write is None else write
    t0 = time.time()
    warm_disk_cache(pages[:users])
    warmed = time.time() - t0
    runs = [run(n, users, seconds, pages) for n in replicas]
    sums = [summary(r) for r in runs]
    parts = [comparison(runs, sums)]
    for r, s in zip(runs, sums):
        parts.append(f"### {r['replicas']} replica{'s' if r['replicas'] > 1 else ''}\n\n{goals(r, s)}\n\n"
                     f"{user_table(r)}\n\n{memory_line(s)}")
    text = "\n\n".join(parts)
    print(text)
    if write:
        write_section(SECTION, f"Machine: {machine()}; deploy/serve.py (nginx and the replicas) and the {users} "
                      f"browser contexts (one chromium) on the same machine. Produced by `make bench` "
                      f"(`bench/bench_load.py`, {time.time() - t0:.0f} s, of which {warmed:.0f} s making sure the "
                      f"disk cache holds the shared results); {users} users for {seconds:g} s per run, each run on a "
                      f"fresh deploy/serve.py, the users spread over the pages, each moving one slider and waiting "
                      f"for the chart and the end of the run before the next move.\n\n{text}")
    return text


if __name__ == "__main__":
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("--users", type=int, default=USERS)
    cli.add_argument("--seconds", type=float, default=SECONDS)
    cli.add_argument("--replicas", type=int, nargs="+", default=list(REPLICAS))
    args = cli.parse_args()
    main(args.users, args.seconds, tuple(args.replicas))
