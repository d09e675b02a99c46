"""wviz.ui.process: the server's torch threads leave a core to the browser and the other sessions; the imports are
frozen out of the collector once per process. And the server's event loop and HTTP parser are the compiled ones."""
import subprocess
import sys
import textwrap

import torch

from wviz.ui.process import cores, limit_threads, torch_threads


def test_one_core_is_left_to_the_rest_and_at_most_two_threads():
    assert [torch_threads(n) for n in (1, 2, 3, 4, 16)] == [1, 1, 2, 2, 2]


def test_limit_threads_lowers_the_count_and_never_raises_it():
    saved = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        limit_threads()
        assert torch.get_num_threads() == torch_threads(cores())
        torch.set_num_threads(1)   # as OMP_NUM_THREADS=1 would leave it
        limit_threads()
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(saved)


def test_imports_are_frozen_once_per_process():
    """The first call imports every wviz module and freezes; a later call (every run of app.py) does nothing, not
    even walk the packages again. In a fresh interpreter: the test process keeps its collector as it is."""
    script = textwrap.dedent("""
        import gc, pkgutil, sys
        from wviz.ui.process import freeze_imports
        assert gc.get_freeze_count() == 0
        freeze_imports()
        frozen = gc.get_freeze_count()
        assert frozen > 10_000 and "wviz.vit.model" in sys.modules and "wviz.ot" in sys.modules, frozen
        pkgutil.walk_packages = None   # a second walk would fail
        freeze_imports()
        assert gc.get_freeze_count() <= frozen   # nothing frozen again (frozen objects may be freed)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def test_the_server_runs_on_the_compiled_event_loop_and_http_parser():
    """requirements.txt installs uvloop and httptools (BENCHMARKS.md, "First load: the server's event loop and HTTP
    parser"): Streamlit then runs its server on uvloop's loop, and uvicorn's automatic HTTP protocol is httptools'."""
    import uvloop
    from streamlit.web import bootstrap
    from uvicorn.protocols.http.auto import AutoHTTPProtocol
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    assert bootstrap._get_uvloop_loop_factory() is uvloop.new_event_loop
    assert AutoHTTPProtocol is HttpToolsProtocol
