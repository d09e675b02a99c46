"""A real streamlit server and Debian's chromium driven by Playwright: the browser tests and bench/ share it."""
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from wviz.registry import PAGES

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
# Without these flags chromium keeps calling home, which this machine's closed network refuses.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# page url path (its stem) -> key of its main slider, which the browser tests and benchmarks move (wviz.registry)
SLIDERS = {page.stem: page.slider for page in PAGES}


def page_paths() -> list[str]:
    """URL path of every math page in the app's order (wviz.registry; not the References page), after the landing
    page ''."""
    return [""] + [page.stem for page in PAGES]


# No section of the main column waits for background work (ui.wait_for's progress bar)
SETTLED = """() => !document.querySelector('[data-testid="stMain"] [data-testid="stProgress"]')"""


def wait_until_idle(page, timeout_ms=120_000, quiet_ms=1000):
    """Wait until the page's script has finished: Streamlit's run state (stApp's data-test-script-state, set on
    every run, a fragment's included) 'notRunning' and unchanged for ``quiet_ms``, counted from this call (a slider
    press may send its rerun a moment later; a page can end one run and start another, e.g. after st.rerun, and a
    progress bar's fragment reruns every second until its work is done).

    Polled every 100 ms, not every animation frame (Playwright's default): a frame requested is a frame drawn, a
    seventh of a core while a page waits.

    Not the status widget: Streamlit shows it only once one run state has lasted 500 ms, so quick successive
    fragment runs (three slider presses) never show it and a test would read the page between two of them."""
    page.wait_for_selector('[data-testid="stApp"]', timeout=timeout_ms)
    page.evaluate(_WATCH_RUN_STATE)
    page.wait_for_function("quiet => { const app = document.querySelector('[data-testid=\"stApp\"]');"
                           " return app.getAttribute('data-test-script-state') === 'notRunning'"
                           " && performance.now() - app.wvizChanged >= quiet; }",
                           arg=quiet_ms, timeout=timeout_ms, polling=100)


# Records when the run state last changed (a MutationObserver sees every change, however short the run), starting
# the count now.
_WATCH_RUN_STATE = """() => {
    const app = document.querySelector('[data-testid="stApp"]');
    if (!app.wvizObserver) {
        app.wvizObserver = new MutationObserver(() => { app.wvizChanged = performance.now(); });
        app.wvizObserver.observe(app, {attributes: true, attributeFilter: ['data-test-script-state']});
    }
    app.wvizChanged = performance.now();
}"""


def plot_data(page) -> list:
    """The traces of every Plotly chart on the page, as the browser holds them (graph div .data)."""
    return page.evaluate("() => Array.from(document.querySelectorAll('.js-plotly-plot'))"
                         ".map(gd => JSON.parse(JSON.stringify(gd.data || [])))")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_browser(pw):
    """Debian's chromium, headless, with the flags this closed network needs."""
    return pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)


@contextlib.contextmanager
def running_app(script: Path = ROOT / "app.py"):
    """A fresh streamlit server for ``script`` on a free loopback port; yields its URL."""
    with serving(script) as (url, _):
        yield url


LOGS: dict[str, Path] = {}  # URL of a running server -> its log (stdout and stderr), which log_tail reads


def log_tail(url: str, lines: int = 60) -> str:
    """The last ``lines`` lines the server at ``url`` printed (a failed browser test shows them: a page's error or a
    download's exception is in the server's log, not the browser's)."""
    return "\n".join(LOGS[url].read_text(errors="replace").splitlines()[-lines:])


@contextlib.contextmanager
def serving(script: Path = ROOT / "app.py"):
    """As running_app, yielding (URL, the server's Popen) for those who watch the process (bench_capacity)."""
    port = _free_port()
    env = {**os.environ, "WVIZ_DEVICE": "cpu"}
    # a file, not a pipe: nobody reads the log until a test fails or the server ends, and a full pipe blocks
    log = tempfile.NamedTemporaryFile(prefix="wviz-server-", suffix=".log")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(script), "--server.port", str(port),
         "--server.headless", "true", "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    LOGS[url] = Path(log.name)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(url + "/_stcore/health", timeout=2).read() == b"ok":
                break
        except OSError:
            time.sleep(0.5)
    else:
        proc.kill()
        log.seek(0)
        raise RuntimeError("streamlit did not start:\n" + log.read().decode())
    try:
        yield url, proc
    finally:
        proc.terminate()
        proc.wait(10)
        del LOGS[url]
        log.close()


def slider_thumb(page, key: str):
    """The thumb of the slider keyed ``key`` (its range input sits inside the thumb) once drawn, scrolled into
    view, and its track's box: Streamlit draws a slider's chunk a moment after the page's run ends."""
    page.wait_for_selector(f".st-key-{key} input[type=range]", state="attached")
    thumb = page.locator(f".st-key-{key} input[type=range]").locator("xpath=../..")
    thumb.scroll_into_view_if_needed()
    return thumb, thumb.locator("xpath=..").bounding_box()


def watched(page, key: str) -> None:
    """Wait until the live component (wviz/ui/js/drag.js) watches the slider keyed ``key``: it attaches a frame or
    more after the slider is drawn, and a move before that is drawn on release only."""
    page.wait_for_function("key => (window.__wvizDrag?.watching || []).includes(key)", arg=key)


def drag(page, key: str, to: float, seconds: float = 2.0, every_ms: float = 8.0, release: bool = True) -> int:
    """Drag the live slider keyed ``key``, once watched, from its thumb to the fraction ``to`` (0 left end, 1 right
    end) of its track in ``seconds``, one mouse move every ``every_ms``; the number of moves sent."""
    thumb, track = slider_thumb(page, key)
    watched(page, key)
    box = thumb.bounding_box()
    x0, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    x1 = track["x"] + to * track["width"]
    page.mouse.move(x0, y)
    page.mouse.down()
    steps = max(1, round(seconds * 1000 / every_ms))
    start = time.perf_counter()
    for i in range(1, steps + 1):
        page.mouse.move(x0 + (x1 - x0) * i / steps, y)
        time.sleep(max(0.0, start + i * every_ms / 1000 - time.perf_counter()))
    if release:
        page.mouse.up()
    return steps


def live_frames(page) -> list[dict]:
    """The frames the live component (wviz/ui/js/drag.js) has drawn since the page loaded, oldest first."""
    return page.evaluate("() => (window.__wvizDrag || {frames: []}).frames")
