"""Results of many seconds shared on disk by every server process of a machine, and kept across restarts.

Each Streamlit process has its own ``st.cache_*`` and ``ui.background`` store: behind nginx (``make serve``) every
replica would spend the seconds of Figure 4 (views.real_transformer.deviation) or of the inspector's dataset panel
(wviz.vit.panel.evaluate_panel) again. With :func:`cached` the first process computes such a result
and writes it to a file named by its job's parameters and the version of its computation; the others load it.

Results of the app's first visit at its defaults ship with it, in assets/cache (:data:`PRECOMPUTED`, written by `make
cache`, ``python -m wviz.precompute``): :func:`cached` reads a file there first, so no one waits for them, and no
test run computes them again.

A file is safetensors: the tensors as tensors, everything else (dataclasses, dicts, tuples, numbers, strings) as
JSON in its metadata. Loading executes nothing: no pickle, and a dataclass is rebuilt only as one of the types the
caller names. A file is written under a temporary name and renamed (os.replace), so no process reads half of one.
A process computing a result holds a lock beside its file (flock), so the processes asking for it meanwhile wait
for the file rather than compute it again. Loaded tensors are on the CPU.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import tempfile
import warnings
from pathlib import Path
from collections.abc import Callable
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save as save_tensors

__all__ = ["MAX_ENTRIES", "PRECOMPUTED", "folder", "address", "cached", "precomputed"]

MAX_ENTRIES = 64  # files kept, the least recently used removed first: Figure 4 at one alpha is about 1 MB
_SUFFIX = ".safetensors"
_LOCK = ".lock"   # beside each result: held while it is computed
PRECOMPUTED = Path(__file__).resolve().parents[1] / "assets" / "cache"   # read only, never written by cached()


def folder() -> Path:
    """Where the results live: $WVIZ_CACHE_DIR, else wviz/ in the user's cache folder ($XDG_CACHE_HOME or
    ~/.cache). deploy/serve.py names the same folder to its replicas."""
    if os.environ.get("WVIZ_CACHE_DIR"):
        return Path(os.environ["WVIZ_CACHE_DIR"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "wviz"


def cached(name: str, params: dict, version: int, compute: Callable[[], Any], types: tuple[type, ...] = ()) -> Any:
    """``compute()`` once for every process that uses the same folder: its result is loaded from the file of
    (name, params, version) when there is one, else computed and written there.

    params (JSON: numbers, strings, lists) must hold everything the result depends on; ``version`` is the
    computation's, raised whenever its numbers change, so that no file of the old code is read. The result may
    nest dataclasses of ``types``, dicts with string keys, tuples, lists, tensors, numbers, strings and None. A file
    that cannot be read is computed again; a folder that cannot be written only costs the sharing.
    """
    file, key = address(name, params, version)
    found = _read(PRECOMPUTED / file, key, types, touch=False)
    if found is not None:
        return found[0]
    where = folder()
    path = where / file
    found = _read(path, key, types)
    if found is not None:
        return found[0]
    # a process computing this result holds its lock: the others wait for its file, not compute it again (a class
    # opening the inspector at once, or the workers of `make test`)
    with _locked(path):
        found = _read(path, key, types)
        if found is not None:
            return found[0]
        result = compute()
        try:
            _save(path, key, result, types)
            _prune(where)
        except OSError as err:
            warnings.warn(f"wviz: the result is not shared with other server processes, could not write {path}: "
                          f"{err}", stacklevel=2)
    return result


def address(name: str, params: dict, version: int) -> tuple[str, str]:
    """(the file name, the key written in it) of the result of (name, params, version)."""
    if not re.fullmatch(r"[\w-]+", name):
        raise ValueError(f"a cache name is letters, digits, _ and -, got {name!r}")
    key = json.dumps({"name": name, "params": params, "version": version}, sort_keys=True)
    return f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:32]}{_SUFFIX}", key


def precomputed(name: str, params: dict, version: int) -> bool:
    """Whether assets/cache holds the result of (name, params, version)."""
    file, key = address(name, params, version)
    try:
        with safe_open(str(PRECOMPUTED / file), "pt") as f:
            return (f.metadata() or {}).get("key") == key
    except (OSError, SafetensorError):
        return False


def _read(path: Path, key: str, types: tuple[type, ...], touch: bool = True) -> tuple[Any] | None:
    """(the result,) from its file, or None when there is none or it cannot be read (then it is computed again)."""
    try:
        return (_load(path, key, types, touch),)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, SafetensorError) as err:
        warnings.warn(f"wviz: computing again, could not read {path}: {err}", stacklevel=3)
        return None


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive lock on the result's lock file while it is computed (flock: released if the process dies); none
    where the folder cannot be written or the system has no flock (Windows), which only costs the sharing."""
    try:
        import fcntl

        path.parent.mkdir(parents=True, exist_ok=True)
        lock = open(path.with_suffix(_LOCK), "a")
    except (ImportError, OSError):
        yield
        return
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _save(path: Path, key: str, result: Any, types: tuple[type, ...]) -> None:
    tensors: dict[str, torch.Tensor] = {}
    tree = _encode(result, tensors, types)
    data = save_tensors(tensors, metadata={"key": key, "tree": json.dumps(tree)})
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".tmp")  # not *.safetensors: unpruned
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _load(path: Path, key: str, types: tuple[type, ...], touch: bool) -> Any:
    with safe_open(str(path), "pt") as f:
        meta = f.metadata() or {}
        if meta.get("key") != key:  # a hash collision, or a file not written by cached()
            raise ValueError("the file holds another result")
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    if touch:
        os.utime(path)  # recently used: _prune keeps it
    return _decode(json.loads(meta["tree"]), tensors, {t.__qualname__: t for t in types})


def _encode(obj: Any, tensors: dict[str, torch.Tensor], types: tuple[type, ...]) -> dict:
    """obj as a JSON tree of one-key nodes; its tensors go to ``tensors`` (copied: safetensors refuses views that
    share memory)."""
    if isinstance(obj, torch.Tensor):
        name = str(len(tensors))
        tensors[name] = obj.detach().cpu().contiguous().clone()
        return {"tensor": name}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        if type(obj) not in types:
            raise TypeError(f"{type(obj).__qualname__} is not among the types given to cached()")
        fields = {f.name: _encode(getattr(obj, f.name), tensors, types) for f in dataclasses.fields(obj)}
        return {"dataclass": [type(obj).__qualname__, fields]}
    if isinstance(obj, dict):
        if not all(isinstance(k, str) for k in obj):
            raise TypeError("cached() stores dicts with string keys only")
        return {"dict": {k: _encode(v, tensors, types) for k, v in obj.items()}}
    if isinstance(obj, (tuple, list)):
        return {type(obj).__name__: [_encode(v, tensors, types) for v in obj]}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return {"value": obj}
    raise TypeError(f"cached() cannot store a {type(obj).__qualname__}")


def _decode(node: dict, tensors: dict[str, torch.Tensor], types: dict[str, type]) -> Any:
    ((kind, body),) = node.items()
    if kind == "tensor":
        return tensors[body]
    if kind == "dataclass":
        name, fields = body
        return types[name](**{k: _decode(v, tensors, types) for k, v in fields.items()})
    if kind == "dict":
        return {k: _decode(v, tensors, types) for k, v in body.items()}
    if kind in ("tuple", "list"):
        items = [_decode(v, tensors, types) for v in body]
        return tuple(items) if kind == "tuple" else items
    if kind == "value":
        return body
    raise ValueError(f"unknown node {kind!r}")


def _prune(where: Path) -> None:
    """Remove all but the MAX_ENTRIES most recently used files (another process may be removing them too)."""
    def used(p: Path) -> float:
        try:
            return p.stat().st_mtime
        except FileNotFoundError:
            return 0.0

    for old in sorted(where.glob("*" + _SUFFIX), key=used, reverse=True)[MAX_ENTRIES:]:
        old.unlink(missing_ok=True)
        old.with_suffix(_LOCK).unlink(missing_ok=True)   # a process waiting on it at worst computes the result again
