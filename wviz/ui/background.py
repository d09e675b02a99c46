"""Work of many seconds, run once per key for the whole server in one worker thread while pages keep answering.

A session runs its reruns one at a time, fragments included: a computation of many seconds inside the script
would hold every slider of the page until it ended. Here the script only asks (background), draws a progress bar
while the answer is not there, and polls (wait_for).
"""
from __future__ import annotations

import atexit
import dataclasses
import queue
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future, wait
from typing import Any

import streamlit as st


@dataclasses.dataclass
class _Job:
    future: Future = dataclasses.field(default_factory=Future)
    done: float = 0.0  # the fraction finished, as compute last reported it
    dropped: bool = False  # forgotten: its next progress report ends it


_JOBS: OrderedDict[Hashable, _Job] = OrderedDict()
_LOCK = threading.Lock()
_QUEUE: queue.SimpleQueue = queue.SimpleQueue()  # (future, compute, progress), run in order by one worker
_worker: threading.Thread | None = None
_STOP = threading.Event()


class _Stopped(Exception):
    """Raised in a job's progress report once the process is exiting, or the job was forgotten."""


def _work() -> None:
    while (job := _QUEUE.get()) is not None:
        future, compute, progress = job
        if future.set_running_or_notify_cancel():  # False: cancelled while it waited
            try:
                future.set_result(compute(progress))
            except BaseException as err:  # noqa: BLE001  (handed to whoever asks for the result)
                future.set_exception(err)


def _start_worker() -> None:
    """The worker, started by the first job. A daemon thread, not a ThreadPoolExecutor, whose workers are joined
    at exit: a server must stop when told to, even in the middle of a job."""
    global _worker
    if _worker is None:
        _worker = threading.Thread(target=_work, name="wviz-background", daemon=True)
        _worker.start()


@atexit.register
def _stop_worker(timeout: float = 5.0) -> None:
    """At exit, end a running job at its next progress report: a thread still inside torch when the interpreter
    goes down can abort the process ("terminate called without an active exception")."""
    _STOP.set()
    if _worker is not None:
        _QUEUE.put(None)
        _worker.join(timeout)


def background(key: Hashable, compute: Callable[[Callable[[int, int], None]], Any],
               max_entries: int = 8) -> tuple[Any, float]:
    """``compute(progress)`` run once per ``key`` for the whole server; returns (its result, 1.0) once it has
    finished, (None, the fraction done) before that (compute reports progress(done, total)).

    compute's exception is raised on every call for that key. The last ``max_entries`` keys asked for are kept;
    a job evicted before it started is cancelled.
    """
    with _LOCK:
        _start_worker()
        job = _JOBS.get(key)
        if job is None:
            job = _JOBS[key] = _Job()

            def progress(done: int, total: int) -> None:
                if _STOP.is_set() or job.dropped:
                    raise _Stopped
                job.done = done / total

            _QUEUE.put((job.future, compute, progress))
            while len(_JOBS) > max_entries:
                _, old = _JOBS.popitem(last=False)
                old.future.cancel()  # no effect once running: it finishes and is dropped
        _JOBS.move_to_end(key)
    if not job.future.done():
        return None, job.done
    return job.future.result(), 1.0


def forget() -> None:
    """Drop every job kept: those waiting never start, the running one ends at its next progress report; the next
    ask for a key starts its job again. For AppTests (tests/app/conftest.py): a test's unfinished work ends with it,
    rather than running in the next test's time."""
    with _LOCK:
        for job in _JOBS.values():
            job.dropped = True
            job.future.cancel()
        _JOBS.clear()


def join(timeout: float | None = None) -> bool:
    """Wait until every job kept (the last ``max_entries`` asked for) has ended, at most ``timeout`` seconds;
    whether they all have. For a caller with no browser polling for it: AppTests (tests/app's ``settle``), where a
    rerun per poll would take the cores from the job it waits for."""
    with _LOCK:
        futures = [job.future for job in _JOBS.values()]
    return not wait(futures, timeout).not_done


def wait_for(key: Hashable, text: str, every: float = 1.0) -> None:
    """While ``background(key, ...)`` has no result: a progress bar, redrawn every ``every`` seconds by a fragment
    (the page's other controls answer in between); once the result is there, one full rerun draws it in place."""
    @st.fragment(run_every=every)
    def poll() -> None:
        with _LOCK:
            job = _JOBS.get(key)
        if job is None or job.future.done():
            st.rerun()
        st.progress(job.done, text=text)

    poll()
