"""What wviz accepts as a model folder, an uploaded model (.zip) or an uploaded picture: the checks, before
transformers reads a byte.

A model folder is what ``save_pretrained`` writes: config.json, the weights in *.safetensors, and the tokenizer's
files (tokenizer.json, vocab.txt, ...) or, for an image model, the image processor's preprocessor_config.json.
Uploads are untrusted, like the inspector's checkpoints, so:

- weights are read from .safetensors only (a tensor format with a JSON header and raw numbers; transformers loads
  with use_safetensors=True); an uploaded pickle file (pytorch_model.bin, *.bin, *.pt, *.pth, *.pkl, *.ckpt), which
  can run code when loaded, is refused with how to convert it, and so is Python code (*.py); in a folder of
  WVIZ_MODELS such files are never read;
- a model's own code never runs: a config with ``auto_map`` (transformers' pointer to code shipped with the model,
  run only with trust_remote_code) is refused, and wviz loads with trust_remote_code=False;
- a zip is checked before anything is unpacked (wviz.io.zip_problems: absolute paths, '..', links, encrypted
  members, contents over the cap, zip bombs), then its model files (and nothing else) are streamed into a new
  temporary folder, never more bytes than each header declares, and the folder is removed when the caller is done;
- the model_type must be one wviz can swap (wviz.models.families), and the safetensors headers must be sound: the
  model's size is read from them without loading a tensor.

Settings: WVIZ_MAX_MODEL_MB, the cap on an uploaded model, zipped and unpacked (default MAX_MODEL_MB). Streamlit's
own upload limit (server.maxUploadSize, in MB) must be at least as large for the upload to reach wviz.
"""
from __future__ import annotations

import contextlib
import io as _bytes
import json
import math
import os
import shutil
import struct
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from wviz import io
from wviz.models.families import family_of

__all__ = ["MAX_MODEL_MB", "MAX_PICTURE_MB", "ModelFolder", "max_model_bytes", "check_folder", "unpacked",
           "read_picture"]

MAX_MODEL_MB = 600  # every base-size model in float32 fits (BERT-base 440 MB, RoBERTa-base 500, GPT-2 550)
MAX_PICTURE_MB = 10
MAX_ZIP_FILES = 1000  # a model folder holds a few dozen files (shards included)
PICKLES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".joblib")
MODEL_FILES = (".json", ".safetensors", ".txt", ".model")  # what is unpacked from a zip; the rest is ignored
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "tokenizer.model", "spiece.model",
                   "sentencepiece.bpe.model")
IMAGE_PROCESSOR = "preprocessor_config.json"
MAX_HEADER = 100 * 2 ** 20  # a safetensors header larger than this is not a model's
CONVERT = ("convert it on a machine with the model: `model = AutoModel.from_pretrained(folder)` (or the model's "
           "own class), then `model.save_pretrained(out, safe_serialization=True)` and the tokenizer's or image "
           "processor's `.save_pretrained(out)`, and zip the folder out")
MODEL_ZIP_LAYOUT = """my-model/                    (the folder save_pretrained wrote; or these files at the zip's top)
  config.json
  model.safetensors          (or model-00001-of-00002.safetensors, ... and its index)
  tokenizer.json, tokenizer_config.json, vocab.txt, ...      (a text model)
  preprocessor_config.json                                   (an image model)"""


def max_model_bytes() -> int:
    """The cap on an uploaded model, zipped and unpacked: WVIZ_MAX_MODEL_MB megabytes (default MAX_MODEL_MB).

    >>> from wviz.models.safety import max_model_bytes
    >>> max_model_bytes() // 2 ** 20
    600
    """
    env = os.environ.get("WVIZ_MAX_MODEL_MB")
    try:
        mb = MAX_MODEL_MB if env is None else float(env)
    except ValueError:
        raise ValueError(f"WVIZ_MAX_MODEL_MB must be a number of megabytes, not {env!r}") from None
    if not (mb > 0 and math.isfinite(mb)):
        raise ValueError(f"WVIZ_MAX_MODEL_MB must be positive, got {env}")
    return int(mb * 2 ** 20)


@dataclass(frozen=True)
class ModelFolder:
    """A checked model folder: its path, its config.json (a dict), its family ('encoder', 'decoder', 'image') and
    its number of parameters (read from the safetensors headers)."""

    path: Path
    config: dict
    family: str
    parameters: int


def _tensors(path: Path) -> int:
    """The number of parameters in a safetensors file: the floating-point numbers its header lists (8 bytes of
    length, then JSON; integer buffers such as BERT's position_ids are not parameters); ValueError when the header
    is not one or points past the end of the file."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        n = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
        if not 2 <= n <= min(MAX_HEADER, size - 8):
            raise ValueError(f"{path.name} is not a safetensors file (its header length is {n})")
        try:
            header = json.loads(f.read(n))
            entries = [v for k, v in header.items() if k != "__metadata__"]
            count = sum(math.prod(e["shape"]) for e in entries if e["dtype"].startswith(("F", "BF")))
            end = max((e["data_offsets"][1] for e in entries), default=0)
        except (ValueError, TypeError, KeyError, AttributeError, IndexError, RecursionError):
            raise ValueError(f"{path.name} is not a safetensors file (its header is not a table of tensors)") from None
    if 8 + n + end > size:
        raise ValueError(f"{path.name} is cut short: its header describes {8 + n + end} bytes, the file has {size}")
    return count


def _json(path: Path) -> tuple[dict | None, str | None]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None, f"{path.name} is not valid JSON"
    return (data, None) if isinstance(data, dict) else (None, f"{path.name} is not a JSON object")


def _pickles_and_code(names: list[str]) -> list[str]:
    """An upload's pickles and code, refused: nothing in an upload may run when it is read."""
    problems = [f"{n} is a pickle file, which can run code when it is loaded: wviz reads weights from "
                f".safetensors only; {CONVERT}" for n in names if n.lower().endswith(PICKLES)]
    return problems + [f"{n} is Python code: wviz never runs a model's own code" for n in names
                       if n.lower().endswith(".py")]


def _own_code(files: list[Path]) -> list[str]:
    """The JSON files that point at the model's own code (auto_map), which wviz never runs."""
    problems = []
    for p in files:
        if p.suffix.lower() == ".json":
            data, _ = _json(p)
            if data is not None and "auto_map" in data:
                problems.append(f"{p.name} has an auto_map: the model needs its own code (trust_remote_code), "
                                "which wviz never runs; use a model whose architecture transformers ships")
    return problems


def check_folder(path) -> ModelFolder:
    """The :class:`ModelFolder` at ``path``, or a ValueError listing every problem (module docstring): no
    config.json, an unsupported model_type, no .safetensors weights, an auto_map, no tokenizer (text) or image
    processor (image) files, a safetensors header that is not sound. A folder's other files are never read: a
    pickle beside the .safetensors weights (a hub download often has pytorch_model.bin too) is left alone, since
    wviz loads with use_safetensors=True; an upload's pickles and code are refused before unpacking (:func:`unpacked`).

    >>> import json, tempfile
    >>> from pathlib import Path
    >>> from wviz.models.safety import check_folder
    >>> folder = Path(tempfile.mkdtemp())
    >>> _ = (folder / "config.json").write_text(json.dumps({"model_type": "bert"}))
    >>> _ = (folder / "pytorch_model.bin").write_bytes(b"not read")
    >>> check_folder(folder)
    Traceback (most recent call last):
        ...
    ValueError: The model folder has 2 problems:
    - it has no weights in .safetensors files (pytorch_model.bin is a pickle file, which wviz never reads: convert it on a machine with the model: ...)
    - it has no tokenizer files (tokenizer.json, vocab.txt, vocab.json, ...)
    """
    path = Path(path)
    files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else []
    names = {p.name for p in files}
    problems = _own_code(files)
    config, bad = _json(path / "config.json") if "config.json" in names else (None, "it has no config.json")
    family = None
    if config is not None:
        try:
            family = family_of(config)
        except ValueError as err:
            problems.append(str(err))
    problems += [bad] if bad else []
    weights = [p for p in files if p.suffix == ".safetensors"]
    pickles = [p.name for p in files if p.suffix.lower() in PICKLES]
    if not weights:
        problems.append("it has no weights in .safetensors files" + (
            f" ({', '.join(pickles)} {'is a pickle file' if len(pickles) == 1 else 'are pickle files'}, which wviz "
            f"never reads: {CONVERT})" if pickles else ""))
    if family == "image" and IMAGE_PROCESSOR not in names:
        problems.append(f"it has no {IMAGE_PROCESSOR} (the image processor's settings)")
    if family in ("encoder", "decoder") and not names & set(TOKENIZER_FILES):
        problems.append(f"it has no tokenizer files ({', '.join(TOKENIZER_FILES[:3])}, ...)")
    parameters = 0
    for p in weights:
        try:
            parameters += _tensors(p)
        except ValueError as err:
            problems.append(str(err))
    if problems or config is None or family is None:   # no problem means both were read
        io.fail("model folder", problems)
    return ModelFolder(path=path, config=config, family=family, parameters=parameters)


def _layout(infos: list[zipfile.ZipInfo]) -> tuple[str, list[zipfile.ZipInfo]]:
    """The zip's model folder (its top, or its one top folder: 'name/') and every file in it or below, skipping
    macOS's __MACOSX/ and hidden files."""
    files = [i for i in infos if not i.is_dir() and not any(
        part.startswith((".", "__MACOSX")) for part in PurePosixPath(i.filename).parts)]
    tops = {PurePosixPath(i.filename).parts[0] for i in files}
    at_top = any(len(PurePosixPath(i.filename).parts) == 1 for i in files)
    prefix = "" if at_top or len(tops) != 1 else next(iter(tops)) + "/"
    return prefix, [i for i in files if i.filename.startswith(prefix)]


def _stream(z: zipfile.ZipFile, info: zipfile.ZipInfo, target: Path) -> None:
    """Copy one member to ``target`` (a new file: never one that exists, never through a link), never more bytes
    than its header declares."""
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    written = 0
    with os.fdopen(fd, "wb") as out, z.open(info) as src:
        while chunk := src.read(2 ** 20):
            written += len(chunk)
            if written > info.file_size:
                raise ValueError(f"{info.filename!r} unpacks to more bytes than its header declares")
            out.write(chunk)
    if written != info.file_size:
        raise ValueError(f"{info.filename!r} unpacks to fewer bytes than its header declares")


def _unpack(raw: bytes, folder: Path) -> None:
    """Check the zip (module docstring) and stream its model files into ``folder``; ValueError listing every
    problem found before unpacking."""
    cap = max_model_bytes()
    if len(raw) > cap:
        io.fail("model zip", [f"it is {len(raw) / 2 ** 20:.1f} MB, over the limit of {cap / 2 ** 20:.0f} MB "
                              "(WVIZ_MAX_MODEL_MB sets it)"])
    try:
        z = zipfile.ZipFile(_bytes.BytesIO(raw))
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        io.fail("model zip", ["it is not a .zip file"], MODEL_ZIP_LAYOUT + "\n")
    with z:
        infos = z.infolist()
        if len(infos) > MAX_ZIP_FILES:
            io.fail("model zip", [f"it holds {len(infos)} files; a model folder has a few dozen at most"])
        problems = io.zip_problems(infos, cap, "WVIZ_MAX_MODEL_MB")
        prefix, files = _layout(infos) if not problems else ("", [])
        problems += _pickles_and_code([i.filename[len(prefix):] for i in files])
        top = [i for i in files if "/" not in i.filename[len(prefix):] and i.filename.endswith(MODEL_FILES)]
        if not problems and not any(i.filename == prefix + "config.json" for i in top):
            problems.append("it has no config.json at its top or in its one top folder")
        if problems:
            io.fail("model zip", problems, MODEL_ZIP_LAYOUT + "\n")
        for info in top:
            try:
                _stream(z, info, folder / info.filename[len(prefix):])
            except FileExistsError:
                io.fail("model zip", [f"{info.filename!r} appears twice"])
            except (ValueError, zipfile.BadZipFile, NotImplementedError, EOFError, OSError) as err:
                io.fail("model zip", [f"{info.filename}: {err}"])


@contextlib.contextmanager
def unpacked(raw: bytes):
    """The model files of an uploaded .zip (MODEL_ZIP_LAYOUT, the folder that save_pretrained writes), checked
    (module docstring) and unpacked into a new temporary folder that is yielded, then removed with everything in
    it, whatever happens. A zip that fails a check raises ValueError listing every problem, and leaves nothing
    behind.

    >>> import io, json, zipfile
    >>> from wviz.models.safety import unpacked
    >>> buffer = io.BytesIO()
    >>> with zipfile.ZipFile(buffer, "w") as z:
    ...     z.writestr("my-model/config.json", json.dumps({"model_type": "bert"}))
    ...     z.writestr("my-model/README.md", "not unpacked")
    >>> with unpacked(buffer.getvalue()) as folder:
    ...     print(sorted(p.name for p in folder.iterdir()))
    ['config.json']
    >>> folder.exists()
    False
    >>> with zipfile.ZipFile(buffer, "w") as z:
    ...     z.writestr("../escape.json", "{}")
    >>> with unpacked(buffer.getvalue()) as folder:
    ...     pass
    Traceback (most recent call last):
        ...
    ValueError: The model zip has a problem:
    - '../escape.json' leads outside the zip's folder ('..', backslashes)
    ...
    """
    folder = Path(tempfile.mkdtemp(prefix="wviz-model-"))
    try:
        _unpack(raw, folder)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def read_picture(raw: bytes):
    """An uploaded PNG/JPEG/BMP as an RGB PIL image, or a ValueError saying why it is not one: over MAX_PICTURE_MB,
    not a picture PIL reads, another format than its name may say, 16-bit or float pixels, more pixels than
    wviz.vit.data.MAX_PIXELS (or PIL's decompression-bomb limit).

    >>> import io
    >>> from PIL import Image
    >>> from wviz.models.safety import read_picture
    >>> buffer = io.BytesIO()
    >>> Image.new("L", (40, 30), 128).save(buffer, "PNG")
    >>> read_picture(buffer.getvalue()).size, read_picture(buffer.getvalue()).mode
    ((40, 30), 'RGB')
    >>> read_picture(b"GIF89a not really")
    Traceback (most recent call last):
        ...
    ValueError: your picture was not used: it is not a picture PIL can read (UnidentifiedImageError). A valid picture is a PNG, JPEG or BMP file of 8-bit grey or colour pixels, up to 10 MB and 40 megapixels.
    """
    from PIL import Image, UnidentifiedImageError

    from wviz.vit.data import IMAGE_FORMATS, MAX_PIXELS

    why = None
    if len(raw) > MAX_PICTURE_MB * 2 ** 20:
        why = f"it is {len(raw) / 2 ** 20:.1f} MB"
    else:
        try:
            with Image.open(_bytes.BytesIO(raw)) as im:
                limit = min(MAX_PIXELS, Image.MAX_IMAGE_PIXELS or MAX_PIXELS)
                if im.format not in IMAGE_FORMATS:
                    why = f"it is a {im.format} file"
                elif im.mode not in ("1", "L", "LA", "P", "PA", "RGB", "RGBA", "CMYK", "YCbCr"):
                    why = f"its pixels are of mode {im.mode} (16-bit or float)"
                elif im.width * im.height > limit:
                    why = f"it is {im.width} x {im.height} pixels"
                else:
                    return im.convert("RGB")
        except (UnidentifiedImageError, OSError, Image.DecompressionBombError, SyntaxError, ValueError) as err:
            why = f"it is not a picture PIL can read ({err.__class__.__name__})"
    raise ValueError(f"your picture was not used: {why}. A valid picture is a PNG, JPEG or BMP file of 8-bit grey "
                     f"or colour pixels, up to {MAX_PICTURE_MB} MB and {MAX_PIXELS / 1e6:g} megapixels.")
