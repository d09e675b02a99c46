"""Which patch the model's epistemic uncertainty rests on: occlusion of the mutual information.

The mutual information between the label and the sampled embeddings (BALD, :func:`wviz.vit.metrics.
mutual_information`) is the predictive uncertainty that the Monte-Carlo draws disagree on. Replace one patch by an
uninformative one (zeros: the digits' background, and the masking value of pre-training) and measure it again:

    dMI_p(x) = I(y; z | x with patch p occluded) - I(y; z | x),

one number per patch, a map laid out like the image (in the spirit of the occlusion maps of Zeiler & Fergus 2014,
on an uncertainty instead of a class score). A patch whose loss raises the disagreement was holding the
prediction together; one whose loss lowers it was the source of the disagreement. Every occluded copy is sampled
with the same draws as the image itself (common random numbers), so the map shows the patches, not Monte-Carlo
noise. The per-image score (:func:`occlusion_score`) is the mean over the patches of the occluded copies' MI: an
image whose uncertainty survives the loss of any one patch is one the model does not know.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from wviz.vit.metrics import mutual_information
from wviz.vit.model import mc_predict

__all__ = ["OcclusionMI", "occlusion_mi", "occlusion_score", "OCCLUSION_SCORES"]

OCCLUSION_SCORES = ("mean occluded MI", "max MI change", "mean absolute MI change")


@dataclass(frozen=True)
class OcclusionMI:
    """base (N,) the MI of each image; occluded (N, P) the MI with patch p occluded; change = occluded - base."""

    base: torch.Tensor
    occluded: torch.Tensor

    @property
    def change(self) -> torch.Tensor:
        return self.occluded - self.base[:, None]


def _occlude(images: torch.Tensor, p: int, patch: int, fill: float) -> torch.Tensor:
    grid = images.shape[-1] // patch
    r, c = divmod(p, grid)
    out = images.clone()
    out[..., r * patch:(r + 1) * patch, c * patch:(c + 1) * patch] = fill
    return out


@torch.no_grad()
def occlusion_mi(model, images: torch.Tensor, samples: int = 32, seed: int = 0, fill: float = 0.0,
                 batch: int = 64) -> OcclusionMI:
    """The MI of each image (N, C, H, W) and of its P copies with one patch set to ``fill``, all at the same S draws
    (module docstring). The deterministic twin has no draws: its MI is 0 everywhere.

    Example: occluding a patch of a tiny untrained model moves its MI; the twin's stays 0.

    >>> import torch
    >>> from wviz.vit.model import ViTConfig, build_model
    >>> from wviz.vit.occlusion import occlusion_mi
    >>> _ = torch.manual_seed(0)
    >>> cfg = ViTConfig(image_size=8, patch_size=4, dim=8, depth=1, heads=2)
    >>> occ = occlusion_mi(build_model(cfg), torch.rand(2, 1, 8, 8), samples=16)
    >>> tuple(occ.occluded.shape), bool(occ.change.abs().max() > 0)
    ((2, 4), True)
    >>> twin = build_model(ViTConfig(kind="deterministic", image_size=8, patch_size=4, dim=8, depth=1, heads=2))
    >>> float(occlusion_mi(twin, torch.rand(2, 1, 8, 8), samples=4).occluded.abs().max())
    0.0
    """
    device = next(model.parameters()).device
    cfg = model.config
    base, occluded = [], []
    for i in range(0, len(images), batch):
        x = images[i:i + batch].to(device, torch.float32)
        # the same seed for every copy: image j gets the same draws in each (mc_predict draws per batch row)
        mi = [mutual_information(mc_predict(model, _occlude(x, p, cfg.patch_size, fill) if p >= 0 else x,
                                            samples, seed + i).probs) for p in range(-1, cfg.n_patches)]
        base.append(mi[0])
        occluded.append(torch.stack(mi[1:], 1))
    return OcclusionMI(torch.cat(base).cpu(), torch.cat(occluded).cpu())


def occlusion_score(occ: OcclusionMI, kind: str = OCCLUSION_SCORES[0]) -> torch.Tensor:
    """A per-image score from the occlusion map, larger = more likely OOD (N,): the mean over the patches of the
    occluded copies' MI (the page's), the largest rise of the MI, or the mean absolute change.

    >>> import torch
    >>> from wviz.vit.occlusion import OcclusionMI, occlusion_score
    >>> occ = OcclusionMI(torch.tensor([0.1]), torch.tensor([[0.1, 0.3, 0.2, 0.0]]))
    >>> [round(float(occlusion_score(occ, k)[0]), 4) for k in ("mean occluded MI", "max MI change",
    ...                                                         "mean absolute MI change")]
    [0.15, 0.2, 0.1]
    """
    if kind == OCCLUSION_SCORES[0]:
        return occ.occluded.mean(1)
    if kind == OCCLUSION_SCORES[1]:
        return occ.change.max(1).values
    if kind == OCCLUSION_SCORES[2]:
        return occ.change.abs().mean(1)
    raise ValueError(f"unknown occlusion score {kind!r}: choose one of {', '.join(OCCLUSION_SCORES)}")
