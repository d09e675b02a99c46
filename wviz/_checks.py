"""Input checks shared by the library's modules, with the plain-words messages the pages show."""
from __future__ import annotations

import functools
import math
import warnings

import torch


def number(value, name: str) -> float:
    """``value`` as a finite float; ValueError otherwise."""
    try:
        v = float(value)
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(v):
        raise ValueError(f"{name} must be a finite number, got {v}")
    return v


def positive(value, name: str) -> float:
    """``value`` as a positive finite float (a temperature tau, a regulariser gamma, ...); ValueError otherwise."""
    try:
        v = float(value)
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(f"{name} must be a positive number, got {value!r}") from None
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be a positive finite number, got {v:g}")
    return v


def index_of(flat: int, lead: torch.Size) -> int | tuple[int, ...] | None:
    """The index in leading shape ``lead`` of the ``flat``-th element: 3, (0, 3), or None for no leading dims
    (messages name the first offending row or token with it)."""
    if len(lead) == 0:
        return None
    idx = []
    for n in reversed(lead):
        idx.append(flat % n)
        flat //= n
    idx = idx[::-1]
    return idx[0] if len(idx) == 1 else tuple(idx)


def first(bad: torch.Tensor) -> int:
    """Flat index of the first True entry of ``bad``."""
    return int(bad.reshape(-1).nonzero()[0])


def renamed(**old_to_new: str):
    """Decorator: a keyword argument renamed to give one name one meaning keeps working under its old name, with a
    DeprecationWarning, so that scripts written before the rename still run."""
    def wrap(func):
        @functools.wraps(func)
        def call(*args, **kwargs):
            for old, new in old_to_new.items():
                if old in kwargs:
                    warnings.warn(f"{func.__name__}({old}=...) is now {func.__name__}({new}=...)", DeprecationWarning,
                                  stacklevel=2)
                    kwargs[new] = kwargs.pop(old)
            return func(*args, **kwargs)
        return call
    return wrap
