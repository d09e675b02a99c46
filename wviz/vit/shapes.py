"""A tiny image dataset anyone can make in a second: three classes of shapes (circle, square, triangle), each a
bright shape of random colour, size and place on a dark, slightly noisy background, as RGB PNGs in the 'folder'
layout that ``python -m wviz.vit.train --data folder`` reads. The README's "Train your own" walk and the tests
use it.

    python -m wviz.vit.shapes shapes      # shapes/train/<class>/*.png (60 a class), shapes/test/<class>/*.png (20)
"""
from __future__ import annotations

import argparse
import io
import zipfile
from pathlib import Path

import numpy as np

__all__ = ["CLASSES", "draw", "shape_images", "write_folder", "test_zip", "main"]

CLASSES = ("circle", "square", "triangle")


def draw(kind: str, size: int, rng: np.random.Generator) -> np.ndarray:
    """One picture (size, size, 3) uint8: a shape of ``kind`` with its centre and half-width r (0.2 to 0.4 of the
    side) drawn at random, filled with a bright colour over a dark background.

    Example: a circle covers about pi r^2 pixels, a square of half-width 0.85 r about (1.7 r)^2.

    >>> import numpy as np
    >>> from wviz.vit.shapes import draw
    >>> img = draw("circle", 32, np.random.default_rng(0))
    >>> img.shape, img.dtype.name, bool(img.max() > 100 and img.min() < 60)   # a bright shape on a dark ground
    ((32, 32, 3), 'uint8', True)
    """
    if kind not in CLASSES:
        raise ValueError(f"unknown shape {kind!r}: choose one of {', '.join(CLASSES)}")
    r = rng.uniform(0.2, 0.4) * size
    cx, cy = rng.uniform(r, size - r, 2)
    Y, X = np.mgrid[0:size, 0:size] + 0.5  # pixel centres
    if kind == "circle":
        inside = (X - cx) ** 2 + (Y - cy) ** 2 <= r ** 2
    elif kind == "square":
        inside = (np.abs(X - cx) <= 0.85 * r) & (np.abs(Y - cy) <= 0.85 * r)
    else:  # apex up at cy - r, base at cy + 0.7 r, as wide as 2 r there
        top, height = cy - r, 1.7 * r
        inside = (Y >= top) & (Y <= top + height) & (np.abs(X - cx) <= (Y - top) / height * r)
    image = rng.uniform(0, 40, (1, 1, 3)) + rng.normal(0, 6, (size, size, 3))
    image[inside] = rng.uniform(120, 256, 3)
    return np.clip(image, 0, 255).astype(np.uint8)


def shape_images(per_class: int, size: int = 32, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``per_class`` pictures of each class: images (N, size, size, 3) uint8 and labels (N,) indexing CLASSES."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(len(CLASSES)), per_class)
    return np.stack([draw(CLASSES[k], size, rng) for k in labels]), labels


def _png(image: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(image).save(buf, "PNG")
    return buf.getvalue()


def _split(split: str, per_class: int, size: int, seed: int):
    """(path inside the dataset, PNG bytes) of each picture of a split; the test split draws from its own seed."""
    images, labels = shape_images(per_class, size, 2 * seed + (split == "test"))
    for i, (image, k) in enumerate(zip(images, labels)):
        yield f"{split}/{CLASSES[k]}/{CLASSES[k]}_{i % per_class:03d}.png", _png(image)


def write_folder(root, train: int = 60, test: int = 20, size: int = 32, seed: int = 0) -> Path:
    """``root``/train/<class>/*.png and ``root``/test/<class>/*.png (``train`` and ``test`` pictures a class)."""
    root = Path(root)
    for split, n in (("train", train), ("test", test)):
        for name, png in _split(split, n, size, seed):
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(png)
    return root


def test_zip(per_class: int = 20, size: int = 32, seed: int = 0) -> bytes:
    """The test split of :func:`write_folder` (same arguments, same pictures) as a .zip of test/<class>/*.png: what
    the Uncertainty inspector's test-images uploader takes."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, png in _split("test", per_class, size, seed):
            z.writestr(name, png)
    return buf.getvalue()


# a function named test_*, not a test; mypy knows no attributes set on a function, pytest reads this one
test_zip.__test__ = False  # type: ignore[attr-defined]


def main(argv=None) -> Path:
    """The command line: ``python -m wviz.vit.shapes OUT [--train N] [--test N] [--size S] [--seed K]``."""
    p = argparse.ArgumentParser(prog="python -m wviz.vit.shapes", description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="the dataset's root folder (created)")
    p.add_argument("--train", type=int, default=60, help="training pictures per class")
    p.add_argument("--test", type=int, default=20, help="test pictures per class")
    p.add_argument("--size", type=int, default=32, help="side of the pictures in pixels")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if min(args.train, args.test) < 1 or not 8 <= args.size <= 256:
        p.error("--train and --test must be at least 1, --size from 8 to 256")
    if Path(args.out).exists() and not Path(args.out).is_dir():
        p.error(f"{args.out} is a file: give a folder")
    root = write_folder(args.out, args.train, args.test, args.size, args.seed)
    print(f"wrote {root}/train/<class>/ ({args.train} a class) and {root}/test/<class>/ ({args.test} a class) for "
          f"classes {', '.join(CLASSES)}")
    return root


if __name__ == "__main__":
    main()
