"""Every test run gets its own disk cache (wviz.disk_cache): a result written by an earlier run, or found in
the user's ~/.cache/wviz, must not stand in for a computation a test checks. (The results shipped in assets/cache
do: each is checked to be the one the app asks for now, tests/test_precompute.py; the computations behind them
are tested on their own inputs.) Servers the tests start inherit it,
and so do the workers of one run (pytest-xdist, `make test`), as the replicas of `make serve` share theirs.
A module of transformer forwards runs torch on one thread (``one_thread``); so does every worker when several
share the cores."""
import os

import pytest
import torch


def pytest_configure(config):
    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
        torch.set_num_threads(1)   # two workers of two threads each on two cores wait on each other


@pytest.fixture(scope="session", autouse=True)
def disk_cache_dir(tmp_path_factory):
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):   # the run's folder, above each worker's own
        root = root.parent
    folder = root / "wviz_cache"
    folder.mkdir(exist_ok=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WVIZ_CACHE_DIR", str(folder))
        yield


@pytest.fixture(scope="module")
def one_thread():
    """torch on one thread for the module, then as many as before."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
