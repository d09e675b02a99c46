"""How the server process runs wviz: torch threads per session, and the imports frozen out of the collector."""
from __future__ import annotations

import gc
import importlib
import os
import pkgutil

import torch


def torch_threads(cores: int) -> int:
    """Torch threads for a server on ``cores`` cores: one core left to the rest, at most 2.

    Streamlit serves several sessions from one process, and on a lecturer's laptop the browser draws on the same
    cores. A parallel region waits for every one of its threads to get a core, so a thread per core makes every
    small operation wait for the busiest core (BENCHMARKS.md, "Measurements behind design choices" and "Slider
    latency").
    """
    return max(1, min(2, cores - 1))


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def limit_threads() -> None:
    """At most torch_threads(cores()) torch threads for this process (fewer when OMP_NUM_THREADS says so)."""
    torch.set_num_threads(min(torch_threads(cores()), torch.get_num_threads()))


_frozen = False  # set once this process has frozen its imports


def freeze_imports() -> None:
    """Import every wviz module (and with them torch, plotly, pandas, POT), then hide those long-lived objects from
    the garbage collector: once per server process.

    Streamlit runs a full gc.collect() after every script and fragment run (runner.postScriptGC), holding the GIL
    while it walks every tracked object (about 250,000 once torch is loaded), and sends nothing meanwhile.
    gc.freeze() moves them to a generation the collector skips; what a run allocates is still collected after it.
    """
    global _frozen
    if _frozen:  # not gc.get_freeze_count(): it walks every frozen object on every run (BENCHMARKS.md)
        return
    import wviz

    for module in pkgutil.walk_packages(wviz.__path__, "wviz."):
        importlib.import_module(module.name)
    gc.collect()  # garbage made by the imports goes now, not frozen with them
    gc.freeze()
    _frozen = True
