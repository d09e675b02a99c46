"""Reading user files (untrusted): size limits, strict columns and shapes, plain error messages."""
from __future__ import annotations

import io

import numpy as np
import pandas as pd
import torch

MAX_UPLOAD_BYTES = 2 * 1024 * 1024  # a 2-D cloud or cost matrix for an interactive page is far smaller
MAX_POINTS = 4096


def _read_csv(data: bytes, what: str, header) -> pd.DataFrame:
    if len(data) > MAX_UPLOAD_BYTES:
        raise ValueError(f"the {what} file is {len(data) / 1e6:.1f} MB; the limit is {MAX_UPLOAD_BYTES / 1e6:.0f} MB")
    try:
        return pd.read_csv(io.BytesIO(data), header=header, skipinitialspace=True)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise ValueError(f"the {what} file is not a readable CSV ({str(err).splitlines()[0]})") from None


def _numeric(df: pd.DataFrame, what: str) -> np.ndarray:
    values = df.apply(pd.to_numeric, errors="coerce").to_numpy(dtype=float)
    bad = ~np.isfinite(values)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        column = df.columns[c]
        column = f"column {c + 1}" if isinstance(column, (int, np.integer)) else f"column {column}"
        value = df.iat[r, c]
        shown = "empty" if pd.isna(value) else repr(value) if isinstance(value, str) else str(value)
        raise ValueError(f"the {what} has an empty or non-numeric entry in row {r + 1}, {column} ({shown})")
    return values


def table_values(table: pd.DataFrame, columns: list[str], what: str) -> np.ndarray:
    """The numeric ``columns`` of an edited table as a float array (rows, columns); a ValueError names the first
    empty or non-numeric cell by its row and column."""
    return _numeric(table[columns], what)


def read_points_csv(data: bytes) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two weighted 2-D clouds from a CSV with columns ``cloud,x,y[,mass]``; cloud is ``source`` or ``target``.

    Returns x (n, 2), a (n,), y (m, 2), b (m,) as float64 tensors; masses default to uniform and are normalised
    to total 1 (each cloud is a probability measure).
    """
    return _points(_read_csv(data, "points", header=0), "points file")


def read_points_table(table: pd.DataFrame) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The same two clouds from an edited table (columns cloud, x, y[, mass], one point per row), with the same
    checks as :func:`read_points_csv`; an error names the table's row and column."""
    return _points(table.copy(), "points table")


def _points(df: pd.DataFrame, what: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """x (n, 2), a (n,), y (m, 2), b (m,) from the rows of ``df`` (modified in place), masses normalised per cloud."""
    df.columns = [str(c).strip().lower() for c in df.columns]
    missing = {"cloud", "x", "y"} - set(df.columns)
    if missing:
        raise ValueError(f"the {what} needs columns cloud, x, y (and optionally mass); missing: "
                         f"{', '.join(sorted(missing))}")
    cloud = df["cloud"].astype(str).str.strip().str.lower().to_numpy()
    unknown = sorted(set(cloud) - {"source", "target"})
    if unknown:
        raise ValueError(f"the cloud column may only say 'source' or 'target', not {unknown[0]!r}")
    if "mass" not in df.columns:
        df["mass"] = 1.0
    values = _numeric(df[["x", "y", "mass"]], what)
    out = []
    for name in ("source", "target"):
        rows = np.flatnonzero(cloud == name)
        if len(rows) == 0:
            raise ValueError(f"the {what} has no {name} points")
        if len(rows) > MAX_POINTS:
            raise ValueError(f"the {name} cloud has {len(rows)} points; the limit is {MAX_POINTS}")
        mass = values[rows, 2]
        if (mass < 0).any():
            r = rows[np.argmax(mass < 0)]
            raise ValueError(f"the {name} masses must be non-negative, but row {r + 1} of the {what} has mass "
                             f"{values[r, 2]:g}")
        if mass.sum() <= 0:
            raise ValueError(f"the {name} masses must have a positive total; give at least one {name} point a "
                             "positive mass")
        out += [torch.tensor(values[rows, :2]), torch.tensor(mass / mass.sum())]
    x, a, y, b = out
    return x, a, y, b


def read_matrix_csv(data: bytes, what: str = "cost matrix") -> torch.Tensor:
    """A numeric matrix (n rows, m columns) from a CSV as a float64 tensor; a first row of column names is skipped."""
    df = _read_csv(data, what, header=None)
    first = df.iloc[0].apply(pd.to_numeric, errors="coerce") if len(df) > 1 else None
    if first is not None and first.isna().all():  # a header line: every entry is a name, not a number
        df = df.iloc[1:].reset_index(drop=True)
    if df.shape[0] > MAX_POINTS or df.shape[1] > MAX_POINTS:
        raise ValueError(f"the {what} is {df.shape[0]} x {df.shape[1]}; the limit is {MAX_POINTS} per side")
    return torch.tensor(_numeric(df, what))


def parse_matrix(text: str, what: str = "cost matrix") -> torch.Tensor:
    """A matrix typed as lines of numbers (one row per line, commas or spaces between entries); an error names
    the row and column of the first entry that is not a finite number."""
    rows = [line.replace(",", " ").split() for line in text.strip().splitlines() if line.strip()]
    if not rows:
        raise ValueError(f"type the {what}: one row per line")
    for r, row in enumerate(rows[1:], 2):
        if len(row) != len(rows[0]):
            raise ValueError(f"every row of the {what} needs the same number of entries: row 1 has "
                             f"{len(rows[0])}, row {r} has {len(row)}")
    if len(rows) > MAX_POINTS or len(rows[0]) > MAX_POINTS:
        raise ValueError(f"the {what} is {len(rows)} x {len(rows[0])}; the limit is {MAX_POINTS} per side")
    values = np.empty((len(rows), len(rows[0])))
    for (r, c), t in np.ndenumerate(np.array(rows, dtype=object)):
        try:
            values[r, c] = float(t)
        except ValueError:
            raise ValueError(f"the {what} entry in row {r + 1}, column {c + 1} ({t!r}) is not a number") from None
        if not np.isfinite(values[r, c]):
            raise ValueError(f"the {what} entry in row {r + 1}, column {c + 1} ({t!r}) is not finite")
    return torch.tensor(values)


def parse_numbers(text: str, what: str = "value") -> list[float]:
    """'1, 2.5 -3' -> [1.0, 2.5, -3.0]; a clear ValueError naming the piece that is not a number."""
    pieces = [t for t in text.replace(",", " ").replace(";", " ").split() if t]
    if not pieces:
        raise ValueError(f"type at least one {what}, separated by commas or spaces")
    out = []
    for i, t in enumerate(pieces, 1):
        try:
            out.append(float(t))
        except ValueError:
            raise ValueError(f"{what} {i} ({t!r}) is not a number") from None
    return out


def parse_masses(text: str, size: int, name: str, per: str = "point") -> torch.Tensor:
    """``size`` non-negative masses typed as numbers ('1, 1, 2'), as a float64 tensor (size,); an error names
    the piece that is not a non-negative number, or says how many masses were expected (one ``per`` row,
    column, point...)."""
    values = parse_numbers(text, f"mass of {name}")
    for i, v in enumerate(values, 1):
        if not np.isfinite(v) or v < 0:
            raise ValueError(f"mass of {name} {i} ({v:g}) must be a non-negative finite number")
    if len(values) != size:
        raise ValueError(f"{name} needs {size} masses (one per {per}), got {len(values)}")
    return torch.tensor(values, dtype=torch.float64)
