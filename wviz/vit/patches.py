"""The image as the grid of patches a ViT of 004 reads, and a square region of those patches occluded or noised.

004's model cuts a (C, H, W) image into grid x grid patches of ``patch`` x ``patch`` pixels, row by row, and embeds
each one as a Gaussian token (eq. (5)); token 0 is the class token, token 1 + r * grid + c the patch in row r and
column c. Blanking or noising a square of patches and watching the patches' covariances and the prediction respond
is how the Uncertainty inspector asks which patches the model's uncertainty comes from.
"""
from __future__ import annotations

import torch

__all__ = ["patch_of", "REGION_KINDS", "region_box", "corrupt_region"]

REGION_KINDS = ("none", "occlude", "noise")


def patch_of(token: int, grid: int) -> tuple[int, int] | None:
    """(row, col) of the patch that ``token`` embeds (1.. row by row, eq. (5) of 004), None for the class token 0.

    >>> from wviz.vit.patches import patch_of
    >>> patch_of(6, 4), patch_of(16, 4), patch_of(0, 4)     # a 4 x 4 grid: 16 patch tokens after the class token
    ((1, 1), (3, 3), None)
    """
    return None if token == 0 else ((token - 1) // grid, (token - 1) % grid)


def region_box(row: int, col: int, size: int, grid: int) -> tuple[int, int, int, int]:
    """(top, left, bottom, right) patch rows and columns, bottom and right excluded, of a size x size square of
    patches whose top-left patch is (row, col); clamped to the grid (a square past the edge is cut there).

    >>> from wviz.vit.patches import region_box
    >>> region_box(1, 1, 2, 4)      # the middle 2 x 2 patches of a 4 x 4 grid
    (1, 1, 3, 3)
    >>> region_box(3, -2, 9, 4)     # cut at the edges
    (3, 0, 4, 4)
    """
    top, left = min(max(int(row), 0), grid - 1), min(max(int(col), 0), grid - 1)
    size = max(int(size), 1)
    return top, left, min(top + size, grid), min(left + size, grid)


def corrupt_region(image: torch.Tensor, kind: str, box: tuple[int, int, int, int], patch: int,
                   strength: float = 0.5, seed: int = 0) -> torch.Tensor:
    """The (C, H, W) image with the patches of ``box`` (see :func:`region_box`, ``patch`` pixels a side) occluded
    (set to 0, the digits' background) or with seeded Gaussian noise of standard deviation ``strength`` added
    (clipped to [0, 1]); every other pixel as it was. "none" returns the image itself.

    An 8 x 8 grey image is a 2 x 2 grid of 4-pixel patches; occluding the top-right one blanks its 16 pixels and
    leaves the 48 others at 0.5:

    >>> from wviz.vit.patches import corrupt_region, region_box
    >>> import torch
    >>> image = torch.full((1, 8, 8), 0.5)
    >>> out = corrupt_region(image, "occlude", region_box(0, 1, 1, 2), patch=4)
    >>> float(out[:, :4, 4:].sum()), float(out.sum()), torch.equal(out[:, 4:], image[:, 4:])
    (0.0, 24.0, True)
    """
    if kind not in REGION_KINDS:
        raise ValueError(f"unknown region corruption {kind!r}: choose one of {', '.join(REGION_KINDS)}")
    if kind == "none":
        return image
    top, left, bottom, right = (patch * b for b in box)
    out = image.clone()
    cut = out[:, top:bottom, left:right]
    if kind == "occlude":
        cut.zero_()
    else:
        g = torch.Generator().manual_seed(int(seed))
        noise = torch.randn(cut.shape, generator=g, dtype=cut.dtype)
        cut.copy_((cut + float(strength) * noise.to(cut.device)).clamp(0, 1))
    return out
