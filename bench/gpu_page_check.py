"""The headless page check of bench/gpu_check.sh (step e): the app serves, and the Attention and Transport pages
compute where WVIZ_DEVICE says when their main slider moves. No browser: the GPU machine has none.

1. ``streamlit run app.py`` in the background answers /_stcore/health with "ok" and serves its page.
2. Through Streamlit's AppTest, with WVIZ_DEVICE set, on each page: the sidebar says where it computes ("Computing
   on: GPU: <card>" on CUDA), and a move of the main slider (wviz.registry gives its key) reruns the page's
   computation at the new value, with the result's tensors on that device. The computations are observed by
   wrapping the views' functions that every result goes through (attention: ``attend``; transport: ``solve``).

    python bench/gpu_page_check.py --device cuda --server-log OUT/server.log

Prints one PASS or FAIL line per check, exit status 1 if any failed.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The page's view that computes on WVIZ_DEVICE when the main slider moves (the Attention page's main weights are a
# handful of keys, computed where their scores lie: on the CPU).
VIEWS = {"attention_transport": "Many queries", "transport_plans": None}
results: list[bool] = []


def check(ok: bool, what: str) -> None:
    results.append(bool(ok))
    print(f"{'PASS' if ok else 'FAIL'}: {what}", flush=True)


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.status, r.read().decode(errors="replace")


def serve(device: str, log_path: Path, port: int, timeout: float = 60) -> None:
    """Start the app as `make run` does, wait for its health check, fetch its page, stop it."""
    # Streamlit installed outside a site-packages folder (gpu_check.sh's pip --target) takes itself for a development
    # checkout, which serves no frontend and refuses --server.port: say it is not.
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.port",
           str(port), "--browser.gatherUsageStats", "false", "--global.developmentMode", "false"]
    env = dict(os.environ, WVIZ_DEVICE=device)
    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            health = ""
            while time.perf_counter() - t0 < timeout and proc.poll() is None and health != "ok":
                try:
                    health = _get(f"http://127.0.0.1:{port}/_stcore/health")[1].strip()
                except OSError:
                    time.sleep(0.5)
            check(health == "ok", f"the app serves: /_stcore/health said {health or 'nothing'!r} after "
                                  f"{time.perf_counter() - t0:.1f} s (server exit code {proc.poll()})")
            if health == "ok":
                status, body = _get(f"http://127.0.0.1:{port}/attention_transport")
                check(status == 200 and "<html" in body.lower(), f"GET /attention_transport: HTTP {status}")
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class Recorder:
    """Wraps a views function to record, per call, what it computed and on which device its result lies."""

    def __init__(self):
        self.calls: list[tuple[str, str]] = []

    def wrap(self, module, name: str, describe) -> None:
        fn = getattr(module, name)

        def wrapped(*args, **kwargs):
            out = fn(*args, **kwargs)
            self.calls.append(describe(*args, out=out))
            return out

        setattr(module, name, wrapped)


def _attend(mechanism, scores, tau, *rest, out):
    return f"attend({mechanism}, {tuple(scores.shape)}, tau = {tau:.3g})", out.device.type


def _solve(solver, a, b, C, gamma, *rest, out):
    return f"solve({solver}, {tuple(C.shape)}, gamma = {gamma:.3g})", out.plan.device.type


def page(stem: str, device: str, recorder: Recorder) -> None:
    """Open the page (on the view that computes on the device), check its badge, move its main slider."""
    from streamlit.testing.v1 import AppTest

    from wviz.registry import BY_STEM

    at = AppTest.from_file(str(ROOT / "pages" / f"{stem}.py"), default_timeout=120)
    if VIEWS[stem]:
        at.query_params["view"] = VIEWS[stem]
    at.run()
    check(not at.exception, f"{stem}: opens without an exception {[e.value for e in at.exception][:1]}")
    badge = [m.value for m in at.sidebar.markdown if "Computing on" in m.value]
    want = "GPU: " if device == "cuda" else "CPU"
    check(any(want in b for b in badge), f"{stem}: the sidebar says {badge[:1]}")
    slider = at.sidebar.select_slider(key=BY_STEM[stem].slider)
    old = slider.value
    new = min((float(o) for o in slider.options), key=lambda v: abs(v - 3 * old) if v != old else float("inf"))
    recorder.calls.clear()
    t0 = time.perf_counter()
    slider.set_value(new).run()
    seconds = time.perf_counter() - t0
    check(not at.exception, f"{stem}: {BY_STEM[stem].slider} {old:g} -> {new:g} reran in {seconds:.2f} s "
                            f"without an exception")
    for call, where in recorder.calls:
        print(f"  computed {call} on {where}", flush=True)
    moved = [where for _, where in recorder.calls]   # cleared before the move: every call is a recompute
    check(device in moved, f"{stem}: the move recomputed, a result on {device} ({len(moved)} calls, results on "
                           f"{sorted(set(moved))})")
    for caption in at.caption:
        if " on " in caption.value and "Computed" in caption.value:
            print(f"  caption: {caption.value}", flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--server-log", type=Path, default=Path(tempfile.gettempdir()) / "wviz_server.log")
    p.add_argument("--port", type=int, default=8599)
    args = p.parse_args(argv)
    os.environ["WVIZ_DEVICE"] = args.device
    os.environ["STREAMLIT_GLOBAL_DEVELOPMENT_MODE"] = "false"   # for AppTest too (see serve)
    os.environ.setdefault("WVIZ_CACHE_DIR", tempfile.mkdtemp(prefix="wviz_cache_"))
    serve(args.device, args.server_log, args.port)

    from wviz.views import attention_transport, transport_plans

    recorder = Recorder()
    recorder.wrap(attention_transport, "attend", _attend)
    recorder.wrap(transport_plans, "solve", _solve)
    for stem in VIEWS:
        try:
            page(stem, args.device, recorder)
        except Exception as err:   # one page's failure must not hide the other's result
            check(False, f"{stem}: {type(err).__name__}: {err}")
    print(f"page check: {sum(results)} of {len(results)} checks passed", flush=True)
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
