"""The models a page compares: the bundled demo pair (a stochastic ViT of 004 and its deterministic twin, both
trained on scikit-learn's digits, in assets/), or an uploaded checkpoint beside the twin.

An upload goes through every check of :func:`wviz.vit.checkpoint.load_checkpoint`; one that fails leaves the demo
on, with what was wrong with the file, so that a page keeps working while the user fixes it. Each model carries
an id of its weights ('bundled:<kind>' or 'upload:<sha256 of the file>'): a bundled model's training record holds
measurements made on those very weights, an upload's record is only a claim.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from wviz.vit import data
from wviz.vit.checkpoint import load_checkpoint

__all__ = ["ASSETS", "BUNDLED", "Loaded", "load_bundled", "load_upload", "Models", "model_set", "VALID_CHECKPOINT",
           "ModelChoice", "choose_models", "weights_digest"]

ASSETS = Path(__file__).resolve().parents[2] / "assets"
BUNDLED = {"stochastic": ASSETS / "vit_digits_stochastic.safetensors",
           "deterministic": ASSETS / "vit_digits_deterministic.safetensors"}


@dataclass(frozen=True)
class Loaded:
    """One model on a page: its name there, the model, its training record (entries checked for type and bounds
    when loaded, wviz.vit.checkpoint.check_record) and the id of its weights ('bundled:<kind>' or
    'upload:<sha256 of the file>')."""

    name: str
    model: torch.nn.Module
    record: dict
    weights_id: str

    @property
    def bundled(self) -> bool:
        return self.weights_id.startswith("bundled:")


def load_bundled(kind: str, device: str) -> Loaded:
    """The bundled demo model of ``kind`` ('stochastic' or 'deterministic') on ``device``.

    >>> from wviz.vit.demo import load_bundled
    >>> twin = load_bundled("deterministic", "cpu")
    >>> twin.name, twin.weights_id, twin.bundled, twin.model.config.depth
    ('deterministic', 'bundled:deterministic', True, 3)
    """
    model, record = load_checkpoint(BUNDLED[kind], device=device)
    return Loaded(kind, model, record, f"bundled:{kind}")


def load_upload(raw: bytes | None, file_name: str, device: str) -> Loaded:
    """An uploaded checkpoint (checked before use, see wviz.vit.checkpoint), named 'uploaded (<kind>)'.

    Example: the bundled file as an upload, and bytes that are no checkpoint (refused with a message).

    >>> from wviz.vit.demo import BUNDLED, load_upload
    >>> upload = load_upload(BUNDLED["stochastic"].read_bytes(), "mine.safetensors", "cpu")
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
    def reads_digits(self) -> bool:
        """Whether the digits test split (1 x 16 x 16) suits every model shown."""
        return self.twin.name in self.by_name and (self.config.channels, self.config.image_size) == (1, data.DIGIT_SIZE)


def model_set(main: Loaded, twin: Loaded) -> Models:
    """The main model and the deterministic twin, the twin left out when it cannot read the main model's images.

    Example: the bundled pair reads the same 16 x 16 digits, so both are shown.

    >>> from wviz.vit.demo import load_bundled, model_set
    >>> models = model_set(load_bundled("stochastic", "cpu"), load_bundled("deterministic", "cpu"))
    >>> list(models.by_name), models.stochastic, models.reads_digits
    (['stochastic', 'deterministic'], True, True)
    """
    a, b = main.model.config, twin.model.config
    same = (a.channels, a.image_size, a.n_classes) == (b.channels, b.image_size, b.n_classes)
    return Models({main.name: main, **({twin.name: twin} if same else {})}, twin)


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


def choose_models(source: str, file_name: str, upload: Callable[[], Loaded],
                  bundled: Callable[[str], Loaded]) -> ModelChoice:
    """The uploaded checkpoint beside the deterministic twin when ``source`` is 'upload' and the file passes every
    check; otherwise the bundled demo, with what was wrong with the file (its name, the problem, what a valid
    checkpoint is). ``upload()`` and ``bundled(kind)`` are the page's cached loaders (:func:`load_upload`,
    :func:`load_bundled`)."""
    twin = bundled("deterministic")
    demo = lambda: model_set(bundled("stochastic"), twin)  # noqa: E731
    if source != "upload":
        return ModelChoice(demo(), None, False)
    if not file_name:
        return ModelChoice(demo(), None, True)
    try:
        return ModelChoice(model_set(upload(), twin), None, False)
    except ValueError as err:
        problem = str(err).rstrip(".")
        return ModelChoice(demo(), f"Your checkpoint '{file_name}' was not used: {problem}.\n\n{VALID_CHECKPOINT}",
                           False)


def weights_digest(model: torch.nn.Module) -> str:
    """sha256 of the model's configuration and every tensor of its state: what its evaluation depends on, whatever
    file (or test) it came from."""
    h = hashlib.sha256(repr(model.config).encode())
    for name, t in model.state_dict().items():
        h.update(f"{name} {t.dtype} {tuple(t.shape)}".encode())
        h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()
