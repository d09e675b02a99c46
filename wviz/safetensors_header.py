"""A safetensors file's header, read and checked without reading a tensor: the one reader of the model folders
(wviz.models.safety) and of the ViT checkpoints (wviz.vit.checkpoint), each with its own bounds (:class:`Limits`).

A safetensors file is 8 bytes of header length (little-endian), the header (a JSON object giving each tensor's
dtype, shape and data_offsets [begin, end] in the bytes that follow the header, and an optional __metadata__ of
strings), then the tensors' bytes. The header is sound, as the safetensors library requires, when every dtype is
one the reader knows, every tensor's offsets hold exactly its shape's numbers, and the tensors follow one another
from 0 to the end of the file, without a gap or an overlap. Each refusal is one ValueError, which the caller
prefixes with the file's name where its user needs it.
The standard library only: wviz.vit imports it.
"""
from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from typing import BinaryIO

__all__ = ["Limits", "Tensor", "Header", "read_header", "whole", "shown"]


@dataclass(frozen=True)
class Limits:
    """What one caller accepts: a header of at most ``max_header`` bytes (``owner`` names whose header it is in
    the message: 'a model', 'a checkpoint'), tensors of ``dtypes`` ({name: bytes per number})."""

    max_header: int
    dtypes: dict[str, int]
    owner: str


@dataclass(frozen=True)
class Tensor:
    """One tensor of a header: its dtype, shape and bytes [begin, end) after the header."""

    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def numbers(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class Header:
    """A sound header: its tensors by name, and its __metadata__ (strings by name; empty when it has none)."""

    tensors: dict[str, Tensor]
    metadata: dict[str, str]


def whole(value, low: int, high: int) -> bool:
    """Whether ``value`` is a whole number from ``low`` to ``high`` (JSON's true and 2.0 are not)."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def shown(value) -> str:
    """A value of a user's JSON, for a message, as JSON writes it (true, null), cut to 60 characters."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _length(f: BinaryIO, size: int, limits: Limits) -> int:
    """The header's length, from the file's first 8 bytes: within the caller's bound and the file."""
    head = f.read(8)
    if len(head) < 8:
        raise ValueError(f"not a safetensors file: {size} bytes is shorter than the 8-byte header length")
    n = struct.unpack("<Q", head)[0]
    if n < 2:   # '{}', the smallest JSON object
        raise ValueError(f"not a safetensors file: its header length is {n}")
    if n > size - 8:   # a file cut short, or another kind of file whose first bytes read as a length
        raise ValueError(f"truncated safetensors file, or not a safetensors file: its header needs {n:,} bytes but "
                         f"only {size - 8:,} follow")
    if n > limits.max_header:   # before it is read: parsing JSON takes several times its size
        raise ValueError(f"not a valid safetensors file: its header claims {n:,} bytes; {limits.owner}'s takes at "
                         f"most {limits.max_header:,}")
    return n


def _tensor(name: str, entry, dtypes: dict[str, int]) -> Tensor:
    """One entry of the header; ValueError when its dtype is not one of ``dtypes``, its shape not whole numbers,
    or its offsets do not hold exactly its numbers."""
    if not (isinstance(entry, dict) and isinstance(entry.get("dtype"), str) and entry["dtype"] in dtypes):
        dtype = entry.get("dtype") if isinstance(entry, dict) else None
        raise ValueError(f"not a sound safetensors file: tensor {shown(name)} has the dtype {shown(dtype)}; wviz "
                         f"reads {', '.join(dtypes)}")
    shape, offsets = entry.get("shape"), entry.get("data_offsets")
    if not (isinstance(shape, list) and len(shape) <= 8 and all(whole(d, 0, 2 ** 40) for d in shape)):
        raise ValueError(f"not a sound safetensors file: tensor {shown(name)} has the shape {shown(shape)}, not a "
                         "list of up to 8 whole numbers")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(whole(o, 0, 2 ** 62) for o in offsets)
            and offsets[0] <= offsets[1]):
        raise ValueError(f"not a sound safetensors file: tensor {shown(name)} has the data_offsets "
                         f"{shown(offsets)}, not [begin, end] in bytes")
    tensor = Tensor(entry["dtype"], tuple(shape), offsets[0], offsets[1])
    need = tensor.numbers * dtypes[tensor.dtype]
    if tensor.end - tensor.begin != need:
        raise ValueError(f"not a sound safetensors file: tensor {shown(name)} of shape {shape} in {tensor.dtype} "
                         f"takes {need:,} bytes but its offsets hold {tensor.end - tensor.begin:,}")
    return tensor


def _gap_or_overlap(tensors: dict[str, Tensor]) -> str | None:
    """The first tensor, in the order of their offsets, that does not start where the one before it ends."""
    at = 0
    for begin, end, name in sorted((t.begin, t.end, name) for name, t in tensors.items()):
        if begin != at:
            how = "overlaps the tensor before it" if begin < at else f"starts {begin - at:,} bytes after the one before"
            return f"tensor {shown(name)} {how}"
        at = end
    return None


def read_header(f: BinaryIO, size: int, limits: Limits) -> Header:
    """The header of the safetensors file ``f`` (``size`` bytes, read from its start), checked as the module
    docstring says, within ``limits``; no tensor is read. A refusal's message does not name the file: the caller
    does.

    >>> import io, json, struct
    >>> from wviz.safetensors_header import Limits, read_header
    >>> limits = Limits(2 ** 20, {"F32": 4}, "a model")
    >>> head = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    >>> raw = struct.pack("<Q", len(head)) + head + bytes(8)
    >>> read_header(io.BytesIO(raw), len(raw), limits).tensors["w"].numbers
    2
    >>> read_header(io.BytesIO(raw[:-4]), len(raw) - 4, limits)
    Traceback (most recent call last):
        ...
    ValueError: truncated safetensors file: its header describes 8 bytes of tensors, the file has 4
    """
    n = _length(f, size, limits)
    try:
        header = json.loads(f.read(n))
    except (ValueError, RecursionError):   # undecodable bytes, bad JSON, brackets nested too deep
        raise ValueError("not a safetensors file: its header is not JSON") from None
    meta = header.pop("__metadata__", {}) if isinstance(header, dict) else None
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise ValueError("not a safetensors file: its header is not a table of tensors")
    tensors = {name: _tensor(name, entry, limits.dtypes) for name, entry in header.items()}
    data, end = size - 8 - n, max((t.end for t in tensors.values()), default=0)
    if end > data:   # first: a header that claims terabytes says so, whatever else is wrong with it
        raise ValueError(f"truncated safetensors file: its header describes {end:,} bytes of tensors, the file has "
                         f"{data:,}")
    problem = _gap_or_overlap(tensors)
    if problem:
        raise ValueError(f"not a sound safetensors file: {problem}")
    if end < data:
        raise ValueError(f"not a sound safetensors file: {data - end:,} bytes follow its last tensor")
    return Header(tensors, meta)
