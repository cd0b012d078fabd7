"""Reading data files safely: a regular file of bounded size, archives that do not inflate past a cap, CSV with
named columns (numbers or class names), ``.npz`` and ``.pt`` with ``X`` and ``y``, and ``.pt`` holding a
``TensorDataset(X, Y)`` (see :mod:`nqf.app._data`)."""

from __future__ import annotations

import csv
import math
import os
import stat
import zipfile
from pathlib import Path

import numpy as np

from ...errors import DataError, ShapeError

#: Bundled data sets: name → (scikit-learn loader, task).
BUILTIN: dict[str, tuple[str, str]] = {
    "digits": ("load_digits", "classification"),
    "iris": ("load_iris", "classification"),
    "wine": ("load_wine", "classification"),
    "breast_cancer": ("load_breast_cancer", "classification"),
    "diabetes": ("load_diabetes", "regression"),
    "linnerud": ("load_linnerud", "regression"),
}


#: A data file larger than this on disk is refused before it is read (2 GiB).
MAX_FILE_BYTES = 2 * 2**30


#: A ``.npz``/``.pt`` archive whose members would inflate past this is refused before any member is read (4 GiB).
MAX_INFLATED_BYTES = 4 * 2**30


def check_regular_file(path: Path, what: str = "data", limit: int = MAX_FILE_BYTES) -> int:
    """Size of a path checked to be a regular file of at most ``limit`` bytes (never opened otherwise).

    Symlinks are followed; a FIFO, a device (``/dev/zero``), a socket or a directory is refused
    (:class:`nqf.errors.DataError` naming ``what`` and the path) without being opened, so nothing hangs."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise DataError(f"`{what}`: {str(path)!r} cannot be read ({exc.strerror or exc})") from exc
    if not stat.S_ISREG(st.st_mode):
        kind = (
            "a directory"
            if stat.S_ISDIR(st.st_mode)
            else "a FIFO (named pipe)"
            if stat.S_ISFIFO(st.st_mode)
            else "a device"
            if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
            else "not a regular file"
        )
        raise DataError(f"`{what}`: {str(path)!r} must be a regular file; found {kind}")
    if st.st_size > limit:
        raise DataError(
            f"`{what}`: {str(path)!r} is {st.st_size / 2**20:.0f} MiB; files above {limit / 2**20:.0f} MiB are refused"
        )
    return int(st.st_size)


def _check_archive(path: Path, what: str, *, required: bool) -> None:
    """Refuse a zip archive (``.npz``, ``.pt``) whose members would inflate past :data:`MAX_INFLATED_BYTES`
    (sizes from the central directory, before any member is read); ``required``: it must be a zip."""
    try:
        with zipfile.ZipFile(path) as zf:
            total = sum(max(int(i.file_size), 0) for i in zf.infolist())
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        if required:
            raise DataError(
                f"`{what}`: {str(path)!r} is not a valid {path.suffix} file (not a zip archive: {exc})"
            ) from exc
        return
    if total > MAX_INFLATED_BYTES:
        raise DataError(
            f"`{what}`: {str(path)!r} would inflate to {total / 2**20:.0f} MiB; archives above "
            f"{MAX_INFLATED_BYTES / 2**20:.0f} MiB are refused"
        )


def _columns_text(header: list[str], shown: int = 12) -> str:
    """The header for a message: the first ``shown`` names, and how many there are in all."""
    if len(header) <= shown:
        return str(header)
    return f"{header[:shown]} … ({len(header)} columns)"


def _split_columns(header: list[str], target: str | None, path: str) -> list[int]:
    if not target:
        raise DataError(
            f"`target`: a CSV file needs the target column(s) (--target NAME[,NAME…] or 0-based "
            f"indices); {path} has columns {_columns_text(header)}"
        )
    position = {h: j for j, h in enumerate(header)}  # names are unique (checked before)
    idx: list[int] = []
    for tok in [t.strip() for t in str(target).split(",") if t.strip()]:
        if tok in position:
            j = position[tok]
        elif tok.lstrip("-").isdigit() and -len(header) <= int(tok) < len(header):
            j = int(tok) % len(header)
        else:
            raise DataError(f"`target`: column {tok!r} not found in {path}; its columns are {_columns_text(header)}")
        if j in idx:
            raise DataError(
                f"`target`: {target!r} names column {header[j]!r} (index {j}) more than once; name each target "
                "column once"
            )
        idx.append(j)
    return idx


_MISSING = ("", "nan", "NaN", "NA")


def _numeric_column(values: list[str]) -> np.ndarray | None:
    """The column as float64 (missing entries NaN), or None when an entry is not a number."""
    try:
        return np.array([float(v) if v not in _MISSING else np.nan for v in values], dtype=np.float64)
    except ValueError:
        return None


def _label_column(values: list[str], name: str, path: Path) -> np.ndarray:
    """A target column of strings: class labels (no entry may be empty)."""
    empty = [i for i, v in enumerate(values) if v in _MISSING]
    if empty:
        raise DataError(
            f"`target`: column {name!r} of {path} holds class names but row {empty[0] + 1} is empty; "
            "fill or drop the rows without a label"
        )
    return np.array(values, dtype=str)


def _read_csv(path: Path, target: str | None):
    """Inputs (numbers only) and targets (numbers, or strings read as class labels) of a CSV file."""
    try:  # utf-8-sig: a byte-order mark before the header (Excel's "CSV UTF-8") is not part of the first name
        with open(path, newline="", encoding="utf-8-sig") as fh:
            rows = [r for r in csv.reader(fh) if r]
    except UnicodeDecodeError as exc:
        raise DataError(
            f"`data`: {path} is not a UTF-8 text file (byte {exc.start} cannot be decoded); save it as CSV UTF-8"
        ) from exc
    except csv.Error as exc:
        raise DataError(f"`data`: {path} is not a readable CSV file ({exc})") from exc
    if len(rows) < 2:
        raise DataError(f"`data`: {path} needs a header row and at least one data row; found {len(rows)} rows")
    header = [h.strip() for h in rows[0]]
    dup, seen = None, set()  # one pass with a set: the pairwise search took 16 s at 40 000 columns
    for h in header:
        if h in seen:
            dup = h
            break
        seen.add(h)
    if dup is not None:
        raise DataError(
            f"`data`: column name {dup!r} appears {header.count(dup)} times in the header of {path}; "
            "column names must be unique"
        )
    idx = _split_columns(header, target, str(path))
    bad = next((i for i, r in enumerate(rows[1:]) if len(r) != len(header)), None)
    if bad is not None:
        raise DataError(
            f"`data`: every row of {path} must have {len(header)} fields like its header; data row {bad + 1} "
            f"has {len(rows[bad + 1])}"
        )
    cols = [[r[j].strip() for r in rows[1:]] for j in range(len(header))]
    _check_missing(cols, header, idx, path)
    targets = set(idx)
    rest = [j for j in range(len(header)) if j not in targets]
    if not rest:
        raise DataError(f"`target`: every column of {path} is a target; no inputs are left")
    feats = []
    for j in rest:
        col = _numeric_column(cols[j])
        if col is None:
            example = next(v for v in cols[j] if v not in _MISSING and _numeric_column([v]) is None)
            raise DataError(
                f"`data`: input column {header[j]!r} of {path} must hold numbers; found {example!r} "
                "(encode categories as numbers, or name the column with --target if it is the target)"
            )
        feats.append(col)
    ys = [_numeric_column(cols[j]) for j in idx]
    if any(c is None for c in ys):
        if len(idx) != 1:
            raise DataError(f"`target`: class names need a single target column; found {[header[j] for j in idx]}")
        y = _label_column(cols[idx[0]], header[idx[0]], path)
    else:
        y = np.stack([c for c in ys if c is not None], axis=1)
        y = y[:, 0] if y.shape[1] == 1 else y
    return np.stack(feats, axis=1), y, None


def _check_missing(cols: list[list[str]], header: list[str], targets: list[int], path: Path) -> None:
    """Refuse a missing value (empty, ``NA``, ``nan``), naming its column and data row: a target first."""
    for j in [*targets, *(j for j in range(len(header)) if j not in targets)]:
        i = next((i for i, v in enumerate(cols[j]) if v in _MISSING), None)
        if i is not None:
            kind = "target" if j in targets else "input"
            raise DataError(
                f"`data`: {kind} column {header[j]!r} of {path} has no value at data row {i + 1} "
                f"({cols[j][i]!r}); remove that row or fill in the value"
            )


def _pick(obj, path: Path):
    if isinstance(obj, (tuple, list)):
        if len(obj) == 2:
            return obj[0], obj[1]
    elif hasattr(obj, "keys"):
        keys = list(obj.keys())
        if "X" in keys and ("Y" in keys or "y" in keys):
            return obj["X"], obj["Y"] if "Y" in keys else obj["y"]
        raise DataError(f"`data`: {path} must hold arrays `X` and `Y` (or `y`); found {sorted(keys)}")
    raise DataError(f"`data`: {path} must hold a dict with `X` and `Y` or a pair (X, Y); found {type(obj).__name__}")


def _nested_shape(a, depth: int = 0) -> tuple[int, ...] | None:
    """The shape ``a`` has once it is an array, read without building it (a tensor's or array's own shape, or
    a list's length and its first item's shape); None for anything else."""
    if hasattr(a, "shape") and hasattr(a, "dtype"):
        return tuple(int(n) for n in a.shape)
    if isinstance(a, (list, tuple)) and depth < 32:
        inner = _nested_shape(a[0], depth + 1) if a else ()
        return None if inner is None else (len(a), *inner)
    if isinstance(a, (int, float, bool)):
        return ()
    return None


def _check_sizes(X, y, path: Path) -> None:
    """Refuse, before ``X`` and ``Y`` are built as arrays, sample counts that differ and sizes past the memory
    limit: a 3 MiB ``.pt`` holding a list of 1000 references to one tensor is 2.4 GB once stacked."""
    from ..._memory import check_memory

    sx, sy = _nested_shape(X), _nested_shape(y)
    if sx is None or sy is None:
        return  # ragged or of another type: _as_array names it
    if sx and sy and sx[0] != sy[0]:
        raise ShapeError(
            f"`X` and `Y` must have the same number of samples; found {sx[0]} inputs and {sy[0]} targets in {path}"
        )
    n = math.prod(sx) + math.prod(sy)
    stored = path.stat().st_size
    if n > stored + 2**17:  # a value takes at least one byte in the file (bool, int8); more are repeats
        raise DataError(
            f"`data`: {path} stores {stored} bytes but holds X of shape {sx} and Y of shape {sy} ({n} values): "
            "it repeats data (a list of references to one tensor, or an expanded view); save the values themselves"
        )
    check_memory(8.0 * n, f"`data`: {path}", f"X of shape {sx} and Y of shape {sy} as float64")


def _as_array(a, name: str, path: Path) -> np.ndarray:
    """An array from what a file held (a tensor, an array, nested lists); ragged nesting named."""
    if hasattr(a, "detach"):
        return a.detach().cpu().numpy()
    try:
        return np.asarray(a)
    except (ValueError, TypeError) as exc:
        raise DataError(
            f"`data`: `{name}` in {path} must be a rectangular array; found ragged or mixed nesting ({exc})"
        ) from exc


def _read_npz(path: Path):
    _check_archive(path, "data", required=True)
    try:
        with np.load(path, allow_pickle=False) as z:
            X, y = _pick({k: z[k] for k in z.files}, path)
    except ValueError as exc:  # object arrays (labels saved as dtype=object) need pickle, which is never used
        raise DataError(
            f"`data`: {path} holds an array of Python objects, which nqf does not unpickle; save string labels "
            f"as np.array(labels, dtype=str) ({exc})"
        ) from exc
    except (OSError, zipfile.BadZipFile, EOFError) as exc:
        raise DataError(f"`data`: {path} is not a readable .npz file ({exc})") from exc
    return np.asarray(X), np.asarray(y), None


#: The name under which ``torch.save(TensorDataset(X, Y), path)`` pickles its dataset.
TENSOR_DATASET = "torch.utils.data.dataset.TensorDataset"
_SAVE_AS = "save the data as torch.save({'X': X, 'Y': Y}, path)"


class _SavedTensorDataset:
    """Stands in for ``torch.utils.data.TensorDataset`` while a ``.pt`` file is unpickled: torch's weights-only
    unpickler makes this class (``object.__new__``, or ``__init__`` for a ``REDUCE``) in place of the real one and
    hands it the saved state (``__setstate__``).  Both only store what they are given: no code of the real class
    and nothing named in the file runs; everything inside is built by torch's weights-only allowlist (tensors,
    containers, numbers, strings)."""

    __slots__ = ("state",)

    def __init__(self, *tensors):
        self.state = {"tensors": tensors}

    def __setstate__(self, state):
        self.state = state


def _tensor_dataset(obj, path: Path):
    """``(X, Y)`` of a saved ``TensorDataset`` (its two tensors); anything else is returned unchanged."""
    from torch.utils.data import TensorDataset

    if isinstance(obj, TensorDataset):  # the caller allowlisted the real class (torch.serialization.add_safe_globals)
        tensors = obj.tensors
    elif type(obj) is _SavedTensorDataset:
        state = getattr(obj, "state", None)  # unset when the file never handed it a state
        tensors = state.get("tensors") if isinstance(state, dict) else None
    else:
        return obj
    if not isinstance(tensors, (tuple, list)) or len(tensors) != 2:
        n = len(tensors) if isinstance(tensors, (tuple, list)) else type(tensors).__name__
        raise DataError(f"`data`: {path} holds a TensorDataset, which must hold 2 tensors (X, Y); found {n}")
    return tuple(tensors)


def _stand_in(torch):
    """Map the saved name of ``TensorDataset`` to :class:`_SavedTensorDataset` for one ``torch.load`` (torch ≥ 2.6
    takes ``(class, name)`` pairs; before, a saved TensorDataset is refused with :func:`_pt_error`'s line)."""
    import contextlib

    major, minor = (int("".join(c for c in v if c.isdigit()) or 0) for v in torch.__version__.split(".")[:2])
    if (major, minor) < (2, 6):  # pragma: no cover - the tested torch is newer
        return contextlib.nullcontext()
    return torch.serialization.safe_globals([(_SavedTensorDataset, TENSOR_DATASET)])


def _torch_version() -> str:
    import torch

    return str(torch.__version__)


def _pt_error(path: Path, exc: Exception) -> DataError:
    """One line for a ``.pt`` file torch.load(weights_only=True) refuses: the object it holds that nqf does not
    unpickle and how to save the data instead, or the first line of torch's message."""
    import re

    text = str(exc)
    found = re.search(r"GLOBAL (\S+) was not an allowed global", text) or re.search(r"Unsupported class (\S+)", text)
    if found and found.group(1).endswith(".TensorDataset"):  # torch < 2.6 cannot map the name to a stand-in
        return DataError(
            f"`data`: {path} holds a TensorDataset, which this torch ({_torch_version()}) cannot read without "
            f"unpickling it (torch ≥ 2.6 can); {_SAVE_AS}"
        )
    if found:
        return DataError(
            f"`data`: {path} holds the Python object {found.group(1)}, which nqf never unpickles (a .pt file is read "
            f"with torch.load(weights_only=True): tensors, lists, dicts, numbers, a TensorDataset); {_SAVE_AS}"
        )
    detail = re.search(r"WeightsUnpickler error:\s*([^\n]+)", text)  # torch's reason, without its advice
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if detail:
        line = detail.group(1).strip()
    elif text.startswith("Weights only load failed"):
        line = "the weights-only unpickler refused its content"
    else:
        line = lines[0] if lines else "no message"
    return DataError(
        f"`data`: {path} could not be read with torch.load(weights_only=True): {type(exc).__name__}: {line}; {_SAVE_AS}"
    )


def _read_pt(path: Path):
    import warnings

    import torch

    _check_archive(path, "data", required=False)
    try:  # torch's warnings (a pickle protocol it did not write) would be lines beside the CLI's one
        with _stand_in(torch), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - re-raised as DataError naming the file (torch.load of junk raises anything)
        raise _pt_error(path, exc) from exc
    X, y = _pick(_tensor_dataset(obj, path), path)
    _check_sizes(X, y, path)  # before anything is copied: a view or a list of one tensor can be huge once stacked
    return _as_array(X, "X", path), _as_array(y, "Y", path), None


def _read_file(path: Path, target: str | None):
    suffix = path.suffix.lower()
    if suffix in (".npz", ".csv", ".pt", ".pth"):
        check_regular_file(path)
    if suffix == ".npz":
        return _read_npz(path)
    if suffix == ".csv":
        return _read_csv(path, target)
    if suffix in (".pt", ".pth"):
        return _read_pt(path)
    raise DataError(
        f"`data`: expected a bundled name ({', '.join(BUILTIN)}) or a .npz, .csv or .pt file; found {str(path)!r}"
    )
