"""How the server process runs wviz: torch threads per session, and the imports frozen out of the collector."""
from __future__ import annotations

import gc
import importlib
import pkgutil

import torch

# Streamlit serves several sessions from one process: more torch threads than cores made a 14 ms loop take
# 3.2 s on a 2-core machine (shared/OT-NOTES.md, item 6).
TORCH_THREADS = 2


def limit_threads() -> None:
    """At most TORCH_THREADS torch threads for this process."""
    torch.set_num_threads(min(TORCH_THREADS, torch.get_num_threads()))


def freeze_imports() -> None:
    """Import every wviz module (and with them torch, plotly, pandas, POT), then hide those long-lived objects from
    the garbage collector: once per server process.

    Streamlit runs a full gc.collect() after every script and fragment run (runner.postScriptGC), holding the GIL
    while it walks every tracked object (about 250,000 once torch is loaded), and sends nothing meanwhile.
    gc.freeze() moves them to a generation the collector skips; what a run allocates is still collected after it.
    """
    if gc.get_freeze_count():
        return
    import wviz

    for module in pkgutil.walk_packages(wviz.__path__, "wviz."):
        importlib.import_module(module.name)
    gc.collect()  # garbage made by the imports goes now, not frozen with them
    gc.freeze()
