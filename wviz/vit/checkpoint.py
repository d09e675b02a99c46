"""Saving and loading ViT checkpoints safely: nothing in a file is ever executed.

Format written: safetensors (raw tensors + a JSON header) whose metadata holds two JSON strings, ``wviz_config``
(the :class:`~wviz.vit.model.ViTConfig`) and ``wviz_record`` (data, epochs, seed, metrics, class names, the name of
the data's folder, ...).

Formats read, from a path or from uploaded bytes:

* ``.safetensors``: the header is parsed and checked first (wviz.safetensors_header: length, JSON, float dtypes,
  every tensor's byte range equal to its shape's size, the ranges one after another to the end of the file), then
  the tensors are read by the safetensors library;
* ``.pt`` / ``.pth``: a dict {"config": ..., "state_dict": ..., "record": ...} saved by torch.save, read only
  through ``torch.load(weights_only=True)`` (torch's restricted unpickler: tensors and plain containers). A file
  it refuses is refused, with no fallback to a full unpickler.

Then: a size cap (``max_bytes``, default :data:`MAX_BYTES`, or the environment variable WVIZ_MAX_CHECKPOINT_MB),
a sane config (bounded dims, see :data:`wviz.vit.model.BOUNDS`), strict key, shape, dtype, finiteness and size
(|w| <= :data:`MAX_WEIGHT`) checks of every tensor against the model the config builds, and a training record of
plain JSON whose entries have the types and bounds :func:`check_record` asks for. Each failure raises ValueError
with its own message; so does any other error of the parsers on a damaged file (never a retry with a less careful
loader).
"""
from __future__ import annotations

import io
import json
import math
import os
import pickle
import re
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from wviz.safetensors_header import Limits, read_header
from wviz.vit.data import DATASETS, SEVERITIES
from wviz.vit.model import BOUNDS, TERMS, ViTConfig, build_model

__all__ = ["MAX_BYTES", "MAX_WEIGHT", "save_checkpoint", "load_checkpoint", "check_record", "max_bytes_default"]

MAX_BYTES = 50 * 2 ** 20
# a header of 1 MiB describes thousands of tensors (ours are a few kB); the weights are float tensors
CHECKPOINT_HEADER = Limits(1 << 20, {"F64": 8, "F32": 4, "F16": 2, "BF16": 2}, "a checkpoint")
_SUFFIXES = (".safetensors", ".pt", ".pth")
# The largest weight accepted. Trained weights are small (the bundled models' largest is 4.3); a damaged file can
# hold finite values up to 3e38 (one flipped exponent bit) that overflow to inf and NaN in the first forward pass.
MAX_WEIGHT = 1e4


def max_bytes_default() -> int:
    """The size cap: WVIZ_MAX_CHECKPOINT_MB (megabytes) when set, else MAX_BYTES."""
    env = os.environ.get("WVIZ_MAX_CHECKPOINT_MB")
    if env is None:
        return MAX_BYTES
    try:
        mb = float(env)
    except ValueError:
        raise ValueError(f"WVIZ_MAX_CHECKPOINT_MB must be a number of megabytes, not {env!r}") from None
    if not mb > 0:
        raise ValueError(f"WVIZ_MAX_CHECKPOINT_MB must be positive, got {env}")
    return int(mb * 2 ** 20)


def save_checkpoint(model, path, record: dict) -> Path:
    """Write ``model`` (its weights as float32, its config) and the JSON-serialisable ``record`` to ``path``
    (.safetensors). Returns the path.

    Example: a saved model and its record come back unchanged.

    >>> import tempfile
    >>> from pathlib import Path
    >>> import torch
    >>> from wviz.vit.checkpoint import load_checkpoint, save_checkpoint
    >>> from wviz.vit.model import ViTConfig, build_model
    >>> _ = torch.manual_seed(0)
    >>> model = build_model(ViTConfig(image_size=8, patch_size=4, dim=8, depth=1, heads=2))
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = save_checkpoint(model, Path(folder) / "tiny.safetensors", {"epochs": 0})
    ...     loaded, record = load_checkpoint(path)
    >>> loaded.config == model.config, record
    (True, {'epochs': 0})
    >>> all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), loaded.state_dict().values()))
    True
    """
    path = Path(path)
    if path.suffix != ".safetensors":
        raise ValueError(f"checkpoints are written as .safetensors, not {path.suffix or 'no extension'!r}")
    model = getattr(model, "module", model)  # unwrap DistributedDataParallel
    tensors = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in model.state_dict().items()}
    meta = {"format": "wviz-vit-1", "wviz_config": json.dumps(model.config.to_dict()),
            "wviz_record": json.dumps(record, allow_nan=False)}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(st_save(tensors, metadata=meta))
    return path


# ------------------------------------------------------------------------------------------------- reading

def _size(n: int) -> str:
    """A byte count for people: 900 bytes, 5.2 kB, 12.0 MB."""
    if n < 1024:
        return f"{n} bytes"
    return f"{n / 1024:.1f} kB" if n < 2 ** 20 else f"{n / 2 ** 20:.1f} MB"


def _too_big(size: int, max_bytes: int) -> ValueError:
    return ValueError(f"the checkpoint is {_size(size)}, over the limit of {_size(max_bytes)} (the environment "
                      "variable WVIZ_MAX_CHECKPOINT_MB sets the limit, in MB)")


def _read(path_or_bytes, name: str | None, max_bytes: int) -> tuple[bytes, str]:
    """The file's bytes and its suffix, after the size cap (checked before reading a path)."""
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        data = bytes(path_or_bytes)
        suffix = Path(name).suffix.lower() if name else ""
        label = name or "the upload"
    else:
        path = Path(path_or_bytes)
        if not path.is_file():
            raise ValueError(f"no checkpoint file at {path}")
        size = path.stat().st_size
        if size > max_bytes:
            raise _too_big(size, max_bytes)
        data, suffix, label = path.read_bytes(), path.suffix.lower(), path.name
    if not data:
        raise ValueError(f"{label} is empty (0 bytes)")
    if len(data) > max_bytes:
        raise _too_big(len(data), max_bytes)
    if not suffix:  # uploaded bytes without a name: tell the formats apart by their first bytes
        suffix = ".safetensors" if data[8:9] == b"{" else ".pt"
    if suffix not in _SUFFIXES:
        raise ValueError(f"{label}: unsupported file type {suffix!r}; upload a .safetensors, .pt or .pth checkpoint")
    return data, suffix


def _json_entry(meta: dict, key: str, what: str):
    if key not in meta:
        raise ValueError(f"the checkpoint has no {what} (metadata entry {key!r}); was it saved by wviz?")
    try:
        return json.loads(meta[key])
    except (TypeError, ValueError, RecursionError):
        raise ValueError(f"the checkpoint's {what} is not valid JSON") from None


def _from_safetensors(data: bytes):
    meta = read_header(io.BytesIO(data), len(data), CHECKPOINT_HEADER).metadata
    config = _json_entry(meta, "wviz_config", "model config")
    record = _json_entry(meta, "wviz_record", "training record") if "wviz_record" in meta else {}
    try:
        tensors = st_load(data)
    except SafetensorError as err:
        raise ValueError(f"not a valid safetensors file ({err})") from None
    except Exception as err:  # noqa: BLE001 -- whatever else the parser trips on, the file is damaged
        raise ValueError(f"not a valid safetensors file ({err.__class__.__name__}: {str(err)[:200]})") from None
    return config, tensors, record


def _from_torch(data: bytes):
    try:
        obj = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        found = re.search(r"GLOBAL ([\w.]+)", str(err))
        what = f" (`{found.group(1)}`)" if found else ""   # in backticks: st.error reads __main__ as bold
        raise ValueError("the .pt file was refused: it holds objects other than tensors and plain containers"
                         f"{what}, and those are never loaded") from None
    except Exception as err:  # noqa: BLE001 -- a damaged file trips torch's restricted unpickler in many ways
        # (AttributeError, IndexError, TypeError, AssertionError, ...): all mean "damaged", none means "try harder"
        raise ValueError(f"not a readable .pt checkpoint ({err.__class__.__name__}: {str(err)[:200]})") from None
    if not (isinstance(obj, dict) and "config" in obj and "state_dict" in obj):
        raise ValueError("a .pt checkpoint must be a dict with 'config' and 'state_dict' (and optionally 'record')")
    if not isinstance(obj["state_dict"], dict):
        raise ValueError("the .pt checkpoint's 'state_dict' is not a dict of tensors")
    if not (isinstance(obj["config"], dict) and all(isinstance(k, str) for k in obj["config"])
            and _plain_json(obj["config"])):
        raise ValueError("the .pt checkpoint's 'config' is not a JSON object of plain values")
    return obj["config"], obj["state_dict"], obj.get("record", {})


def _plain_json(obj) -> bool:
    """Whether ``obj`` (read from a .pt file, or parsed JSON with NaN) is what JSON can hold, without NaN / inf."""
    try:
        json.dumps(obj, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


def _whole(v, lo: int, hi: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


def _number(v, lo: float, hi: float) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and lo <= v <= hi


def _folder_name(v) -> bool:
    """A plain folder name (no path: no separator, not '.' or '..', no control character): the inspector joins it
    to the folders of WVIZ_DATA, so a record must not lead it anywhere else."""
    return (isinstance(v, str) and 0 < len(v) <= 255 and v not in (".", "..") and "/" not in v and "\\" not in v
            and v.isprintable())


def _names(v, n_classes: int) -> bool:
    return (isinstance(v, list) and len(v) == n_classes
            and all(isinstance(n, str) and 0 < len(n) <= 100 and n.isprintable() for n in v))


def _check_data(record: dict, n_classes: int, image: tuple[int, int] | None, bad) -> None:
    """The entries that say which data the model reads and where a page finds it again (train.py writes them)."""
    for key, lo, hi in (("epochs", 0, 10 ** 6), ("processes", 1, 10 ** 5), ("eval_samples", 1, 4096),
                        ("eval_seeds", 1, 16), ("channels", *BOUNDS["channels"]),
                        ("image_size", *BOUNDS["image_size"])):
        if key in record and not _whole(record[key], lo, hi):
            bad(f"'{key}'", f"a whole number from {lo} to {hi}", record[key])
    for key, low, high in (("val_fraction", 0, 0.5), ("kappa", 0, 100)):   # float bounds: not the ints lo, hi
        if record.get(key) is not None and not _number(record[key], low, high):
            bad(f"'{key}'", f"a number from {low} to {high}", record[key])
    for key in ("pretrain_term", "finetune_term"):
        if record.get(key) is not None and record[key] not in TERMS:
            bad(f"'{key}'", f"one of {', '.join(TERMS)}", record[key])
    if image is not None:
        for key, want in zip(("channels", "image_size"), image):
            if key in record and record[key] != want:
                bad(f"'{key}'", f"the model config's {key} ({want})", record[key])
    if "data" in record and record["data"] not in DATASETS:
        bad("'data'", f"one of {', '.join(DATASETS)}", record["data"])
    if record.get("data_folder") is not None and not _folder_name(record["data_folder"]):
        bad("'data_folder'", "a folder's name (no path)", record["data_folder"])
    names = record.get("class_names")
    if names is not None and not _names(names, n_classes):
        bad("'class_names'", f"a list of {n_classes} names (one per class of the model, each 1 to 100 printable "
                             "characters)", names)


def _numbers(v, lo: float, hi: float, n: int | None = None) -> bool:
    """A list of 1 to 16 numbers from lo to hi (exactly n of them when given)."""
    return (isinstance(v, list) and 0 < len(v) <= 16 and (n is None or len(v) == n)
            and all(_number(x, lo, hi) for x in v))


def _per_set(v, ok) -> bool:
    """{OOD set: value} with every value ok(value) (at most 16 sets)."""
    return isinstance(v, dict) and len(v) <= 16 and all(isinstance(k, str) and ok(x) for k, x in v.items())


def _short_name(v) -> bool:
    return isinstance(v, str) and len(v) < 40


def _check_seeds(metrics: dict, bad) -> None:
    """The entries of a multi-seed evaluation (wviz.vit.evaluate.summary_seeds, wviz.vit.train --twin): the numbers
    per Monte-Carlo seed, the occlusion AUROCs per seed, the differences to the twin as [estimate, low, high]."""
    mc = metrics.get("mc")
    if mc is not None:
        n = mc.get("seeds") if isinstance(mc, dict) else None
        if not (_whole(n, 1, 16) and all(_numbers(mc.get(k), 0, 1 if k != "nll" else math.inf, n)
                                         for k in ("accuracy", "nll", "ece"))
                and _per_set(mc.get("auroc"), lambda per: _per_set(per, lambda a: _numbers(a, 0, 1, n)))):
            bad("metrics 'mc'", "{\"seeds\": n, \"accuracy\" / \"nll\" / \"ece\": [n numbers], \"auroc\": "
                "{set: {score: [n numbers from 0 to 1]}}}", mc)
    occ = metrics.get("occlusion_auroc")
    if occ is not None and not _per_set(occ, lambda a: _numbers(a, 0, 1)):
        bad("metrics 'occlusion_auroc'", "{OOD set: [numbers from 0 to 1]}", occ)
    twin = metrics.get("vs_twin")
    if twin is not None and not (isinstance(twin, dict) and _numbers(twin.get("ece"), -1, 1, 3)
                                 and _per_set(twin.get("best_auroc"), lambda a: _numbers(a, -1, 1, 3))
                                 and _per_set(twin.get("best_score", {}), _short_name)):
        bad("metrics 'vs_twin'", "{\"ece\": [estimate, low, high], \"best_auroc\": {set: [estimate, low, high]}}",
            twin)


def check_record(record, n_classes: int, image: tuple[int, int] | None = None) -> dict:
    """The training record of a checkpoint, checked like its config: it comes from the file, it is shown on the
    page and it steers the evaluation there (and where the page looks for the model's data), so it must be plain
    JSON and the entries wviz reads must have their types and bounds (the metrics as
    :func:`wviz.vit.evaluate.summary` writes them); ``image`` (channels, image size) is the config's, which the
    record's own must equal. Other entries are kept as they are. Returns ``record``; ValueError names the first
    bad entry."""
    if not isinstance(record, dict):
        raise ValueError("the checkpoint's training record is not a JSON object")
    if not _plain_json(record):
        raise ValueError("the checkpoint's training record is not plain JSON (it holds NaN, inf, tensors or other "
                         "objects)")

    def bad(entry: str, rule: str, value):
        shown = repr(value)
        raise ValueError(f"the checkpoint's training record: {entry} must be {rule}, got "
                         f"{shown if len(shown) <= 60 else shown[:57] + '...'}")

    _check_data(record, n_classes, image, bad)
    metrics = record.get("metrics", {})
    if not isinstance(metrics, dict):
        bad("'metrics'", "a JSON object such as {\"accuracy\": 0.97, ...}", metrics)
    for key, hi, rule in (("accuracy", 1, "from 0 to 1"), ("ece", 1, "from 0 to 1"), ("nll", math.inf, ">= 0")):
        if key in metrics and not _number(metrics[key], 0, hi):
            bad(f"metrics '{key}'", f"a number {rule}", metrics[key])
    auroc = metrics.get("auroc", {})
    if not (isinstance(auroc, dict) and all(isinstance(per, dict) and all(_number(a, 0, 1) for a in per.values())
                                            for per in auroc.values())):
        bad("metrics 'auroc'", "{OOD set: {score: number from 0 to 1}}", auroc)
    curves = metrics.get("corruption_error", {})
    if not (isinstance(curves, dict) and all(isinstance(err, list) and len(err) == len(SEVERITIES)
                                             and all(_number(e, 0, 1) for e in err) for err in curves.values())):
        bad("metrics 'corruption_error'", f"{{corruption: [{len(SEVERITIES)} error rates from 0 to 1]}}", curves)
    _check_seeds(metrics, bad)
    seen = metrics.get("corruption_auroc", {})
    if not (isinstance(seen, dict) and all(
            isinstance(per, dict) and all(isinstance(a, list) and len(a) == len(SEVERITIES)
                                          and all(_number(x, 0, 1) for x in a) for a in per.values())
            for per in seen.values())):
        bad("metrics 'corruption_auroc'", f"{{corruption: {{score: [{len(SEVERITIES)} numbers from 0 to 1]}}}}", seen)
    return record


def load_checkpoint(path_or_bytes, name: str | None = None, max_bytes: int | None = None, device=None):
    """(model in eval mode, record) from a checkpoint path or the bytes of an upload (``name``: the uploaded file's
    name, for its extension). ValueError with a plain message for every kind of bad file; see the module docstring
    for the checks. ``device``: where the model is put (default CPU).

    Example: the bundled stochastic ViT of the digits demo, with its training record; a damaged file is refused
    with a plain message.

    >>> from pathlib import Path
    >>> import wviz
    >>> from wviz.vit.checkpoint import load_checkpoint
    >>> path = Path(wviz.__file__).parents[1] / "assets" / "vit_digits_stochastic.safetensors"
    >>> model, record = load_checkpoint(path)
    >>> type(model).__name__, model.config.image_size, model.training
    ('StochasticViT', 16, False)
    >>> record["data"], record["metrics"]["accuracy"]
    ('digits', 0.9924)
    >>> load_checkpoint(b"junk", name="upload.safetensors")
    Traceback (most recent call last):
        ...
    ValueError: not a safetensors file: 4 bytes is shorter than the 8-byte header length
    """
    max_bytes = max_bytes_default() if max_bytes is None else max_bytes
    data, suffix = _read(path_or_bytes, name, max_bytes)
    if suffix == ".safetensors":
        if data[:4] == b"PK\x03\x04":
            raise ValueError("this file is a torch zip archive, not safetensors: give it a .pt extension")
        config, tensors, record = _from_safetensors(data)
    else:
        config, tensors, record = _from_torch(data)
    cfg = ViTConfig.from_dict(config)
    check_record(record, cfg.n_classes, (cfg.channels, cfg.image_size))
    model = build_model(cfg)
    expected = model.state_dict()
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(map(repr, set(tensors) - set(expected)))  # repr: a .pt file's keys need not be strings
    if missing:
        raise ValueError(f"the checkpoint lacks {len(missing)} weight(s) the config needs, e.g. {missing[0]!r}")
    if unexpected:
        raise ValueError(f"the checkpoint has {len(unexpected)} weight(s) the model does not, e.g. {unexpected[0]}")
    for key, ref in expected.items():
        t = tensors[key]
        if not (isinstance(t, torch.Tensor) and t.is_floating_point() and t.layout == torch.strided):
            raise ValueError(f"weight {key!r} is not a dense float tensor")
        if tuple(t.shape) != tuple(ref.shape):
            raise ValueError(f"weight {key!r} has shape {tuple(t.shape)}; the config needs {tuple(ref.shape)}")
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"weight {key!r} contains NaN or inf")
        if t.numel() and float(t.abs().max()) > MAX_WEIGHT:
            raise ValueError(f"weight {key!r} holds a value of {float(t.abs().max()):.3g}; trained weights are far "
                             f"smaller (at most {MAX_WEIGHT:g} is accepted): the file looks damaged")
    model.load_state_dict({k: t.to(torch.float32) for k, t in tensors.items()}, strict=True)
    return model.to(device or "cpu").eval(), record
