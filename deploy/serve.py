"""`make serve`: wviz for a class, N Streamlit processes (replicas) behind nginx on one port. Stdlib only.

    python deploy/serve.py --replicas 2 --port 8501

Replica i (1..N) listens on 127.0.0.1:PORT+i, nginx on PORT (every interface). nginx (deploy/nginx.conf, rendered
into .serve/PORT/) keeps each browser on one replica by a cookie, since a Streamlit session, its websocket, its
uploads and its media live in one process. This script starts the replicas and waits for each to answer, starts
nginx, writes .serve/PORT/replicas ("<port> <pid>" a line, for the benches), then checks every replica's
/_stcore/health every HEALTH_EVERY_S seconds and restarts one that died or stopped answering. Ctrl-C (SIGINT),
SIGTERM or SIGHUP stops nginx and every replica and exits 0. Logs: .serve/PORT/replica-<port>.log, error.log and
access.log (nginx, one JSON object a request).
"""
from __future__ import annotations

import argparse
import importlib.util
import math
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = Path(__file__).with_name("nginx.conf")
NGINX = "/usr/sbin/nginx"
# wviz.disk_cache's default folder, named here so that it is printed and every replica gets the same one
# (tests/test_disk_cache.py checks that the two agree).
CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "wviz"
# nginx's passive check: after 2 failed connections it leaves a replica alone for 10 s
UPSTREAM = "        server 127.0.0.1:{port} max_fails=2 fail_timeout=10s;"
HEALTH_EVERY_S = 5
HEALTH_TIMEOUT_S = 10
# Restart after this many unanswered checks in a row (about a minute): a replica busy with a long rerun still
# answers /_stcore/health, from its own event loop, within seconds.
MISSES_BEFORE_RESTART = 4
# Streamlit's upload limit in MB, .streamlit/config.toml's server.maxUploadSize: the cap on an uploaded model
# (wviz.models.safety.MAX_MODEL_MB), raised by WVIZ_MAX_MODEL_MB; nginx lets a request through with FORM_MB more
# for the multipart form around the file.
UPLOAD_MB, FORM_MB = 600, 8
START_TIMEOUT_S = 180  # a cold start (torch, the first page's imports) on a busy 2-core machine
STOP_TIMEOUT_S = 10
# urllib would send 127.0.0.1 through $http_proxy where one is set
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass
class Replica:
    port: int
    log: Path
    proc: subprocess.Popen | None = None
    misses: int = 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=2, help="Streamlit processes (default 2)")
    parser.add_argument("--port", type=int, default=8501, help="nginx's port; the replicas take the next ones")
    args = parser.parse_args(argv)
    if args.replicas < 1:
        parser.error("--replicas must be at least 1")
    return args


def port_free(port: int) -> bool:
    """Whether a server could listen on ``port`` now (SO_REUSEADDR as nginx and Streamlit set it: connections
    closing on it do not count)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True


def replica_env(replicas: int) -> dict[str, str]:
    """The replicas' environment: one shared disk cache, and the cores split between them (each torch would
    otherwise start a thread per core, and threads beyond the cores slow every process down)."""
    env = dict(os.environ)
    env.setdefault("WVIZ_CACHE_DIR", str(CACHE_DIR))
    env.setdefault("OMP_NUM_THREADS", str(max(1, len(os.sched_getaffinity(0)) // replicas)))
    return env


def upload_mb(env: dict[str, str]) -> int:
    """The replicas' upload limit in MB: UPLOAD_MB, or WVIZ_MAX_MODEL_MB where that is a larger number (wviz itself
    says what is wrong with one that is not a number, when a model is uploaded)."""
    try:
        cap = float(env.get("WVIZ_MAX_MODEL_MB", ""))
    except ValueError:
        return UPLOAD_MB
    return max(UPLOAD_MB, math.ceil(cap)) if math.isfinite(cap) else UPLOAD_MB


def start_replica(replica: Replica, env: dict[str, str]) -> None:
    with open(replica.log, "ab") as log:
        # Its own process group: Ctrl-C in the terminal reaches this script alone, which stops nginx before the
        # replicas and does not take their exit for a crash to restart.
        replica.proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(replica.port),
             "--server.address", "127.0.0.1", "--server.headless", "true", "--browser.gatherUsageStats", "false",
             "--server.maxUploadSize", str(upload_mb(env))],
            cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, process_group=0)
    replica.misses = 0


def healthy(port: int) -> bool:
    try:
        with _DIRECT.open(f"http://127.0.0.1:{port}/_stcore/health", timeout=HEALTH_TIMEOUT_S) as answer:
            return answer.read() == b"ok"
    except OSError:
        return False


def wait_until_healthy(name: str, proc: subprocess.Popen, port: int, log: Path) -> None:
    """Until ``name`` (process ``proc``) answers the health check on ``port``; RuntimeError with its log's end if it
    exits first or takes longer than START_TIMEOUT_S."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while not healthy(port):
        if proc.poll() is not None or time.monotonic() > deadline:
            why = f"exited with status {proc.returncode}" if proc.returncode is not None else "did not answer"
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:]) if log.exists() else ""
            raise RuntimeError(f"{name} on port {port} {why} ({log}):\n{tail}")
        time.sleep(0.5)


def free_ports(n: int) -> int:
    """A port P with P .. P+n-1 all free (nginx on P, the replicas on the next ones): for tests and benches that
    start this script beside other servers."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + n <= 65536 and all(port_free(p) for p in range(port, port + n)):
            return port


def read_replicas(folder: Path) -> dict[int, int]:
    """port -> pid of each replica, as .serve/PORT/replicas lists them now (rewritten after a restart)."""
    pairs = (line.split() for line in (folder / "replicas").read_text().splitlines() if line.strip())
    return {int(port): int(pid) for port, pid in pairs}


def write_replicas(folder: Path, replicas: list[Replica]) -> None:
    """.serve/PORT/replicas, replaced whole (the benches read it while a restart rewrites it)."""
    tmp = folder / "replicas.tmp"
    tmp.write_text("".join(f"{r.port} {r.proc.pid}\n" for r in replicas))
    os.replace(tmp, folder / "replicas")


def render_conf(port: int, replica_ports: list[int], upload: int = UPLOAD_MB) -> str:
    """deploy/nginx.conf for nginx on ``port`` before the replicas on ``replica_ports``, taking uploads of
    ``upload`` MB (upload_mb) with their form and serving Streamlit's frontend files from its package folder."""
    upstreams = "\n".join(UPSTREAM.format(port=p) for p in replica_ports)
    return (TEMPLATE.read_text().replace("{upstreams}", upstreams).replace("{port}", str(port))
            .replace("{body_mb}", str(upload + FORM_MB)).replace("{streamlit_static}", str(streamlit_static())))


def streamlit_static() -> Path:
    """The folder of Streamlit's frontend files (index.html, static/js, ...) in the replicas' Python, found without
    importing Streamlit."""
    spec = importlib.util.find_spec("streamlit")
    if spec is None or not spec.submodule_search_locations:
        sys.exit(f"{sys.executable} has no streamlit: run `make serve`, which installs it first")
    return Path(spec.submodule_search_locations[0]) / "static"


def start_nginx(folder: Path, port: int, replica_ports: list[int], upload: int = UPLOAD_MB) -> subprocess.Popen:
    """nginx in the foreground of its own process group, everything it writes inside ``folder``; returns once it
    answers for a replica on ``port``."""
    (folder / "tmp").mkdir(exist_ok=True)
    (folder / "nginx.conf").write_text(render_conf(port, replica_ports, upload))
    log = folder / "error.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen([NGINX, "-p", f"{folder}/", "-c", str(folder / "nginx.conf"), "-e", str(log),
                                 "-g", "daemon off;"], cwd=folder, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, process_group=0)
    wait_until_healthy("nginx", proc, port, log)
    return proc


def stop(*procs: subprocess.Popen | None) -> None:
    """Terminate them all, wait up to STOP_TIMEOUT_S, kill those still running."""
    running = [p for p in procs if p is not None and p.poll() is None]
    for p in running:
        p.terminate()
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for p in running:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def check(replica: Replica, env: dict[str, str]) -> bool:
    """One health check of ``replica``; restarts it if it died or missed MISSES_BEFORE_RESTART checks in a row.
    Returns whether it was restarted."""
    if (status := replica.proc.poll()) is not None:
        why = f"exited with status {status}" if status >= 0 else f"was killed by signal {-status}"
    elif healthy(replica.port):
        replica.misses = 0
        return False
    else:
        replica.misses += 1
        if replica.misses < MISSES_BEFORE_RESTART:
            return False
        why = f"did not answer its health check {replica.misses} times in a row"
    print(f"wviz: the replica on port {replica.port} {why}; restarting it", flush=True)
    stop(replica.proc)
    start_replica(replica, env)
    try:
        wait_until_healthy("the replica", replica.proc, replica.port, replica.log)
        print(f"wviz: the replica on port {replica.port} is back", flush=True)
    except RuntimeError as err:  # tried again at the next check
        print(f"wviz: {err}", flush=True)
    return True


def watch(folder: Path, replicas: list[Replica], nginx: subprocess.Popen, env: dict[str, str]) -> None:
    """Check every replica every HEALTH_EVERY_S seconds, until a signal or nginx's exit."""
    while True:
        time.sleep(HEALTH_EVERY_S)
        if nginx.poll() is not None:
            raise RuntimeError(f"nginx exited with status {nginx.returncode} (see {folder / 'error.log'})")
        if any([check(r, env) for r in replicas]):  # a list: every replica is checked
            write_replicas(folder, replicas)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    ports = [args.port + i for i in range(args.replicas + 1)]
    if not Path(NGINX).exists():
        print(f"wviz: {NGINX} is missing: `make nginx` installs Debian's nginx", file=sys.stderr)
        return 1
    if busy := [p for p in ports if not port_free(p)]:
        print(f"wviz: port(s) {busy} in use (another `make serve`?); choose PORT=...", file=sys.stderr)
        return 1
    folder = ROOT / ".serve" / str(args.port)
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.log"):  # the logs, access.log included, are this run's (the benches read it)
        old.unlink()
    replicas = [Replica(p, folder / f"replica-{p}.log") for p in ports[1:]]
    env = replica_env(args.replicas)
    nginx, status = None, 0
    # SIGINT too: a shell starts a background job with SIGINT ignored, and Python then installs no handler.
    # SIGHUP only where it is not ignored, as under nohup.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if sig != signal.SIGHUP or signal.getsignal(sig) != signal.SIG_IGN:
            signal.signal(sig, _interrupt)
    try:
        for r in replicas:
            start_replica(r, env)
        write_replicas(folder, replicas)
        for r in replicas:
            wait_until_healthy("the replica", r.proc, r.port, r.log)
        nginx = start_nginx(folder, args.port, ports[1:], upload_mb(env))
        print(f"wviz: cache {env['WVIZ_CACHE_DIR']}; logs in {folder}", flush=True)
        plural = "replicas" if args.replicas > 1 else "replica"
        print(f"wviz: {args.replicas} {plural} behind nginx at http://localhost:{args.port} (Ctrl-C stops everything)",
              flush=True)
        watch(folder, replicas, nginx, env)
    except KeyboardInterrupt:
        print("\nwviz: stopping nginx and the replicas", flush=True)
    except RuntimeError as err:
        print(f"wviz: {err}", file=sys.stderr, flush=True)
        status = 1
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # a second Ctrl-C must not cut the clean-up short
            signal.signal(sig, signal.SIG_IGN)
        stop(nginx)  # first: no request reaches a replica that is going
        stop(*(r.proc for r in replicas))
    print("wviz: stopped", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
