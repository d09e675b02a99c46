"""First load: a new visitor opens a page; how long until every figure on it is drawn.

Per page (wviz.registry) and for bench/floor_app.py (one slider and one small Plotly chart: what Streamlit itself
costs), Debian's chromium (Playwright) opens the page in a fresh browser context (an empty cache, as a student's
first visit) LOADS times, after one warm-up load that lets the server import and cache what every visitor shares.
Times are from the navigation's start, read in the page (performance.now(), a MutationObserver installed before the
page's own scripts): the end of the page's first run (stApp's script state back to notRunning), the first and the
last figure drawn as the visitor sees it (a Plotly chart's first draw at its container's width, an Altair chart's
marks), and when Plotly's chunk of the frontend had
arrived; and the bytes the visit downloaded. Each page is served two ways: Streamlit alone (`make run`) and
deploy/serve.py with one replica (`make serve`: nginx serves Streamlit's frontend files, gzipped); and over two
networks: the loopback, and a lecture hall's shared wifi as Chromium emulates it (WIFI: 20 Mbit/s down, 5 up, 20 ms
latency).
Writes "## First load" of BENCHMARKS.md.

    python -m bench first_load                      every page; writes BENCHMARKS.md
    python -m bench.bench_first_load particles      these pages only; prints, writes nothing
"""
from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

from bench.common import cpu_name, slider_pages, write_section
from tests.e2e.harness import launch_browser, running_app, wait_until_idle

SECTION = "## First load"
GOAL_MS = 3000   # every figure of a page drawn within 3 s of a first visit's navigation
LOADS = int(os.environ.get("WVIZ_BENCH_LOADS", 5))
HERE = Path(__file__).parent
WIFI = {"offline": False, "latency": 20, "downloadThroughput": 20e6 / 8, "uploadThroughput": 5e6 / 8}

# Records, from the first script of the page on, when the run state changes and when each chart is first drawn as
# its visitor sees it. Streamlit's Plotly component draws a figure twice: first hidden and without a width (its
# container not yet measured), then at the container's width; a Plotly chart counts at the end of its first draw
# with a width (plotly_afterplot), an Altair chart when its marks appear.
WATCH = """
window.CHARTS = '.js-plotly-plot, .vega-embed';  // Plotly's and Altair's (Vega's SVG or canvas marks)
window.__load = {runs: [], drawn: []};
const drawn = (gd) => { if (!gd.__drawn) { gd.__drawn = true; window.__load.drawn.push(performance.now()); } };
const look = () => {
  const app = document.querySelector('[data-testid="stApp"]');
  if (app && !app.__watched) {
    app.__watched = true;
    new MutationObserver(() => window.__load.runs.push([app.getAttribute('data-test-script-state'),
                                                       performance.now()]))
      .observe(app, {attributes: true, attributeFilter: ['data-test-script-state']});
  }
  document.querySelectorAll(CHARTS).forEach(gd => {
    if (gd.classList.contains('js-plotly-plot')) {
      if (gd.on && !gd.__hooked) {   // gd.on: Plotly's events, set up as its first draw starts
        gd.__hooked = true;
        gd.on('plotly_afterplot', () => { if (gd.layout.width !== undefined) drawn(gd); });
      }
    } else if (gd.querySelector('svg.marks, canvas.marks')) {
      drawn(gd);
    }
  });
};
new MutationObserver(look).observe(document, {childList: true, subtree: true});
"""
CHUNK = ("() => (performance.getEntriesByType('resource').find(r => r.name.includes('/PlotlyChart.')) || {})"
         ".responseEnd || null")
BYTES = "() => performance.getEntriesByType('resource').reduce((n, r) => n + r.transferSize, 0)"


def settled(page, quiet_s: float = 1.5, timeout_s: float = 60) -> None:
    """Wait until every chart on the page is drawn and none has appeared for ``quiet_s``: charts mount one by one
    once Plotly's chunk is in, so a count taken early is short."""
    deadline, last, since = time.time() + timeout_s, None, time.time()
    while time.time() < deadline:
        now = page.evaluate("() => [document.querySelectorAll(CHARTS).length, window.__load.drawn.length]")
        if now != last:
            last, since = now, time.time()
        elif now[0] > 0 and now[1] >= now[0] and time.time() - since >= quiet_s:
            return
        time.sleep(0.1)
    raise RuntimeError(f"the page's charts did not settle: {last} (charts, drawn)")


def one_load(browser, url: str, network: dict | None = None) -> dict:
    """One first visit of ``url`` (over ``network``, Chromium's emulated conditions; None: as it is): ms from
    navigation to the run's end, the first and last figure, Plotly's chunk; MB downloaded."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    if network:
        context.new_cdp_session(page).send("Network.emulateNetworkConditions", network)
    page.add_init_script(WATCH)
    page.goto(url)
    # the first run has ended (before it the app is idle too, while it connects) and every chart on it is drawn
    page.wait_for_function("() => { const r = window.__load.runs.map(([s]) => s);"
                           " return r.indexOf('notRunning', r.indexOf('running')) > 0; }", timeout=300_000)
    wait_until_idle(page, timeout_ms=300_000)
    settled(page)
    load = page.evaluate("window.__load")
    charts = page.evaluate("document.querySelectorAll(CHARTS).length")
    chunk = page.evaluate(CHUNK)
    mb = page.evaluate(BYTES) / 1e6
    context.close()
    started = next(i for i, (state, _) in enumerate(load["runs"]) if state == "running")
    ends = [t for state, t in load["runs"][started:] if state == "notRunning"]
    drawn = sorted(load["drawn"])
    if len(drawn) < charts:
        raise RuntimeError(f"{url}: {charts} charts on the page, {len(drawn)} seen drawn")
    return {"run": ends[0] if ends else float("nan"), "first": drawn[0] if drawn else float("nan"),
            "last": drawn[-1] if drawn else float("nan"), "chunk": chunk or float("nan"), "charts": charts, "mb": mb}


def measure(browser, url: str, network: dict | None = None, loads: int = LOADS) -> dict:
    """The median of each time over ``loads`` first visits, after a warm-up visit."""
    one_load(browser, url, network)
    runs = [one_load(browser, url, network) for _ in range(loads)]
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]} | {"all_last": [r["last"] for r in runs]}


def run(pages: list[str]) -> list[dict]:
    """Per page (the floor first), its measures by (server, network): "alone"/"served", "loopback"/"wifi"."""
    from playwright.sync_api import sync_playwright

    from bench.bench_load import serving_class

    with (running_app() as alone, running_app(HERE / "floor_app.py") as floor, serving_class(1) as (served, _, _),
          sync_playwright() as pw):
        browser = launch_browser(pw)
        rows = [{"page": "floor (one slider, one small bar chart)",
                 **{("alone", net): measure(browser, floor, WIFI if net == "wifi" else None)
                    for net in ("loopback", "wifi")}}]
        for path in pages:
            rows.append({"page": path, **{(server, net): measure(browser, f"{url}/{path}",
                                                                  WIFI if net == "wifi" else None)
                                          for server, url in (("alone", alone), ("served", served))
                                          for net in ("loopback", "wifi")}})
            print(path, {k: round(v["last"]) for k, v in rows[-1].items() if k != "page"}, flush=True)
        browser.close()
    return rows


def table(rows: list[dict]) -> str:
    """Two tables: where a first visit's time goes (Streamlit alone, loopback), then every figure's time and the
    bytes downloaded for each server and network."""
    where = ["| page | charts | run ends ms | Plotly's chunk in ms | first figure ms | every figure ms (median) "
             "| every figure, each load ms |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        m = r["alone", "loopback"]
        where.append(f"| {r['page']} | {m['charts']:.0f} | {m['run']:.0f} | {m['chunk']:.0f} | {m['first']:.0f} "
                     f"| {m['last']:.0f} | {', '.join(f'{t:.0f}' for t in m['all_last'])} |")
    ways = [("alone", "loopback"), ("served", "loopback"), ("alone", "wifi"), ("served", "wifi")]
    head = " | ".join(f"{'make run' if s == 'alone' else 'make serve'}, {n} ms" for s, n in ways)
    both = [f"| page | {head} | MB downloaded: make run / make serve |", "|---" * 6 + "|"]
    for r in rows:
        cells = [f"{r[w]['last']:.0f}" + ("" if r[w]["last"] <= GOAL_MS else " (> 3 s)") if w in r else "-"
                 for w in ways]
        mb = f"{r['alone', 'loopback']['mb']:.1f} / " + (f"{r['served', 'loopback']['mb']:.1f}"
                                                           if ("served", "loopback") in r else "-")
        both.append(f"| {r['page']} | {' | '.join(cells)} | {mb} |")
    return "\n".join(where) + "\n\n" + "\n".join(both)


def machine() -> str:
    return f"{cpu_name()}, {os.cpu_count()} cores, headless chromium (software drawing), one Streamlit process"


def main(only: list[str] | None = None, write: bool | None = None) -> str:
    """Every page, or only those named; the table goes to BENCHMARKS.md when every page ran (``write`` overrides)."""
    pages = list(slider_pages(only))
    write = not only if write is None else write
    rows = run(pages)
    floor = rows[0]["alone", "loopback"]["last"]
    met = {w: sum(r[w]["last"] <= GOAL_MS for r in rows[1:]) for w in rows[1] if w != "page"}
    ratio = [r[w]["last"] / floor for r in rows[1:] for w in [("alone", "loopback")]]
    text = (f"Machine: {machine()}. Produced by `bench/bench_first_load.py`: each page opened {LOADS} times in a "
            "fresh browser context (empty cache) after one warm-up visit; medians of ms from the navigation's "
            "start; a Plotly figure counts once drawn at its container's width (Streamlit draws it first hidden, "
            "without a width); wifi is Chromium's emulation of 20 Mbit/s down, 5 up, 20 ms latency.\n\n" + table(rows)
            + f"\n\nGoal: every figure of a page drawn within {GOAL_MS / 1000:g} s of a first visit: "
            + ", ".join(f"{met[w]} of {len(rows) - 1} pages with {'make run' if w[0] == 'alone' else 'make serve'} "
                        f"on the {w[1]}" for w in met)
            + f". The floor, Streamlit's own first load of one small chart, takes {floor:.0f} ms: a page takes "
              f"{min(ratio):.2f}-{max(ratio):.2f}x the floor (make run, loopback).")
    print(text)
    if write:
        write_section(SECTION, text)
    return text


if __name__ == "__main__":
    main(sys.argv[1:] or None)
