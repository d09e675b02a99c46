"""What each per-patch map of the Uncertainty inspector shows, and whether it tracks uncertainty, in numbers.

A map is a per-patch quantity of one image; its per-image score is the same quantity averaged over the image's
tokens, and its AUROC against an OOD set (test images in-distribution, larger = more likely OOD) says whether the
map ranks unfamiliar images as more uncertain. Three maps:

* tr(Sigma) under 004's rule as written, (A * A) Sigma_v: the variance of an average of independent values, largest
  where attention is concentrated on few patches (wviz.vit.model);
* tr(Sigma) under the mixture rule, A Sigma_v + the spread of the values the patch mixes (law of total variance);
* the occlusion of the mutual information, dMI per patch (wviz.vit.occlusion).

Both rules run on the same weights (:func:`rule_traces`): the rule a model was trained with, and the other one post
hoc. :func:`verdict` turns a map's AUROCs into the sentence the page writes beside it.
"""
from __future__ import annotations

import torch

from wviz.vit.evaluate import layer_traces
from wviz.vit.metrics import auroc
from wviz.vit.model import RULES
from wviz.vit.occlusion import OcclusionMI, occlusion_mi, occlusion_score

__all__ = ["RULE_MEANING", "TRACKS", "rule_traces", "occlusion_map", "trace_aurocs", "verdict"]

TRACKS = 0.7  # the AUROC from which a map is said to track uncertainty on a set (the goal of docs/TRAINING.md)
RULE_MEANING = {
    "004": "004's rule as written adds the variance of an average of independent values, sum_j A_ij^2 Sigma_vj: "
           "largest where a patch attends to few patches, smallest where its attention is spread out, whatever the "
           "values say.",
    "mixture": "The mixture rule adds the values' own variances and how much the values a patch mixes disagree, "
               "sum_j A_ij Sigma_vj + sum_j A_ij (v_j - m_i)^2: large where attention mixes patches that do not fit "
               "together.",
}


@torch.no_grad()
def rule_traces(model, image: torch.Tensor, layer: int, rules=RULES) -> dict[str, torch.Tensor]:
    """rule -> tr(Sigma) of every patch token at ``layer`` (grid, grid) of one (C, H, W) image, each of ``rules``
    (default both) on the model's weights (the pass on the means).

    >>> import torch
    >>> from wviz.vit.maps import rule_traces
    >>> from wviz.vit.model import ViTConfig, build_model
    >>> _ = torch.manual_seed(0)
    >>> maps = rule_traces(build_model(ViTConfig(dim=8, depth=1, heads=2)), torch.rand(1, 16, 16), layer=1)
    >>> sorted(maps), tuple(maps["004"].shape), bool((maps["mixture"] >= maps["004"]).all())  # A >= A * A
    (['004', 'mixture'], (4, 4), True)
    """
    device = next(model.parameters()).device
    grid = model.config.grid
    x = image.to(device, torch.float32)[None]
    return {rule: model(x, rule=rule).covariances[layer][0, 1:].sum(-1).reshape(grid, grid).cpu() for rule in rules}


def occlusion_map(model, image: torch.Tensor, samples: int, seed: int) -> tuple[torch.Tensor, OcclusionMI, float]:
    """(dMI per patch (grid, grid), the occlusion result, the image's score) of one (C, H, W) image."""
    occ = occlusion_mi(model, image[None], samples, seed)
    g = model.config.grid
    return occ.change[0].reshape(g, g), occ, float(occlusion_score(occ)[0])


def trace_aurocs(model, images: torch.Tensor, ood_sets: dict[str, torch.Tensor]) -> dict:
    """rule -> {OOD set: (L + 1,) AUROC of the tokens' mean tr(Sigma) at each layer} against ``images`` (the test
    split); {} for a deterministic model."""
    if model.config.kind != "stochastic":
        return {}
    out: dict[str, dict[str, torch.Tensor]] = {}
    for rule in RULES:
        clean = layer_traces(model, images, rule)
        out[rule] = {}
        for name, x in ood_sets.items():
            other = layer_traces(model, x, rule)
            out[rule][name] = torch.tensor([auroc(clean[k], other[k]) for k in range(len(clean))])
    return out


def verdict(aurocs: dict[str, float], what: str = "This map") -> str:
    """One plain sentence on whether a map tracks uncertainty, from its AUROC per OOD set.

    >>> from wviz.vit.maps import verdict
    >>> verdict({"noise": 0.95, "crops": 0.8})
    'This map tracks uncertainty on every OOD set here (AUROC 0.80 to 0.95).'
    >>> verdict({"noise": 0.26, "crops": 0.8}, "The trace")
    'The trace does not track uncertainty on noise: it ranks those images as *less* uncertain (AUROC 0.26).'
    """
    low = {k: v for k, v in aurocs.items() if v < TRACKS}
    if not low:
        return (f"{what} tracks uncertainty on every OOD set here (AUROC {min(aurocs.values()):.2f} to "
                f"{max(aurocs.values()):.2f}).")
    below = [k for k, v in low.items() if v < 0.5]
    shown = ", ".join(f"{v:.2f}" for v in low.values())
    how = ("ranks those images as *less* uncertain" if len(below) == len(low) else
           "ranks those images near chance or below")
    return f"{what} does not track uncertainty on {', '.join(low)}: it {how} (AUROC {shown})."
