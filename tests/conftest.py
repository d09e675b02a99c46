"""Every test session gets its own disk cache (wviz.disk_cache): a result written by an earlier run, or found in
the user's ~/.cache/wviz, must not stand in for a computation a test checks. Servers the tests start inherit it.
A module of transformer forwards runs torch on one thread (``one_thread``)."""
import pytest
import torch


@pytest.fixture(scope="session", autouse=True)
def disk_cache_dir(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WVIZ_CACHE_DIR", str(tmp_path_factory.mktemp("wviz_cache")))
        yield


@pytest.fixture(scope="module")
def one_thread():
    """torch on one thread for the module, then as many as before."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
