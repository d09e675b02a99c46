"""Live while the slider moves (wviz.ui.drag): chromium (Playwright) drags a live slider across its range in 2 s
with a mouse move every 8 ms, and the component (wviz/ui/js/drag.js) records every frame it drew: when the move
arrived (the event's timestamp), how long the kernels and the drawing took, and when that frame was painted.
Goals on this machine's headless chromium: at least 50 figure updates per second during a drag, and input to paint
p95 at most 16.7 ms (one frame at 60 Hz). The floor is measured in the same run: the same drag with the
component drawing nothing (window.__wvizDrag.empty), which leaves the browser's own input-to-paint path.

    python -m bench drag        (make bench runs it with the others; the table goes to BENCHMARKS.md)
"""
from __future__ import annotations

import platform

import numpy as np
from playwright.sync_api import sync_playwright

from bench.common import cpu_name, write_section
from tests.e2e.harness import drag, launch_browser, live_frames, running_app, wait_until_idle

SECTION = "## Live while the slider moves"
FRAME_MS = 1000 / 60
SEMI = "mechanisms=softmax&mechanisms=semi-relaxed+OT"   # Attention as transport with semi-relaxed OT chosen
LANDSCAPE = "view=Objective+on+the+simplex+%28m+%3D+3%29"   # Attention as transport's views
MANY = "view=Many+queries&many_n=64&many_m=64"
CASES = [   # (figure, page path with the case's settings, slider key, chart key, the traces' field that moves)
    ("Attention as transport: weights bars, defaults (m = 3, 3 mechanisms)", "attention_transport", "tau", "bars",
     "y"),
    ("Attention as transport: weights bars, m = 64 (random keys, 3 mechanisms)",
     "attention_transport?source=random&m=64", "tau", "bars", "y"),
    ("Attention as transport: weights bars, m = 64, entmax at alpha = 1.3 (bisection)",
     "attention_transport?source=random&m=64&alpha=1.3", "tau", "bars", "y"),
    ("Attention as transport: the objective on the simplex (80 x 69 cells) and its two argmins, entmax",
     f"attention_transport?{LANDSCAPE}&land_mech=entmax", "tau", "land", "z"),
    ("Attention as transport: Many queries, 64 x 64 under sparsemax", f"attention_transport?{MANY}&many_mech=sparsemax",
     "tau", "many", "z"),
    ("Attention as transport: Many queries, semi-relaxed OT's 64 x 64 plan, tau",
     f"attention_transport?{MANY}&many_mech=semi-relaxed+OT", "tau", "many", "z"),
    ("Gaussian W2 attention: two 5 x 5 heatmaps, defaults", "gaussian_w2", "tau", "pair", "z"),
    ("Gaussian W2 attention: the two heatmaps, the query's sigma_x (W2^2 by the 2 x 2 closed form)", "gaussian_w2",
     "sx_0", "pair", "z"),
    ("Gaussian W2 attention: the query's ellipses and mean (lines moved in place), sigma_x", "gaussian_w2", "sx_0",
     "ellipses", "x"),
    ("Gaussian W2 attention: every token's ellipses (equal covariances), sigma_x", "gaussian_w2?equal_cov=true",
     "sx_0", "ellipses", "x"),
    ("Transport plans: Sinkhorn's 40 x 30 plan, defaults (gamma 1e-4 to 10 max C)", "transport_plans", "gamma_rel",
     "plan", "z"),
    ("Transport plans: Sinkhorn's 64 x 64 plan (line)", "transport_plans?n=64&m=64", "gamma_rel", "plan", "z"),
    ("Attention as transport: semi-relaxed OT's 4 x 3 plan, defaults (rho 1e-3 to inf)", f"attention_transport?{SEMI}",
     "rho", "bars", "y"),
    ("Attention as transport: semi-relaxed OT's 64 x 63 plan (random keys), tau",
     f"attention_transport?source=random&m=63&{SEMI}", "tau", "bars", "y"),
    ("Transport plans: semi-relaxed 40 x 30 plan, defaults at rho = 1 max C (rho 1e-3 to inf)",
     "transport_plans?rho_rel=1", "rho_rel", "plan", "z"),
    ("Transport plans: semi-relaxed 64 x 64 plan (line), rho", "transport_plans?n=64&m=64&rho_rel=1", "rho_rel",
     "plan", "z"),
    ("Fenchel dual: h (12) by Newton on the dual (9), (18) and (15), defaults (alpha 1e-2 to 10)", "fenchel_dual",
     "alpha", "estimates", "y"),
    ("Particles: the flow of 40 particles through 10 layers, defaults (trails and particles)", "particles", "tau",
     "animation", "x"),
    ("Particles: 64 particles through 16 layers (the live limit)", "particles?n=64&layers=16", "tau", "animation",
     "x"),
]


def one_drag(page, url: str, key: str, chart: str, field: str, empty: bool) -> dict:
    """One 2 s drag from the default value to the left end and back to the right end's 90 %; the frames drawn."""
    page.goto(url)
    wait_until_idle(page)
    page.evaluate(f"() => {{ window.__wvizDrag = window.__wvizDrag || {{frames: []}}; "
                  f"window.__wvizDrag.empty = {str(empty).lower()}; window.__wvizDrag.frames = []; }}")
    drag(page, key, 0.0, seconds=1.0, release=False)
    drag(page, key, 0.9, seconds=1.0)
    frames = [f for f in live_frames(page) if "paintedAt" in f and f["chart"] == chart]   # not another chart's
    wait_until_idle(page)
    return {"frames": frames, "seconds": 2.0, "restyle": None if empty else restyle_ms(page, chart, field)}


# The alternative to drawing in place: Plotly.restyle of the same chart with new values of the field (in the traces
# that have it), 20 times.
RESTYLE = """async ([chart, field]) => {
    const gd = document.querySelector(`.st-key-${chart} .js-plotly-plot`);
    const fresh = (v, k) => Array.isArray(v) || ArrayBuffer.isView(v)
        ? Array.from(v, (x, j) => fresh(x, k + j)) : Math.abs(Math.sin(k));
    const moving = gd._fullData.filter((t) => Array.isArray(t[field]) || ArrayBuffer.isView(t[field]));
    const t0 = performance.now();
    for (let k = 0; k < 20; k++) {
        await window.Plotly.restyle(gd, {[field]: moving.map((t, i) => fresh(t[field], k + i))},
                                    moving.map((t) => t.index));
    }
    return (performance.now() - t0) / 20;
}"""


def restyle_ms(page, chart: str, field: str) -> float:
    page.wait_for_function(f"() => document.querySelector('.st-key-{chart} .js-plotly-plot')?.calcdata")
    return page.evaluate(RESTYLE, [chart, field])


def painted_frames(frames: list[dict]) -> int:
    """The frames painted with a new figure: draws painted less than 4 ms apart (a move drawn at once and the
    frame's last move drawn at its animation callback) share one frame."""
    times = sorted(f["paintedAt"] for f in frames)
    return sum(1 for a, b in zip([-1e9] + times, times) if b - a >= 4)


def summary(run: dict) -> dict:
    frames = run["frames"]
    paint = np.array([f["paintedAt"] - f["inputAt"] for f in frames])
    out = {"updates": painted_frames(frames) / run["seconds"],
           "paint50": float(np.percentile(paint, 50)) if len(paint) else float("nan"),
           "paint95": float(np.percentile(paint, 95)) if len(paint) else float("nan")}
    out["restyle"] = run["restyle"]
    if frames and "compute" in frames[0]:
        out["compute95"] = float(np.percentile([f["compute"] for f in frames], 95))
        out["draw95"] = float(np.percentile([f["draw"] for f in frames], 95))
    return out


def main(repeats: int = 3) -> None:
    rows = []
    with running_app() as base, sync_playwright() as pw:
        browser = launch_browser(pw)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        for name, path, key, chart, field in CASES:
            live, floor = [], []
            for _ in range(repeats):   # alternated, so that a change of load hits both alike
                live.append(summary(one_drag(page, f"{base}/{path}", key, chart, field, empty=False)))
                floor.append(summary(one_drag(page, f"{base}/{path}", key, chart, field, empty=True)))
            rows.append((name, live, floor))
            print(name, live, floor, flush=True)
        browser.close()
    write_section(SECTION, table(rows, repeats))


def spread(runs: list[dict], field: str, fmt: str = "{:.1f}") -> str:
    values = [r[field] for r in runs]
    return f"{fmt.format(np.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def table(rows, repeats: int) -> str:
    lines = [f"Machine: {cpu_name()}, 2 cores, Debian's chromium headless (`--disable-gpu`), Python "
             f"{platform.python_version()}, `make run`'s server on the loopback. Produced by `python -m bench drag` "
             f"(`bench/bench_drag.py`): each case dragged {repeats} times, live and empty (the component drawing "
             "nothing: the floor) alternated; median and range over the drags. A drag: 2 s, one mouse move every "
             "8 ms (250 moves), from the default value to the left end, then to 90 % of the track.",
             "",
             "| figure | frames with a new figure / s | input to paint p50 ms | p95 ms | kernels p95 ms "
             "| drawing p95 ms | floor: p95 ms, nothing drawn | p95 / floor "
             "| Plotly.restyle ms instead of the drawing |",
             "|---|---|---|---|---|---|---|---|---|"]
    goals = []
    for name, live, floor in rows:
        ratio = np.median([r["paint95"] for r in live]) / np.median([r["paint95"] for r in floor])
        lines.append(f"| {name} | {spread(live, 'updates', '{:.0f}')} | {spread(live, 'paint50')} | "
                     f"{spread(live, 'paint95')} | {spread(live, 'compute95', '{:.2f}')} | "
                     f"{spread(live, 'draw95', '{:.2f}')} | {spread(floor, 'paint95')} | {ratio:.2f} | "
                     f"{spread(live, 'restyle')} |")
        goals.append((name, np.median([r["updates"] for r in live]), np.median([r["paint95"] for r in live])))
    met_rate = all(u >= 50 for _, u, _ in goals)
    met_paint = all(p <= FRAME_MS for _, _, p in goals)
    lines += ["", "### Goals, as measured in this run", "",
              f"- At least 50 figure updates per second during a drag: {'met' if met_rate else '**missed**'} "
              f"({', '.join(f'{u:.0f}' for _, u, _ in goals)}).",
              f"- Input to paint p95 at most 16.7 ms: {'met' if met_paint else '**missed**'} "
              f"({', '.join(f'{p:.1f} ms' for _, _, p in goals)}; the floor column is the browser's own path with "
              "nothing drawn)."]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
