"""wviz.ui.background: a long computation run once per key in a worker thread while pages keep answering."""
import threading
import time

import pytest

from wviz import ui


def poll(key, compute, until, max_entries=8, timeout=10.0):
    """Ask as a page would, until ``until(answer)`` holds."""
    deadline = time.time() + timeout
    while True:
        answer = ui.background(key, compute, max_entries)
        if until(answer) or time.time() > deadline:
            return answer
        time.sleep(0.01)


def test_one_computation_per_key_with_its_progress():
    calls, gate = [], threading.Event()

    def compute(progress):
        calls.append(1)
        progress(1, 4)
        gate.wait(10)
        return 42

    key = ("test", object())
    assert poll(key, compute, lambda a: a[1] == 0.25) == (None, 0.25)  # running: no result, a quarter done
    gate.set()
    assert poll(key, compute, lambda a: a[0] is not None) == (42, 1.0)
    assert ui.background(key, compute) == (42, 1.0)
    assert calls == [1]                                                 # asked many times, computed once


def test_an_error_is_raised_on_every_call_for_its_key():
    def compute(progress):
        raise ValueError("alpha must be positive")

    key = ("test", object())
    with pytest.raises(ValueError, match="alpha must be positive"):
        poll(key, compute, lambda a: False)
    with pytest.raises(ValueError, match="alpha must be positive"):
        ui.background(key, compute)


def test_only_the_last_keys_are_kept():
    calls = []

    def compute(progress):
        calls.append(1)
        return len(calls)

    first, second = ("test", object()), ("test", object())
    assert poll(first, compute, lambda a: a[0] is not None, max_entries=1)[0] == 1
    assert poll(second, compute, lambda a: a[0] is not None, max_entries=1)[0] == 2
    assert poll(first, compute, lambda a: a[0] is not None, max_entries=1)[0] == 3   # evicted: computed again


def test_join_waits_for_the_jobs_asked_for():
    """join: False while a job still runs after the timeout, True once every kept job has ended."""
    from wviz.ui.background import join

    gate = threading.Event()
    key = ("join", object())
    assert ui.background(key, lambda progress: gate.wait(10) and 7) == (None, 0.0)
    assert join(0.05) is False
    gate.set()
    assert join(10) is True
    assert ui.background(key, lambda progress: 0) == (7, 1.0)


def test_forgotten_jobs_end_and_start_again_when_asked():
    """forget(): the running job stops at its next progress report, a waiting one never starts; asking again
    computes anew."""
    from wviz.ui.background import forget, join

    gate, started, reports = threading.Event(), [], []

    def slow(progress):
        started.append("slow")
        gate.wait(10)
        progress(1, 2)           # forgotten by now: ends here
        reports.append("after")
        return 1

    def waiting(progress):
        started.append("waiting")
        return 2

    first, second = ("forget", object()), ("forget", object())
    assert poll(first, slow, lambda a: started == ["slow"]) == (None, 0.0)
    assert ui.background(second, waiting) == (None, 0.0)
    forget()
    gate.set()
    assert join(10) is True and reports == [] and started == ["slow"]
    assert poll(second, waiting, lambda a: a[0] is not None) == (2, 1.0) and started == ["slow", "waiting"]
