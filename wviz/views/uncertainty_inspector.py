"""What the "Uncertainty inspector" page computes from a model and an image (no streamlit here).

One image goes through the model once on its means (for the per-layer covariances and attention maps, 004
Sec. 4.1-4.2) and S times with sampled embeddings (the Monte-Carlo predictive, :func:`wviz.vit.model.mc_predict`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from wviz.vit import data
from wviz.vit.model import MCPrediction, ViTOutput, mc_predict

__all__ = ["ASSETS", "BUNDLED", "Preprocessed", "preprocess", "Inspection", "inspect_image", "patch_map",
           "query_attention", "rollout"]

ASSETS = Path(__file__).resolve().parents[2] / "assets"
BUNDLED = {"stochastic": ASSETS / "vit_digits_stochastic.safetensors",
           "deterministic": ASSETS / "vit_digits_deterministic.safetensors"}


@dataclass(frozen=True)
class Preprocessed:
    """An uploaded picture on its way to the model: steps = [(caption, (C, H, W) image in [0, 1])], the last one
    being the model's input; inverted says whether dark-on-light was turned into light-on-dark like the digits."""

    steps: list
    image: torch.Tensor
    inverted: bool


def preprocess(raw: bytes, channels: int, size: int, invert: str = "auto") -> Preprocessed:
    """A PNG/JPG upload -> the model's input: grey (or RGB), centre-cropped to a square, resized to size x size,
    inverted when ``invert`` is 'yes', or 'auto' and the picture is mostly light (the digits are light strokes
    on black), then stretched to [0, 1] like the training digits (whose strokes reach 1)."""
    if invert not in ("auto", "yes", "no"):
        raise ValueError(f"invert must be 'auto', 'yes' or 'no', got {invert!r}")
    full = data.image_from_bytes(raw, channels, 128)
    small = data.resize(full[None], size)[0]
    inverted = invert == "yes" or (invert == "auto" and float(small.mean()) > 0.5)
    x = 1 - small if inverted else small
    lo, hi = float(x.min()), float(x.max())
    if hi - lo < 1e-6:
        raise ValueError("the picture is a single flat colour: there is nothing for the model to read")
    x = (x - lo) / (hi - lo)
    steps = [("upload, grey, square", full), (f"{size} x {size}", small)]
    if inverted:
        steps.append(("inverted", 1 - small))
    steps.append(("[0, 1]: model input", x))
    return Preprocessed(steps, x, inverted)


@dataclass(frozen=True)
class Inspection:
    """One image through one model: ``out`` the forward pass on the means (batch of 1), ``mc`` the Monte-Carlo
    predictive over ``samples`` draws."""

    out: ViTOutput
    mc: MCPrediction
    samples: int


@torch.no_grad()
def inspect_image(model, image: torch.Tensor, samples: int = 32, seed: int = 0) -> Inspection:
    """Run one (C, H, W) image through ``model`` (on the model's device). ValueError when the model's output
    overflows (inf or NaN) rather than showing NaN."""
    device = next(model.parameters()).device
    x = image.to(device, torch.float32)[None]
    out, mc = model(x), mc_predict(model, x, samples=samples, seed=seed)
    if not (bool(torch.isfinite(out.logits).all()) and bool(torch.isfinite(mc.mean).all())):
        raise ValueError("the model's output on this image is not a finite number (inf or NaN): its weights push "
                         "the computation beyond float range")
    return Inspection(out, mc, samples)


def _grid(values: torch.Tensor, grid: int) -> torch.Tensor:
    return values.reshape(grid, grid)


def patch_map(out: ViTOutput, layer: int, grid: int) -> torch.Tensor:
    """tr(Sigma) of every patch token at ``layer`` (0 = the embeddings of eq. (5)) as a (grid, grid) map (image 0).
    None for a deterministic model."""
    if out.covariances is None:
        return None
    if not 0 <= layer < len(out.covariances):
        raise ValueError(f"layer must be 0 to {len(out.covariances) - 1}, got {layer}")
    return _grid(out.covariances[layer][0, 1:].sum(-1), grid)


def query_attention(out: ViTOutput, layer: int, head: int, query: int, grid: int) -> tuple[torch.Tensor, float]:
    """The attention of token ``query`` (0 = class token, 1.. = patches row by row) in block ``layer`` and head
    ``head``: its weights on the patches as a (grid, grid) map, and its weight on the class token."""
    A = out.attentions[layer][0, head, query]
    return _grid(A[1:], grid), float(A[0])


def rollout(attentions: tuple[torch.Tensor, ...], grid: int) -> torch.Tensor:
    """Attention rollout (Abnar & Zuidema 2020): average the heads, add the residual path, A' = (A + I) / 2,
    multiply the layers R = A'_L ... A'_1; the class token's row of R over the patches as a (grid, grid) map
    (image 0). Rows of A' sum to one, so the map plus the class token's own share sums to one."""
    n = attentions[0].shape[-1]
    eye = torch.eye(n, device=attentions[0].device, dtype=attentions[0].dtype)
    R = eye
    for A in attentions:
        R = ((A[0].mean(0) + eye) / 2) @ R
    return _grid(R[0, 1:], grid)
