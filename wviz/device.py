"""Where wviz computes: ``WVIZ_DEVICE=auto|cpu|cuda`` (auto = CUDA when available)."""
from __future__ import annotations

import os

import torch

CHOICES = ("auto", "cpu", "cuda")


def get_device(choice: str | None = None) -> torch.device:
    """The torch device named by ``choice`` or, when None, by the ``WVIZ_DEVICE`` environment variable."""
    choice = (choice or os.environ.get("WVIZ_DEVICE", "auto")).strip().lower()
    if choice not in CHOICES:
        raise ValueError(f"WVIZ_DEVICE must be one of {', '.join(CHOICES)}, not {choice!r}")
    if choice == "cuda" and not torch.cuda.is_available():
        raise ValueError("WVIZ_DEVICE=cuda but no CUDA GPU is visible to torch")
    if choice == "auto":
        choice = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(choice)


def describe(device: torch.device | None = None) -> str:
    """A short human label for a device: 'GPU: NVIDIA H100 80GB HBM3' or 'CPU (2 threads)'."""
    device = device or get_device()
    if device.type == "cuda":
        return f"GPU: {torch.cuda.get_device_name(device)}"
    n = torch.get_num_threads()
    return f"CPU ({n} thread{'' if n == 1 else 's'})"
