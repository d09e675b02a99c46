"""Reading user files (untrusted): size limits, strict columns and shapes, plain error messages."""
from __future__ import annotations

import csv
import os
import stat
import struct
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from io import BytesIO
from pathlib import PurePosixPath
from typing import ClassVar, NoReturn, cast

import numpy as np
import pandas as pd
import torch

from wviz.vit.data import IMAGE_SUFFIXES, image_from_bytes, resize

MAX_UPLOAD_BYTES = 2 * 1024 * 1024  # a 2-D cloud or cost matrix for an interactive page is far smaller
MAX_POINTS = 4096
MAX_LISTED = 8  # problems listed in one message; the rest are counted

# What a valid file looks like: shown in every error about such a file, and offered as the example download.
POINTS_EXAMPLE = """cloud,x,y,mass
source,0.0,0.0,1
source,1.0,0.0,1
source,2.0,0.0,2
target,0.0,1.0,1
target,2.0,1.0,3
"""
MATRIX_EXAMPLE = """0,1,4
1,0,1
4,1,0
"""


def fail(what: str, problems: list[str], example: str | None = None) -> NoReturn:
    """Raise one ValueError listing every problem found in ``what`` (the user's file or table, in their words),
    then, when given, what a valid one looks like."""
    shown = problems[:MAX_LISTED] + ([f"and {len(problems) - MAX_LISTED} more"] if len(problems) > MAX_LISTED else [])
    head = f"The {what} has a problem:" if len(problems) == 1 else f"The {what} has {len(problems)} problems:"
    message = head + "\n" + "\n".join(f"- {p}" for p in shown)
    if example:
        message += f"\n\nA valid {what} looks like this:\n\n```\n{example}```"
    raise ValueError(message)


def _text(data: bytes, what: str, example: str | None) -> str:
    """The upload as text, or a message saying why it is not a CSV file the page can read."""
    if len(data) > MAX_UPLOAD_BYTES:
        fail(what, [f"it is {len(data) / 1e6:.1f} MB; the limit is {MAX_UPLOAD_BYTES / 1e6:.0f} MB"])
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        fail(what, [f"it is not CSV text in UTF-8: byte 0x{data[err.start]:02x} at position {err.start} is not a "
                    "character. A spreadsheet (.xlsx) or a file saved in another encoding gives this: save it as "
                    "'CSV UTF-8 (comma delimited)'"], example)
    if not text.strip():
        fail(what, ["it is empty: a CSV file needs lines of comma-separated values"], example)
    return text


def _read_csv(data: bytes, what: str, header, example: str | None = None) -> pd.DataFrame:
    """A CSV upload as a table (``header=0``: its first line names the columns; None: none does); lines whose
    number of values differs from the first line's are all named."""
    text = _text(data, what, example)
    lines = [(i, row) for i, row in enumerate(csv.reader(text.splitlines()), 1) if row]
    width = len(lines[0][1])
    first = "the header (line 1)" if header == 0 else f"line {lines[0][0]}"
    ragged = [f"line {i} has {len(row)} values, but {first} has {width} (one value per column, separated by "
              "commas)" for i, row in lines[1:] if len(row) != width]
    if ragged:
        fail(what, ragged, example)
    # The table from the rows just read (text cells, an empty one None): the checks that follow read the numbers.
    cells = [[c.strip() or None for c in row] for _, row in lines]
    df = pd.DataFrame(cells[1:], columns=[c or "" for c in cells[0]]) if header == 0 else pd.DataFrame(cells)
    df.attrs["lines"] = [i for i, _ in lines[1 if header == 0 else 0:]]  # a file's rows are named by line
    return df


def _row(df: pd.DataFrame, r: int) -> str:
    """Row r (from 0) as the user sees it: its line in an uploaded file, its row number in an edited table."""
    lines = df.attrs.get("lines")
    return f"line {lines[r]}" if lines else f"row {r + 1}"


def _cell(df: pd.DataFrame, r: int, c: int) -> str:
    column = df.columns[c]
    column = f"column {c + 1}" if isinstance(column, (int, np.integer)) else f"column {column}"
    value = df.iat[r, c]
    shown = "empty" if pd.isna(value) else repr(value) if isinstance(value, str) else str(value)
    return f"an empty or non-numeric entry in {_row(df, r)}, {column} ({shown})"


def _floats(df: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """The table as floats, and a problem for every cell that is empty, not a number or not finite."""
    values = df.apply(pd.to_numeric, errors="coerce").to_numpy(dtype=float)
    return values, [_cell(df, r, c) for r, c in np.argwhere(~np.isfinite(values))]


def _numeric(df: pd.DataFrame, what: str, example: str | None = None) -> np.ndarray:
    values, problems = _floats(df)
    if problems:
        fail(what, problems, example)
    return values


def table_values(table: pd.DataFrame, columns: list[str], what: str) -> np.ndarray:
    """The numeric ``columns`` of an edited table as a float array (rows, columns); a ValueError names every
    empty or non-numeric cell by its row and column."""
    return _numeric(table[columns], what)


def read_points_csv(data: bytes) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two weighted 2-D clouds from a CSV with columns ``cloud,x,y[,mass]``; cloud is ``source`` or ``target``.

    Returns x (n, 2), a (n,), y (m, 2), b (m,) as float64 tensors; masses default to uniform and are normalised
    to total 1 (each cloud is a probability measure).
    """
    return _points(_read_csv(data, "points file", header=0, example=POINTS_EXAMPLE), "points file", POINTS_EXAMPLE)


def read_points_table(table: pd.DataFrame) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The same two clouds from an edited table (columns cloud, x, y[, mass], one point per row), with the same
    checks as :func:`read_points_csv`; an error names the table's rows and columns."""
    return _points(table.copy(), "points table", None)


def _cloud_problems(df: pd.DataFrame, cloud: np.ndarray, values: np.ndarray, what: str) -> list[str]:
    """What is wrong with each cloud's rows (none, too many, negative or zero masses)."""
    problems = []
    for name in ("source", "target"):
        rows = np.flatnonzero(cloud == name)
        mass = values[rows, 2]
        if len(rows) == 0:
            problems.append(f"the {what} has no {name} points: give at least one row with cloud '{name}'")
        elif len(rows) > MAX_POINTS:
            problems.append(f"the {name} cloud has {len(rows)} points; the limit is {MAX_POINTS}")
        problems += [f"the {name} masses must be non-negative, but {_row(df, r)} has mass {values[r, 2]:g}"
                     for r in rows[mass < 0]]
        if len(rows) and (mass >= 0).all() and mass.sum() <= 0:
            problems.append(f"the {name} masses must have a positive total; give at least one {name} point a "
                            "positive mass")
    return problems


def _points(df: pd.DataFrame, what: str, example: str | None):
    """x (n, 2), a (n,), y (m, 2), b (m,) from the rows of ``df`` (modified in place), masses normalised per
    cloud; every problem found is listed in one ValueError."""
    df.columns = [str(c).strip().lower() for c in df.columns]
    missing = {"cloud", "x", "y"} - set(df.columns)
    if missing:
        fail(what, [f"it needs columns cloud, x, y (and optionally mass); missing: {', '.join(sorted(missing))}"],
             example)
    cloud = df["cloud"].astype(str).str.strip().str.lower().to_numpy()
    problems = [f"{_row(df, int(r))}: the cloud column may only say 'source' or 'target', not {df['cloud'].iat[r]!r}"
                for r in np.flatnonzero(~np.isin(cloud, ["source", "target"]))]
    if "mass" not in df.columns:
        df["mass"] = 1.0
    values, bad_cells = _floats(df[["x", "y", "mass"]])
    problems += bad_cells or _cloud_problems(df, cloud, values, what)
    if problems:
        fail(what, problems, example)
    out = []
    for name in ("source", "target"):
        rows = np.flatnonzero(cloud == name)
        out += [torch.tensor(values[rows, :2]), torch.tensor(values[rows, 2] / values[rows, 2].sum())]
    x, a, y, b = out
    return x, a, y, b


def read_matrix_csv(data: bytes, what: str = "cost matrix", example: str | None = None) -> torch.Tensor:
    """A numeric matrix (n rows, m columns) from a CSV as a float64 tensor; a first row of column names is skipped.
    ``example`` is what a valid file looks like (e.g. MATRIX_EXAMPLE), shown with any error."""
    df = _read_csv(data, f"{what} file", header=None, example=example)
    first = df.iloc[0].apply(pd.to_numeric, errors="coerce") if len(df) > 1 else None
    if first is not None and first.isna().all():  # a header line: every entry is a name, not a number
        lines = df.attrs["lines"][1:]
        df = df.iloc[1:].reset_index(drop=True)
        df.attrs["lines"] = lines
    if df.shape[0] > MAX_POINTS or df.shape[1] > MAX_POINTS:
        fail(f"{what} file", [f"it is {df.shape[0]} x {df.shape[1]}; the limit is {MAX_POINTS} per side"])
    return torch.tensor(_numeric(df, f"{what} file", example))


def _number(piece: str) -> float | None:
    try:
        return float(piece)
    except ValueError:
        return None


def parse_matrix(text: str, what: str = "cost matrix") -> torch.Tensor:
    """A matrix typed as lines of numbers (one row per line, commas or spaces between entries); an error names
    every row of the wrong length and every entry that is not a finite number, by row and column."""
    rows = [line.replace(",", " ").split() for line in text.strip().splitlines() if line.strip()]
    if not rows:
        fail(what, [f"it is empty: type the {what}, one row per line"])
    problems = [f"every row needs the same number of entries: row 1 has {len(rows[0])}, row {r} has {len(row)}"
                for r, row in enumerate(rows[1:], 2) if len(row) != len(rows[0])]
    if len(rows) > MAX_POINTS or len(rows[0]) > MAX_POINTS:
        problems.append(f"it is {len(rows)} x {len(rows[0])}; the limit is {MAX_POINTS} per side")
    for r, row in enumerate(rows, 1):
        for c, piece in enumerate(row, 1):
            value = _number(piece)
            if value is None or not np.isfinite(value):
                problems.append(f"the entry in row {r}, column {c} ({piece!r}) is not "
                                f"{'a number' if value is None else 'finite'}")
    if problems:
        fail(what, problems)
    return torch.tensor([[float(p) for p in row] for row in rows], dtype=torch.float64)


def parse_numbers(text: str, what: str = "value") -> list[float]:
    """'1, 2.5 -3' -> [1.0, 2.5, -3.0]; a ValueError names every piece that is not a number."""
    pieces = [t for t in text.replace(",", " ").replace(";", " ").split() if t]
    if not pieces:
        fail(f"list of {what}s", [f"it is empty: type at least one {what}, separated by commas or spaces"])
    values = [_number(t) for t in pieces]
    problems = [f"{what} {i} ({t!r}) is not a number" for i, (t, v) in enumerate(zip(pieces, values), 1) if v is None]
    if problems:
        fail(f"list of {what}s", problems)
    return cast(list[float], values)   # no None left


def parse_masses(text: str, size: int, name: str, per: str = "point") -> torch.Tensor:
    """``size`` non-negative masses typed as numbers ('1, 1, 2'), as a float64 tensor (size,); an error names
    every piece that is not a non-negative number, and says how many masses were expected (one ``per`` row,
    column, point...)."""
    values = parse_numbers(text, f"mass of {name}")
    problems = [f"mass of {name} {i} ({v:g}) must be a non-negative finite number"
                for i, v in enumerate(values, 1) if not np.isfinite(v) or v < 0]
    if len(values) != size:
        problems.append(f"{name} needs {size} masses (one per {per}), got {len(values)}")
    if problems:
        fail(f"masses of {name}", problems)
    return torch.tensor(values, dtype=torch.float64)


# ---- pictures -------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Preprocessed:
    """An uploaded picture on its way to a model: steps = [(caption, (C, H, W) image in [0, 1])], the last one
    being the model's input; inverted says whether dark-on-light was turned into light-on-dark like the digits."""

    steps: list
    image: torch.Tensor
    inverted: bool


def _preprocess(raw: bytes, channels: int, size: int, invert: str, dark_ground: bool | None,
                stretch: bool) -> Preprocessed:
    if invert not in ("auto", "yes", "no"):
        raise ValueError(f"invert must be 'auto', 'yes' or 'no', got {invert!r}")
    full = image_from_bytes(raw, channels, 128)
    small = resize(full[None], size)[0]
    inverted = invert == "yes" or (invert == "auto" and (float(small.mean()) > 0.5) == dark_ground)
    x = 1 - small if inverted else small
    lo, hi = float(x.min()), float(x.max())
    if hi - lo < 1e-6:
        raise ValueError("the picture is a single flat colour: there is nothing for the model to read")
    steps = [(f"upload, {'grey' if channels == 1 else 'RGB'}, square", full), (f"{size} x {size}", small)]
    if inverted:
        steps.append(("inverted", x))
    if stretch:
        x = (x - lo) / (hi - lo)
        steps.append(("[0, 1]: model input", x))
    return Preprocessed(steps, x, inverted)


def read_image(raw: bytes, channels: int, size: int, invert: str = "auto", dark_ground: bool | None = True,
               stretch: bool = True) -> Preprocessed:
    """An uploaded PNG/JPG -> a ViT's input: grey (one channel: the luminance) or RGB (three channels: the colours
    kept), centre-cropped to a square, resized to size x size, inverted when ``invert`` is 'yes', or 'auto' and the
    picture's brightness is on the other side of one half from the training images' (``dark_ground`` True: they
    are mostly dark, as the digits' light strokes on black; False: mostly light; None: neither, never inverted),
    then, with ``stretch``, stretched to [0, 1] like the training digits (whose strokes reach 1). The last of the
    steps is the model's input. A file that is not such a picture raises a ValueError saying what is wrong and what
    a valid image is."""
    try:
        return _preprocess(raw, channels, size, invert, dark_ground, stretch)
    except ValueError as err:
        colour = "turned grey" if channels == 1 else "kept in colour"
        raise ValueError(f"your image was not used: {str(err).rstrip('.')}. A valid image is a PNG or JPG picture "
                         f"{'of one digit, light on dark or dark on light, ' if channels == 1 else ''}of any size "
                         f"(it is {colour}, centre-cropped to a square and resized to {size} x {size}); the example "
                         "image under the uploader is one.") from None


# ---- zip uploads (a test split, a model) ------------------------------------------------------------------------

MAX_ZIP_RATIO = 100   # PNG and JPEG barely compress (a few per cent); a member that grew 100 times is a zip bomb


@dataclass(frozen=True)
class ZipUpload:
    """One kind of zip upload: ``what`` names it in a message ('test-images zip'), ``setting`` is the environment
    variable that sets its cap in MB, ``most`` the most entries that wviz opens, ``holds`` what a valid one holds,
    said after 'it holds N files; ', and ``layout`` shows a valid one."""

    what: str
    setting: str
    most: int
    holds: str
    layout: str


_END = struct.Struct("<4s4H2LH")          # a zip's end of central directory record: its last 22 bytes or so
_END64 = struct.Struct("<4sQ2H2L4Q")      # ZIP64's end record, and the locator between it and the end record
_LOCATOR = struct.Struct("<4sLQL")


def zip_entries(raw: bytes) -> int:
    """How many entries a zip's central directory holds, read without parsing it (zipfile.ZipFile builds an object
    for every entry: 16 s and 700 MB for a million of them): the count its end record states (ZIP64's when
    there is one, as zipfile reads it) or the entries' signatures in the directory's bytes, the larger of the two
    (zipfile parses the directory by its size, whatever the count says). 0 when there is no end record: zipfile
    then says that it is not a zip."""
    last = len(raw) - _END.size
    at = last if raw.startswith(b"PK\x05\x06", max(last, 0)) and raw.endswith(b"\0\0") else \
        raw.rfind(b"PK\x05\x06", max(0, last - 65535))   # zipfile's search: a comment may follow the record
    if at < 0 or at + _END.size > len(raw):
        return 0
    count, size = _END.unpack_from(raw, at)[4:6]
    where = at - _LOCATOR.size - _END64.size
    if where >= 0 and raw.startswith(b"PK\x06\x07", at - _LOCATOR.size) and raw.startswith(b"PK\x06\x06", where):
        count, size = _END64.unpack_from(raw, where)[7:9]
        at = where
    return max(count, raw.count(b"PK\x01\x02", max(0, at - size), at))


def _unsafe(info: zipfile.ZipInfo) -> str | None:
    """Why a member of an uploaded zip is refused before anything is read: a path that leads outside the zip's
    folder (absolute, a drive, '..', backslashes), a link, an encrypted member."""
    name = info.filename
    parts = name.split("/")
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        return f"{name!r} is an absolute path"
    if "\\" in name or ".." in parts or "\0" in name:
        return f"{name!r} leads outside the zip's folder ('..', backslashes)"
    if stat.S_ISLNK(info.external_attr >> 16):
        return f"{name!r} is a symbolic link"
    if info.flag_bits & 0x1:
        return f"{name!r} is encrypted"
    return None


def zip_problems(infos: list[zipfile.ZipInfo], cap: int, setting: str) -> list[str]:
    """What is wrong with an uploaded zip's members, found before anything is decompressed: a path that leads
    outside the zip's folder, a link or an encrypted member (:func:`_unsafe`), contents that unpack to more than
    ``cap`` bytes (``setting`` names the environment variable that sets the cap), a member that unpacks to
    MAX_ZIP_RATIO times its packed size (a zip bomb)."""
    problems = [p for p in map(_unsafe, infos) if p]
    total = sum(i.file_size for i in infos)
    if total > cap:
        problems.append(f"its contents unpack to {total / 2 ** 20:.1f} MB, over the limit of {cap / 2 ** 20:.0f} MB "
                        f"({setting} sets it)")
    problems += [f"{i.filename!r} unpacks to {i.file_size / max(i.compress_size, 1):.0f} times its packed size: "
                 "refused as a zip bomb" for i in infos
                 if i.file_size > 64 * 1024 and i.file_size > MAX_ZIP_RATIO * max(i.compress_size, 1)]
    return problems


def open_zip(raw: bytes, upload: ZipUpload, cap: int) -> zipfile.ZipFile:
    """An uploaded zip, opened after the checks that decompress nothing, every zip upload's (a test split, a
    model): the upload over ``cap`` bytes, more than ``upload.most`` entries (:func:`zip_entries`, counted before
    zipfile parses the directory), not a zip, its members' problems (:func:`zip_problems`: paths out of the zip,
    links, encrypted members, contents over ``cap``, zip bombs); each refused with a ValueError listing them. Read
    its members with :func:`unzipped`."""
    if len(raw) > cap:
        fail(upload.what, [f"it is {len(raw) / 2 ** 20:.1f} MB, over the limit of {cap / 2 ** 20:.0f} MB "
                           f"({upload.setting} sets it)"])
    entries = zip_entries(raw)
    if entries > upload.most:
        fail(upload.what, [f"it holds {entries:,} files; {upload.holds} (wviz opens zips of at most "
                           f"{upload.most:,})"])
    try:
        z = zipfile.ZipFile(BytesIO(raw))
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        fail(upload.what, ["it is not a .zip file"], upload.layout + "\n")
    problems = zip_problems(z.infolist(), cap, upload.setting)
    if problems:
        z.close()
        fail(upload.what, problems, upload.layout + "\n")
    return z


def unzipped(z: zipfile.ZipFile, info: zipfile.ZipInfo) -> Iterator[bytes]:
    """A member's bytes, a MB at a time, never more than its header declares: a ValueError (to follow the
    member's name) when it unpacks to more or fewer, zipfile's errors when it is damaged."""
    left = info.file_size
    with z.open(info) as src:
        while chunk := src.read(min(2 ** 20, left + 1)):   # one byte past the declared size shows a lie
            left -= len(chunk)
            if left < 0:
                raise ValueError("unpacks to more bytes than its header declares")
            yield chunk
    if left:
        raise ValueError("unpacks to fewer bytes than its header declares")


# ---- a test split as a .zip -------------------------------------------------------------------------------------

MAX_ZIP_MB = 50       # default of WVIZ_MAX_TEST_ZIP_MB: the upload and its uncompressed contents, each
MAX_ZIP_IMAGES = 10_000
TEST_ZIP_LAYOUT = "test/<class>/<image>.png|jpg|jpeg|bmp, one folder per class (optionally inside one top folder)"
# the images, their folders and a few extras (macOS's __MACOSX/ doubles every file)
TEST_ZIP = ZipUpload("test-images zip", "WVIZ_MAX_TEST_ZIP_MB", 2 * MAX_ZIP_IMAGES,
                     f"at most {MAX_ZIP_IMAGES:,} images are read", TEST_ZIP_LAYOUT)


def max_zip_bytes() -> int:
    """The cap on an uploaded test-split zip and on its uncompressed contents: WVIZ_MAX_TEST_ZIP_MB megabytes
    (default MAX_ZIP_MB)."""
    env = os.environ.get("WVIZ_MAX_TEST_ZIP_MB")
    try:
        mb = MAX_ZIP_MB if env is None else float(env)
    except ValueError:
        raise ValueError(f"WVIZ_MAX_TEST_ZIP_MB must be a number of megabytes, not {env!r}") from None
    if not mb > 0:
        raise ValueError(f"WVIZ_MAX_TEST_ZIP_MB must be positive, got {env}")
    return int(mb * 2 ** 20)


@dataclass(frozen=True)
class TestImages:
    """Labelled test images read from an upload: images (N, C, H, W) in [0, 1], labels (N,) indexing
    class_names."""

    __test__: ClassVar[bool] = False   # not a test class (pytest collects names starting with Test)
    images: torch.Tensor
    labels: torch.Tensor
    class_names: list[str]


def _in_test(name: str) -> str | None:
    """The class folder of an image at [top/]test/<class>/<image>, or None for anything else (other folders,
    other files, macOS's __MACOSX/ and hidden files)."""
    parts = PurePosixPath(name).parts
    if any(p.startswith((".", "__MACOSX")) for p in parts) or PurePosixPath(name).suffix.lower() not in IMAGE_SUFFIXES:
        return None
    if len(parts) == 4 and parts[1] == "test" or len(parts) == 3 and parts[0] == "test":
        return parts[-2]
    return None


def _labels(found: list[str], names: list[str] | None, n_classes: int) -> tuple[list[str], list[str]]:
    """The class names the labels index (the model's, or the zip's folders when the model has none), and the
    problems: a folder that is not one of the model's classes, a number of folders that fits no model."""
    if names is None:
        if len(found) != n_classes:
            return found, [f"it has {len(found)} class folders ({', '.join(found)}) but the model has {n_classes} "
                           "classes (and no class names in its record): give one folder per class"]
        return found, []
    return names, [f"class folder {c!r} is not one of the model's classes ({', '.join(names)})"
                   for c in found if c not in names]


def read_test_zip(raw: bytes, channels: int, size: int, class_names: list[str] | None = None,
                  n_classes: int | None = None) -> TestImages:
    """Labelled test images from an uploaded .zip of test/<class>/ folders (TEST_ZIP_LAYOUT), read in memory:
    nothing is written to disk. Refused with every problem listed: the checks of every zip upload (:func:`open_zip`:
    an upload or contents over :func:`max_zip_bytes`, too many entries, a member that leads outside the zip or is a
    link, a zip bomb), a member that unpacks to more or fewer bytes than its header says (:func:`unzipped`), more
    than MAX_ZIP_IMAGES images, an image that is not a PNG/JPEG/BMP of 8-bit pixels or is too large (PIL's
    decompression-bomb limit, :func:`wviz.vit.data.image_from_bytes`), a class folder the model does not know.
    ``class_names``: the model's (the labels index them); without, the zip must hold ``n_classes`` folders, taken
    in sorted order."""
    with open_zip(raw, TEST_ZIP, max_zip_bytes()) as z:
        members = [i for i in z.infolist() if not i.is_dir() and _in_test(i.filename) is not None]
        folder = {i.filename: cast(str, _in_test(i.filename)) for i in members}   # each member is in test/
        found = sorted(set(folder.values()))
        if len(members) > MAX_ZIP_IMAGES or len(found) < 2:
            fail("test-images zip", [f"it holds {len(members)} images in {len(found)} class folder(s) under test/: "
                                     f"give 1 to {MAX_ZIP_IMAGES} images in two class folders at least"],
                 TEST_ZIP_LAYOUT + "\n")
        names, problems = _labels(found, class_names, n_classes or len(found))
        images, labels = [], []
        for info in members:
            try:
                images.append(image_from_bytes(b"".join(unzipped(z, info)), channels, size))
                labels.append(names.index(folder[info.filename]) if not problems else 0)
            except (ValueError, zipfile.BadZipFile, zlib.error, NotImplementedError, EOFError, OSError) as err:
                problems.append(f"{info.filename}: {str(err) or err.__class__.__name__}")
    if problems:
        fail("test-images zip", problems)
    return TestImages(torch.stack(images), torch.tensor(labels), list(names))
