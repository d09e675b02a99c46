"""The patch grid of 004's ViT and a corrupted square of it: token <-> patch as the model embeds them, the region's
box clamped to the grid, and a corruption that changes every pixel inside the box and none outside."""

import pytest
import torch

from wviz.vit.model import ViTConfig, build_model
from wviz.vit.patches import REGION_KINDS, corrupt_region, patch_of, region_box


@pytest.mark.parametrize("grid", [1, 4, 8])
def test_patch_of_undoes_the_row_by_row_numbering(grid):
    assert patch_of(0, grid) is None
    seen = set()
    for token in range(1, grid * grid + 1):
        r, c = patch_of(token, grid)
        assert 0 <= r < grid and 0 <= c < grid and 1 + r * grid + c == token
        seen.add((r, c))
    assert len(seen) == grid * grid


def test_patch_of_names_the_token_the_model_embeds_that_patch_in():
    """Changing one patch of the image changes the embedding (layer 0, eq. (5) of 004) of that patch's token only."""
    torch.manual_seed(0)
    model = build_model(ViTConfig(kind="stochastic", image_size=16, patch_size=4, dim=8, depth=1, heads=2))
    image = torch.rand(1, 1, 16, 16)
    with torch.no_grad():
        before = model(image).means[0][0]
        for r, c in [(0, 0), (1, 3), (3, 2)]:
            changed = image.clone()
            changed[..., 4 * r:4 * r + 4, 4 * c:4 * c + 4] += 0.5
            moved = (model(changed).means[0][0] - before).abs().sum(-1) > 1e-6
            assert [patch_of(int(t), 4) for t in torch.nonzero(moved)] == [(r, c)]


def test_region_box_is_a_square_clamped_to_the_grid():
    assert region_box(1, 1, 2, 4) == (1, 1, 3, 3)
    assert region_box(3, -2, 9, 4) == (3, 0, 4, 4)           # cut at the bottom and right edges, moved in at the left
    assert region_box(9, 9, 0, 4) == (3, 3, 4, 4)            # a side below 1 is 1 patch; a start past the grid its last
    for grid in (2, 5):
        for row in range(-1, grid + 1):
            for size in range(0, grid + 2):
                top, left, bottom, right = region_box(row, 0, size, grid)
                assert 0 <= top < bottom <= grid and (left, right) == (0, min(max(size, 1), grid))
                assert bottom - top == min(max(size, 1), grid - top)


def _inside(shape, box, patch):
    mask = torch.zeros(shape, dtype=torch.bool)
    top, left, bottom, right = box
    mask[:, patch * top:patch * bottom, patch * left:patch * right] = True
    return mask


@pytest.mark.parametrize("box", [(1, 1, 3, 3), (0, 2, 4, 4), (3, 0, 4, 1)])
def test_occlusion_blanks_every_pixel_of_the_box_and_no_other(box):
    g = torch.Generator().manual_seed(1)
    image = torch.rand(3, 16, 16, generator=g) * 0.9 + 0.05          # RGB, no pixel 0
    out = corrupt_region(image, "occlude", box, 4)
    inside = _inside(image.shape, box, 4)
    assert torch.equal(out[~inside], image[~inside]) and not out[inside].any()
    assert not torch.equal(out, image) and image.min() > 0            # the input is left as it was


def test_noise_moves_every_pixel_of_the_box_by_seeded_noise_of_the_asked_spread():
    image = torch.full((1, 64, 64), 0.5)
    box = (1, 1, 3, 3)                                                # 32 x 32 pixels with 16-pixel patches
    out = corrupt_region(image, "noise", box, 16, strength=0.05, seed=3)
    inside = _inside(image.shape, box, 16)
    assert torch.equal(out[~inside], image[~inside])
    added = out[inside] - 0.5
    assert bool((added != 0).all())                                   # every pixel of the box moved
    assert abs(float(added.std()) - 0.05) < 0.005 and abs(float(added.mean())) < 0.005
    assert torch.equal(out, corrupt_region(image, "noise", box, 16, strength=0.05, seed=3))  # a link's noise
    assert not torch.equal(out, corrupt_region(image, "noise", box, 16, strength=0.05, seed=4))
    loud = corrupt_region(image, "noise", box, 16, strength=5.0)
    assert loud.min() == 0 and loud.max() == 1                        # clipped to [0, 1]


def test_none_and_unknown_kinds():
    image = torch.rand(1, 8, 8)
    assert corrupt_region(image, "none", (0, 0, 1, 1), 4) is image
    assert REGION_KINDS == ("none", "occlude", "noise")
    with pytest.raises(ValueError, match="unknown region corruption 'fog': choose one of none, occlude, noise"):
        corrupt_region(image, "fog", (0, 0, 1, 1), 4)
