"""`make serve`: two replicas behind nginx. Browsers move sliders through the proxy, a share link opens the same
state on the other replica, every session stays on its replica, and Ctrl-C leaves nothing running."""
import contextlib
import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import defaultdict
from pathlib import Path

from deploy.serve import free_ports, port_free, read_replicas, streamlit_static
from tests.e2e.harness import ROOT, SLIDERS, plot_data
from tests.e2e.sharing import move_slider, open_page, shown_link

READY = re.compile(r"wviz: \d+ replicas? behind nginx at (\S+)")
PAGES = ("attention_transport", "gaussian_w2")
START_S, STOP_S = 300, 60
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no $http_proxy for 127.0.0.1


def stat_fields(pid: int) -> list[str]:
    """/proc/<pid>/stat after the command name: [state, parent pid, ...]; [] once the process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return []


def alive(pid: int) -> bool:
    return stat_fields(pid)[:1] not in ([], ["Z"])


def workers(master: int) -> list[int]:
    """nginx's worker processes: the children of its master."""
    return [int(p.name) for p in Path("/proc").glob("[0-9]*") if stat_fields(int(p.name))[1:2] == [str(master)]]


def access_log(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "access.log").read_text().splitlines() if line.strip()]


def upstreams_by_key(folder: Path) -> dict[str, set[str]]:
    """sticky key (the wviz_replica cookie, or the request id it is then set to) -> the replicas that answered."""
    found = defaultdict(set)
    for entry in access_log(folder):
        if entry["upstream"]:
            found[entry["sticky"]].add(entry["upstream"])
    return found


def stop_leftovers(folder: Path, ports: range) -> None:
    """After a failed test: the replicas and the nginx that serve.py started for ``folder`` and left running (by
    their command lines, since a pid may have been reused by then)."""
    for p in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if str(folder) in cmd and cmd.startswith("nginx") or any(f"--server.port {q} " in cmd for q in ports):
                os.kill(int(p.name), signal.SIGTERM)


@contextlib.contextmanager
def started(command: list[str], port: int, n: int):
    """``command`` (serving on ``port`` with ``n`` replicas) in its own process group, until it prints its ready
    line; yields (its Popen, the proxy's URL, what it said so far). Whatever is left running at the end is
    stopped, for a test that failed before stopping it as a user would; its folder .serve/<port> is removed if
    the test passed."""
    log = tempfile.TemporaryFile()  # a file, not a pipe: nobody reads while the servers write
    proc = subprocess.Popen(command, cwd=ROOT, env={**os.environ, "WVIZ_DEVICE": "cpu"}, stdout=log,
                            stderr=subprocess.STDOUT, process_group=0)

    def said() -> str:
        log.seek(0)
        return log.read().decode(errors="replace")

    try:
        deadline = time.time() + START_S
        while not (ready := READY.search(said())):
            assert proc.poll() is None and time.time() < deadline, f"no ready line:\n{said()}"
            time.sleep(1)
        yield proc, ready.group(1).replace("localhost", "127.0.0.1"), said
        shutil.rmtree(ROOT / ".serve" / str(port))  # passed: its logs are of no more use
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)  # as Ctrl-C would
            try:
                proc.wait(STOP_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        stop_leftovers(ROOT / ".serve" / str(port), range(port + 1, port + 1 + n))
        log.close()


def gone(pids: list[int], within_s: float = 10) -> bool:
    deadline = time.time() + within_s
    while any(alive(p) for p in pids) and time.time() < deadline:
        time.sleep(0.2)
    return not any(alive(p) for p in pids)


def test_make_serve_two_replicas_sticky_sessions_share_links_and_ctrl_c(browser):
    port = free_ports(3)
    folder = ROOT / ".serve" / str(port)
    with started(["make", "serve", "REPLICAS=2", f"PORT={port}"], port, 2) as (proc, url, said):
        pids = read_replicas(folder)
        assert sorted(pids) == [port + 1, port + 2], pids
        master = int((folder / "nginx.pid").read_text())
        nginx = [master, *workers(master)]
        assert len(nginx) == 2, nginx

        # Requests without the cookie are spread over both replicas (hashed by request id: all 20 on one would
        # happen once in half a million runs), and each answer sets the cookie.
        for _ in range(20):
            with DIRECT.open(f"{url}/_stcore/health", timeout=30) as answer:
                assert answer.read() == b"ok"
                assert any(c.startswith("wviz_replica=") for c in answer.headers.get_all("Set-Cookie"))
        spread = upstreams_by_key(folder)
        assert set().union(*spread.values()) == {f"127.0.0.1:{p}" for p in pids}

        # Streamlit's frontend comes from nginx itself: gzipped, kept by the browser, byte for byte the package's
        # file, and no replica sees the request.
        script = next((streamlit_static() / "static" / "js").glob("PlotlyChart.*.js"))
        asked = urllib.request.Request(f"{url}/static/js/{script.name}", headers={"Accept-Encoding": "gzip"})
        with DIRECT.open(asked, timeout=30) as answer:
            assert answer.headers["Content-Encoding"] == "gzip", answer.headers
            assert "max-age=315360000" in answer.headers["Cache-Control"], answer.headers
            body = answer.read()
        assert gzip.decompress(body) == script.read_bytes() and len(body) < len(script.read_bytes()) / 2
        served = [e for e in access_log(folder) if script.name in e["request"]]
        assert [(e["status"], e["upstream"]) for e in served] == [(200, "")], served

        # Two students on two pages, each moving the page's main slider through the proxy.
        contexts, links, after = [], {}, {}
        for path in PAGES:
            contexts.append(browser.new_context(viewport={"width": 1400, "height": 1000}))
            page = contexts[-1].new_page()
            open_page(page, f"{url}/{path}")
            before = plot_data(page)
            move_slider(page, SLIDERS[path])
            after[path] = plot_data(page)
            assert after[path] != before, path
            assert f"{SLIDERS[path]}=" in page.url, page.url
            links[path] = shown_link(page)
            assert links[path].split("?")[1] == page.url.split("?")[1], (links[path], page.url)
        cookies = [c["value"] for ctx in contexts for c in ctx.cookies() if c["name"] == "wviz_replica"]
        assert len(set(cookies)) == 2, cookies
        first_replica = upstreams_by_key(folder)[cookies[0]]

        # A third browser, whose cookie (one of the 20 above) sends it to the other replica than the first
        # student's, opens both links: the state travels in the link, not in a replica.
        other = next(key for key, got in spread.items() if got != first_replica)
        contexts.append(browser.new_context(viewport={"width": 1400, "height": 1000}))
        contexts[-1].add_cookies([{"name": "wviz_replica", "value": other, "url": url}])
        fresh = contexts[-1].new_page()
        for path in PAGES:
            open_page(fresh, links[path])
            reproduced = plot_data(fresh)  # the same figures (and a background panel that finished meanwhile)
            assert reproduced[:len(after[path])] == after[path], path

        for context in contexts:
            context.close()  # nginx logs a websocket when it closes
        time.sleep(2)
        by_key = upstreams_by_key(folder)
        assert by_key[other] == spread[other] != first_replica
        for key in [*cookies, other]:
            assert len(by_key[key]) == 1, (key, by_key[key])  # every request of a session went to one replica
        streams = [e for e in access_log(folder) if e["request"].startswith("GET /_stcore/stream")]
        assert {e["sticky"] for e in streams} >= {*cookies, other}
        assert {e["status"] for e in streams} == {101}  # every websocket upgraded through the proxy

        # Ctrl-C in the terminal: SIGINT to the foreground process group (make and serve.py).
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(STOP_S)
        assert "wviz: stopped" in said() and "Traceback" not in said(), said()
        assert gone([*pids.values(), *nginx]), said()
        assert all(port_free(p) for p in (port, port + 1, port + 2))


def test_serve_restarts_a_replica_that_died_and_exits_0_on_sigterm():
    port = free_ports(2)
    folder = ROOT / ".serve" / str(port)
    command = [sys.executable, "deploy/serve.py", "--replicas", "1", "--port", str(port)]
    with started(command, port, 1) as (proc, url, said):
        assert "wviz: 1 replica behind nginx" in said()
        (pid,) = read_replicas(folder).values()
        os.kill(pid, signal.SIGKILL)
        deadline = time.time() + START_S
        while "is back" not in said():
            assert time.time() < deadline and proc.poll() is None, said()
            time.sleep(1)
        assert f"the replica on port {port + 1} was killed by signal 9; restarting it" in said()
        (new_pid,) = read_replicas(folder).values()
        assert new_pid != pid and alive(new_pid)
        with DIRECT.open(f"{url}/_stcore/health", timeout=30) as answer:
            assert answer.read() == b"ok"
        master = int((folder / "nginx.pid").read_text())
        nginx = [master, *workers(master)]
        proc.terminate()
        assert proc.wait(STOP_S) == 0, said()
        assert said().rstrip().endswith("wviz: stopped")
        assert gone([new_pid, *nginx])
        assert port_free(port) and port_free(port + 1)
