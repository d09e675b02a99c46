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
- a zip is checked before anything is unpacked, as every zip upload is (wviz.io.open_zip): its entries counted
  from its end record before zipfile parses its directory (at most MAX_ZIP_FILES), then absolute paths, '..',
  links, encrypted members, contents over the cap, zip bombs; its model files (and nothing else) are streamed into a new
  temporary folder, never more bytes than each header declares, and the folder is removed when the caller is done;
- the model_type must be one wviz can swap (wviz.models.families), and every number the folder brings is checked
  before anything is allocated, each refusal one sentence: config.json's sizes, within bounds that the largest
  public checkpoints of the supported families meet (SIZES) and agreeing with each other (heads that divide the
  hidden size, key-value heads that divide the heads, patches that divide the picture); the image processor's
  picture size (at most MAX_SIDE pixels a side); the safetensors headers, read without loading a tensor and sound
  as safetensors requires (wviz.safetensors_header, within MAX_HEADER bytes and DTYPES), which give
  the model's size; and that size in float32, held to WVIZ_MAX_MODEL_MB.

Settings: WVIZ_MAX_MODEL_MB, the cap on an uploaded model, zipped and unpacked, and on any model's weights in
float32 but the bundled one's (default MAX_MODEL_MB). Streamlit's own upload limit (server.maxUploadSize, in MB)
must be at least as large for the upload to reach wviz.
"""
from __future__ import annotations

import contextlib
import io as _bytes
import json
import math
import os
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from wviz import io
from wviz.models.families import declared, family_of
from wviz.safetensors_header import Limits, read_header, shown, whole

__all__ = ["MAX_MODEL_MB", "MAX_PICTURE_MB", "ModelFolder", "max_model_bytes", "check_folder", "unpacked",
           "read_picture"]

MAX_MODEL_MB = 600  # every base-size model in float32 fits (BERT-base 440 MB, RoBERTa-base 500, GPT-2 550)
MAX_PICTURE_MB = 10
MAX_ZIP_FILES = 1000  # a model folder holds tens of files (Llama 3.1 405B's 191 shards are the most we know of)
PICKLES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".joblib")
MODEL_FILES = (".json", ".safetensors", ".txt", ".model")  # what is unpacked from a zip; the rest is ignored
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "tokenizer.model", "spiece.model",
                   "sentencepiece.bpe.model")
IMAGE_PROCESSOR = "preprocessor_config.json"
# a safetensors header takes about 120 bytes a tensor: 8 MB lists some 70,000 tensors (a model has hundreds to a
# few thousand per file), and parsing it takes about 50 MB (safetensors' own limit, 100 MB, would take 600 MB)
MAX_HEADER = 8 * 2 ** 20
# the dtypes wviz loads (transformers converts them to float32): bytes per number
DTYPES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
MODEL_HEADER = Limits(MAX_HEADER, DTYPES, "a model")
# pixels a side of the pictures an image model reads: ViT's and DeiT's largest public checkpoints read 384
# (google/vit-large-patch16-384, facebook/deit-base-patch16-384) and the largest ViT-style ones 518 (DINOv2), so
# 518 leaves room for a fine-tuned model while a picture stays a few MB; 6000 cost 1.4 GB (issue 49)
MAX_SIDE = 518
# bytes of a JSON file wviz reads: the largest of the supported families' public checkpoints are tokenizer.json
# files of about 9 MB (Llama 3's, XLM-RoBERTa's); JSON takes several times its size once parsed
MAX_JSON = 32 * 2 ** 20
MAX_LABELS = 100_000  # an image classifier's classes: ViT on ImageNet-21k has 21,843
# config.json's sizes: the names transformers reads (its own first, then GPT-2's and DistilBERT's aliases) and the
# largest allowed, each generous: the largest public checkpoint of a supported family is named
SIZES = (
    (("num_hidden_layers", "n_layer", "n_layers"), 256),        # Llama 3.1 405B: 126 layers
    (("num_attention_heads", "n_head", "n_heads"), 256),       # Llama 3.1 405B: 128 heads
    (("num_key_value_heads",), 256),                            # Llama 3.1 405B: 8; Qwen2-72B: 8
    (("hidden_size", "n_embd", "dim"), 65_536),                 # Llama 3.1 405B: 16,384
    (("intermediate_size", "n_inner", "hidden_dim"), 262_144),  # Llama 3.1 405B: 53,248
    (("head_dim",), 1024),                                      # Llama, Qwen3, Mistral: 128
    (("embedding_size",), 65_536),                              # ELECTRA-large: 1,024
    (("pooler_output_size",), 65_536),                          # ViT: its hidden size
    (("vocab_size",), 1_000_000),                               # XLM-RoBERTa: 250,002; Qwen2.5: 152,064
    (("max_position_embeddings", "n_positions"), 2 ** 21),      # Mistral NeMo: 1,024,000
    (("type_vocab_size",), 1024),                               # BERT: 2
    (("num_labels",), MAX_LABELS),
    (("image_size",), MAX_SIDE),                                # ViT, DeiT: 384
    (("patch_size",), MAX_SIDE),                                # ViT, DeiT: 14 to 32
    (("num_channels",), 3),                                     # wviz feeds RGB pictures
)
PAIRS = ("image_size", "patch_size")  # a number or [height, width]
PROCESSORS = ("ViT", "DeiT")  # the image processors wviz reads (ViTImageProcessor, DeiTImageProcessorFast, ...)
CONVERT = ("convert it on a machine with the model: `model = AutoModel.from_pretrained(folder)` (or the model's "
           "own class), then `model.save_pretrained(out, safe_serialization=True)` and the tokenizer's or image "
           "processor's `.save_pretrained(out)`, and zip the folder out")
MODEL_ZIP_LAYOUT = """my-model/                    (the folder save_pretrained wrote; or these files at the zip's top)
  config.json
  model.safetensors          (or model-00001-of-00002.safetensors, ... and its index)
  tokenizer.json, tokenizer_config.json, vocab.txt, ...      (a text model)
  preprocessor_config.json                                   (an image model)"""
MODEL_ZIP = io.ZipUpload("model zip", "WVIZ_MAX_MODEL_MB", MAX_ZIP_FILES, "a model folder has tens of them",
                         MODEL_ZIP_LAYOUT)


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


def _tensors(path: Path) -> tuple[int, int]:
    """(parameters, bytes in float32) of a safetensors file, from its header (wviz.safetensors_header: sound as
    safetensors itself requires, dtypes of DTYPES, at most MAX_HEADER bytes): the floating-point numbers it lists
    (integer buffers such as BERT's position_ids are not parameters), and what they take once transformers has
    them in float32."""
    try:
        with open(path, "rb") as f:
            tensors = read_header(f, path.stat().st_size, MODEL_HEADER).tensors.values()
    except ValueError as err:
        raise ValueError(f"{path.name}: {err}") from None
    parameters, memory = 0, 0
    for t in tensors:
        floating = t.dtype.startswith(("F", "BF"))
        parameters += t.numbers if floating else 0
        memory += t.numbers * (4 if floating else DTYPES[t.dtype])
    return parameters, memory


def _json(path: Path) -> tuple[dict | None, str | None]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None, f"{path.name} is not valid JSON"
    return (data, None) if isinstance(data, dict) else (None, f"{path.name} is not a JSON object")


def _sizes(config: dict, fields: dict) -> tuple[dict, list[str]]:
    """The sizes config.json gives (SIZES), by transformers' own name: {name: (value, the name the file uses)};
    and a problem for each that is not a whole number within its bound (or null where ``fields``, what transformers
    declares, allows it), or that is given twice, differently."""
    found: dict[str, tuple[Any, str]] = {}
    problems: list[str] = []
    for names, high in SIZES:
        given = [(k, config[k]) for k in names if k in config]
        for k, v in given:
            pair = k in PAIRS and isinstance(v, list) and len(v) == 2
            nullable = v is None and fields.get(k, (None, False))[1]
            if not nullable and not all(whole(x, 1, high) for x in (v if pair else [v])):
                problems.append(f"config.json's {k} must be a whole number from 1 to {high:,}, not {shown(v)}")
        if len({json.dumps(v) for _, v in given}) > 1:
            problems.append(f"config.json gives {names[0]} twice, differently: "
                            + " and ".join(f"{k} {shown(v)}" for k, v in given))
        if given:
            found[names[0]] = given[0][1], given[0][0]
    return found, problems


def _sides(value) -> tuple:
    """(height, width) of a size that config.json gives as one number or as a pair."""
    return tuple(value) if isinstance(value, list) else (value, value)


def _shape_problems(config: dict) -> list[str]:
    """What config.json's sizes must satisfy before transformers builds a model of them: each a whole number
    within its bound (SIZES; 0, -1, 1e300, true and "lots" are not), the hidden size split evenly into the
    attention heads (unless head_dim sets their size), the heads into the key-value heads (grouped-query
    attention), the picture into whole patches, the padding token one of the vocabulary's. A size config.json
    leaves out is transformers' default for the model type (wviz.models.families.declared)."""
    fields = declared(config["model_type"])
    found, problems = _sizes(config, fields)
    if problems:
        return problems
    value: dict[str, Any] = {n[0]: found[n[0]][0] if n[0] in found else fields.get(n[0], (None,))[0] for n, _ in SIZES}

    def said(n: str) -> str:   # a size as the file names it, or as transformers' default
        return f"{found[n][1]} ({value[n]})" if n in found else f"the default {n} ({value[n]})"

    heads, hidden, kv = value["num_attention_heads"], value["hidden_size"], value["num_key_value_heads"]
    if value["head_dim"] is None and hidden % heads:
        problems.append(f"config.json's {said('hidden_size')} must split evenly into {said('num_attention_heads')} "
                        "attention heads")
    if kv and heads % kv:
        problems.append(f"config.json's {said('num_attention_heads')} must be a multiple of {said('num_key_value_heads')}"
                        ": in grouped-query attention each key-value head serves as many heads as the others")
    if value["image_size"] and any(s % p for s, p in zip(_sides(value["image_size"]), _sides(value["patch_size"]))):
        problems.append(f"config.json's {said('patch_size')} must divide its {said('image_size')}: a picture is cut "
                        "into whole patches")
    return problems + _token_problems(config, value["vocab_size"], value["max_position_embeddings"], fields)


def _token_problems(config: dict, vocab, positions, fields: dict) -> list[str]:
    """The padding token one of the vocabulary's (torch refuses any other), and room in RoBERTa's positions for
    a token after its offset of pad_token_id + 1; an image classifier's classes at most MAX_LABELS."""
    problems = []
    labels = config.get("id2label")
    if labels is not None and not (isinstance(labels, dict) and len(labels) <= MAX_LABELS):
        problems.append(f"config.json's id2label must name at most {MAX_LABELS:,} classes")
    pad = config.get("pad_token_id", fields.get("pad_token_id", (None,))[0])
    roberta = config["model_type"] in ("roberta", "xlm-roberta")
    if roberta and pad is None:
        problems.append("config.json's pad_token_id must be a token of its vocabulary: RoBERTa counts positions "
                        "from it, not null")
    if vocab is None or pad is None:
        return problems
    if not whole(pad, -vocab, vocab - 1):
        return problems + [f"config.json's pad_token_id ({shown(pad)}) must be a token of its vocabulary (0 to "
                           f"{vocab - 1})"]
    if roberta and positions - max(pad, 0) - 1 < 1:
        problems.append(f"config.json's max_position_embeddings ({positions}) leaves no position for a token after "
                        f"RoBERTa's offset of pad_token_id + 1 ({max(pad, 0) + 1})")
    return problems


def _picture_size(key: str, value) -> list[str]:
    """A problem when preprocessor_config.json's ``key`` (size or crop_size: a number, {"height", "width"},
    {"shortest_edge"}, ... or [height, width]) makes pictures of more than MAX_SIDE pixels a side: a 30000 px
    picture takes gigabytes before the model can refuse it."""
    if value is None:
        return []
    edges = {"height", "width", "shortest_edge", "longest_edge", "max_height", "max_width"}
    sides = (list(value.values()) if isinstance(value, dict) and value and set(value) <= edges
             else value if isinstance(value, list) and len(value) == 2 else [value])
    if all(whole(side, 1, MAX_SIDE) for side in sides):
        return []
    return [f"{IMAGE_PROCESSOR}'s {key} must give picture sides of 1 to {MAX_SIDE} pixels (more than any public "
            f"ViT or DeiT model reads), not {shown(value)}"]


def _processor_problems(path: Path) -> list[str]:
    """What is wrong with an image model's preprocessor_config.json: not JSON, an image processor other than
    ViT's or DeiT's (another reads other settings), a mean, spread or rescale factor that is not a finite number
    (a spread of 0 would make every pixel infinite), a picture size over MAX_SIDE."""
    data, bad = _json(path)
    if data is None:
        return [str(bad)]
    problems = []
    for key in ("image_processor_type", "feature_extractor_type"):
        kind = data.get(key)
        if kind is not None and not (isinstance(kind, str) and kind.startswith(PROCESSORS)):
            problems.append(f"{IMAGE_PROCESSOR} names the image processor {shown(kind)}; wviz reads ViT's and "
                            "DeiT's only")
    problems += [f"{IMAGE_PROCESSOR}'s {key} must be {what}, not {shown(data[key])}"
                 for key, what in (("image_mean", "one number or three"), ("image_std", "one number or three, none 0"),
                                   ("rescale_factor", "a number other than 0"))
                 if key in data and not _finite(data[key], key != "image_mean")]
    return problems + _picture_size("size", data.get("size")) + _picture_size("crop_size", data.get("crop_size"))


def _finite(value, nonzero: bool) -> bool:
    """Whether ``value`` is a finite number, or a list of three (the image processor's mean and spread per colour),
    none of them 0 when ``nonzero``: pixels are divided by them."""
    numbers = value if isinstance(value, list) and len(value) == 3 else [value]
    return all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and abs(x) < 1e30
               and (x != 0 or not nonzero) for x in numbers)


def _tokenizer_problems(path: Path) -> list[str]:
    """tokenizer_config.json's model_max_length, the longest text the tokenizer takes, must be a positive number
    (transformers compares every text's length with it; save_pretrained writes 1e30 for 'no limit')."""
    if not path.is_file():
        return []
    data, bad = _json(path)
    if data is None:
        return [str(bad)]
    longest = data.get("model_max_length")
    if longest is None or isinstance(longest, (int, float)) and not isinstance(longest, bool) and longest > 0:
        return []
    return [f"{path.name}'s model_max_length must be a positive number of tokens, not {shown(longest)}"]


def _index_problems(path: Path, names: set[str]) -> list[str]:
    """A shard index (model.safetensors.index.json) must name only .safetensors files of the folder: transformers
    opens the files it names, and a path ('../other/model.safetensors') would lead outside the folder."""
    index = path / "model.safetensors.index.json"
    if index.name not in names:
        return []
    data, bad = _json(index)
    weights = data.get("weight_map") if data is not None else None
    if not isinstance(weights, dict):
        return [bad or f"{index.name} has no weight_map"]
    strays = [f for f in weights.values() if not (isinstance(f, str) and f in names and f.endswith(".safetensors"))]
    return [f"{index.name} names {name}, not a .safetensors file of the folder"
            for name in sorted(set(map(shown, strays)))[:3]]


def _weights(files: list[Path], capped: bool) -> tuple[int, list[str]]:
    """The parameters of a folder's .safetensors files, from their headers, and the problems: a header that is
    not sound (_tensors), or weights over WVIZ_MAX_MODEL_MB once in float32 (wviz runs every model in float32)."""
    parameters, memory, problems = 0, 0, []
    for p in files:
        try:
            count, size = _tensors(p)
        except ValueError as err:
            problems.append(str(err))
        else:
            parameters, memory = parameters + count, memory + size
    cap = max_model_bytes()
    if capped and memory > cap:
        problems.append(f"its weights take {memory / 2 ** 20:,.3g} MB in float32 ({parameters:,} parameters), "
                        f"over the limit of {cap / 2 ** 20:,.3g} MB (WVIZ_MAX_MODEL_MB sets it)")
    return parameters, problems


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


def check_folder(path, capped: bool = True) -> ModelFolder:
    """The :class:`ModelFolder` at ``path``, or a ValueError listing every problem (module docstring): no
    config.json, an unsupported model_type, no .safetensors weights, an auto_map, no tokenizer (text) or image
    processor (image) files; and every number the folder brings, checked before anything is allocated: config.json's
    sizes (_shape_problems), the image processor's picture size (_processor_problems), the safetensors headers
    (_tensors) and the weights' size in float32, held to WVIZ_MAX_MODEL_MB unless ``capped`` is False (the bundled
    model), and a shard index's files (_index_problems). A folder's other files are never read: a
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
    big = [p for p in files if p.suffix.lower() == ".json" and p.stat().st_size > MAX_JSON]
    if big:   # never parsed: the other checks read them
        io.fail("model folder", [f"{p.name} is {p.stat().st_size / 2 ** 20:.0f} MB; a model's JSON files take at "
                                 f"most {MAX_JSON // 2 ** 20} MB" for p in big])
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
    elif family == "image":
        problems += _processor_problems(path / IMAGE_PROCESSOR)
    if family in ("encoder", "decoder") and not names & set(TOKENIZER_FILES):
        problems.append(f"it has no tokenizer files ({', '.join(TOKENIZER_FILES[:3])}, ...)")
    elif family in ("encoder", "decoder"):
        problems += _tokenizer_problems(path / "tokenizer_config.json")
    problems += _shape_problems(config) if config is not None and family is not None else []
    parameters, bad_weights = _weights(weights, capped)
    problems += bad_weights + _index_problems(path, names)
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
    than its header declares (wviz.io.unzipped)."""
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "wb") as out:
        for chunk in io.unzipped(z, info):
            out.write(chunk)


def _unpack(raw: bytes, folder: Path) -> None:
    """Check the zip (module docstring) and stream its model files into ``folder``; ValueError listing every
    problem found before unpacking."""
    with io.open_zip(raw, MODEL_ZIP, max_model_bytes()) as z:
        prefix, files = _layout(z.infolist())
        problems = _pickles_and_code([i.filename[len(prefix):] for i in files])
        top = [i for i in files if "/" not in i.filename[len(prefix):] and i.filename.endswith(MODEL_FILES)]
        if not problems and not any(i.filename == prefix + "config.json" for i in top):
            problems.append("it has no config.json at its top or in its one top folder")
        if problems:
            io.fail(MODEL_ZIP.what, problems, MODEL_ZIP_LAYOUT + "\n")
        for info in top:
            try:
                _stream(z, info, folder / info.filename[len(prefix):])
            except FileExistsError:
                io.fail(MODEL_ZIP.what, [f"{info.filename!r} appears twice"])
            except (zipfile.BadZipFile, EOFError):   # zipfile's checksum or a member cut short
                io.fail(MODEL_ZIP.what, [f"{info.filename!r} is damaged: its bytes are not what the zip's directory "
                                         "says (their size or checksum)"])
            except ValueError as err:                # io.unzipped's: more or fewer bytes than declared
                io.fail(MODEL_ZIP.what, [f"{info.filename!r} {err}"])
            except (NotImplementedError, OSError) as err:
                io.fail(MODEL_ZIP.what, [f"{info.filename}: {err}"])


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
