"""wviz.disk_cache: a result computed once is loaded, identical, by the next call (another server process);
files hold no code, are written whole, keyed by parameters and version, and bounded in number."""
import dataclasses
import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from wviz import disk_cache


@dataclasses.dataclass(frozen=True)
class Inner:
    counts: torch.Tensor
    score: float


@dataclasses.dataclass(frozen=True)
class Result:
    maps: torch.Tensor
    inner: Inner
    per_set: dict
    labels: list
    note: str | None
    done: bool


def result() -> Result:
    g = torch.Generator().manual_seed(0)
    maps = torch.randn(3, 4, dtype=torch.float64, generator=g)
    return Result(maps=maps[:, 1:],  # a view: stored as its own values
                  inner=Inner(torch.tensor([1, 0, 7]), float("nan")),
                  per_set={"noise": (torch.rand(5, generator=g), torch.ones(2, dtype=torch.bool), 0.25)},
                  labels=["a", 2, None], note=None, done=True)


def assert_identical(a, b):
    """Equal values, dtypes, shapes and container types, NaN equal to NaN."""
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    elif dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            assert_identical(getattr(a, f.name), getattr(b, f.name))
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            assert_identical(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_identical(x, y)
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b)
    else:
        assert a == b


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WVIZ_CACHE_DIR", str(tmp_path))
    return tmp_path


def counted(value):
    calls = []

    def compute():
        calls.append(1)
        return value
    return compute, calls


def test_a_second_call_loads_the_identical_result_without_computing(cache):
    compute, calls = counted(result())
    first = disk_cache.cached("job", {"alpha": 0.5}, 1, compute, types=(Result, Inner))
    second = disk_cache.cached("job", {"alpha": 0.5}, 1, compute, types=(Result, Inner))
    assert calls == [1]
    assert_identical(first, result())
    assert_identical(second, result())
    (path,) = cache.glob("*.safetensors")
    assert path.name.startswith("job-")


def test_other_parameters_or_version_are_computed_again(cache):
    compute, calls = counted({"x": torch.zeros(2)})
    for params, version in [({"alpha": 0.5}, 1), ({"alpha": 0.25}, 1), ({"alpha": 0.5}, 2), ({"alpha": 0.5}, 1)]:
        disk_cache.cached("job", params, version, compute)
    assert len(calls) == 3 and len(list(cache.glob("*.safetensors"))) == 3


def test_the_file_is_safetensors_with_json_and_holds_no_code(cache):
    disk_cache.cached("job", {"alpha": 0.5}, 1, lambda: result(), types=(Result, Inner))
    (path,) = cache.glob("*.safetensors")
    with safe_open(str(path), "pt") as f:
        meta = f.metadata()
        assert json.loads(meta["key"]) == {"name": "job", "params": {"alpha": 0.5}, "version": 1}
        assert len(list(f.keys())) == 4
    tree = json.loads(meta["tree"])
    assert tree["dataclass"][0] == "Result"  # a name looked up among the types the caller gives, never imported
    assert b"pickle" not in path.read_bytes() and not list(cache.glob(".*.tmp"))


def test_a_type_not_named_is_refused_when_written_and_a_file_not_understood_is_computed_again(cache):
    with pytest.raises(TypeError, match="Inner is not among the types"):
        disk_cache.cached("job", {}, 1, lambda: result(), types=(Result,))
    compute, calls = counted(result())
    disk_cache.cached("job", {}, 1, compute, types=(Result, Inner))
    (path,) = cache.glob("*.safetensors")
    path.write_bytes(b"not a safetensors file")
    with pytest.warns(UserWarning, match="computing again"):
        assert_identical(disk_cache.cached("job", {}, 1, compute, types=(Result, Inner)), result())
    assert len(calls) == 2
    disk_cache.cached("job", {}, 1, compute, types=(Result, Inner))  # the broken file was replaced
    assert len(calls) == 2


def test_a_folder_that_cannot_be_written_only_costs_the_sharing(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("WVIZ_CACHE_DIR", str(tmp_path / "file" / "cache"))  # under a file: mkdir fails
    compute, calls = counted({"x": torch.ones(1)})
    with pytest.warns(UserWarning, match="not shared"):
        assert torch.equal(disk_cache.cached("job", {}, 1, compute)["x"], torch.ones(1))


def test_a_failed_write_leaves_no_file_behind(cache, monkeypatch):
    def refuse(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(disk_cache.os, "replace", refuse)
    with pytest.warns(UserWarning, match="disk full"):
        disk_cache.cached("job", {}, 1, lambda: {"x": torch.ones(1)})
    assert [p.name for p in cache.iterdir() if p.suffix != ".lock"] == []   # the empty lock file may stay


def test_only_the_most_recently_used_files_are_kept(cache, monkeypatch):
    monkeypatch.setattr(disk_cache, "MAX_ENTRIES", 3)
    for alpha in range(4):
        disk_cache.cached("job", {"alpha": alpha}, 1, lambda: {"x": torch.ones(1)})
    assert len(list(cache.glob("*.safetensors"))) == 3
    assert {p.stem for p in cache.glob("*.lock")} == {p.stem for p in cache.glob("*.safetensors")}
    compute, calls = counted({"x": torch.ones(1)})
    disk_cache.cached("job", {"alpha": 0}, 1, compute)  # the oldest went first
    assert calls == [1]


def test_names_are_plain_and_the_default_folder_is_the_one_serve_py_names(monkeypatch, tmp_path):
    with pytest.raises(ValueError, match="letters, digits"):
        disk_cache.cached("../job", {}, 1, lambda: None)
    spec = importlib.util.spec_from_file_location("serve", Path(__file__).parents[1] / "deploy/serve.py")
    monkeypatch.delenv("WVIZ_CACHE_DIR", raising=False)
    for xdg in (None, str(tmp_path)):
        if xdg is None:
            monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
        else:
            monkeypatch.setenv("XDG_CACHE_HOME", xdg)
        serve = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, "serve", serve)  # dataclasses look their module up there
        spec.loader.exec_module(serve)
        assert serve.CACHE_DIR == disk_cache.folder()


COMPUTE_ONCE = """
import sys, time, torch
from wviz import disk_cache

def compute():
    with open(sys.argv[1], "a") as log:
        log.write("computed\\n")
    time.sleep(1.0)
    return {"x": torch.arange(3.0)}

print(disk_cache.cached("job", {"alpha": 1}, 1, compute)["x"].tolist())
"""


def test_processes_asking_at_once_compute_the_result_once(cache, tmp_path):
    """Two processes ask for the same result at the same moment: one computes it (holding its lock), the other
    waits and loads its file (replicas behind nginx, the workers of `make test`)."""
    import os
    import subprocess

    log = tmp_path / "computed.log"
    env = {**os.environ, "WVIZ_CACHE_DIR": str(cache)}
    procs = [subprocess.Popen([sys.executable, "-c", COMPUTE_ONCE, str(log)], env=env, stdout=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert outs == ["[0.0, 1.0, 2.0]\n"] * 2
    assert log.read_text() == "computed\n"
