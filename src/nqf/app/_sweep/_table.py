"""The sweep table: ``SWEEP/sweep.csv`` and ``SWEEP/sweep.json``, one row per point.

Columns: ``point`` (short config hash = directory under ``points/``), the swept
keys, ``seed``, ``status`` (``complete``, ``failed``, ``interrupted``),
``reused`` (finished by an earlier invocation), ``wall_seconds``,
``error_type``, ``error``, then ``measured: Q`` for every check's measured value
and ``metric: K`` for every scalar metric.

Check names are shortened to a *quantity* that is the same at every point:
clauses naming a value of a parameter (``" at ε = 1e-06"``, ``"(ζ = 4)"``) are
dropped, so ``"t_1 at ε = 1e-06 (ζ = 4)"`` becomes ``t_1`` — the column the
report plots against the swept parameter.  ``sweep.json`` keeps every check
in full (name, predicted, measured, relative error, passed).
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ...errors import InvalidTypeError, SweepError
from ...results import require_pandas
from ._points import Point
from ._schema import SCHEMA, SweepRow, read_sweep_file

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "SCHEMA",
    "SWEEP_MARKER",
    "quantity_name",
    "build_table",
    "write_table",
    "read_table",
    "is_sweep_directory",
    "mark_sweep_directory",
    "sweep_frame",
]

#: The marker file of a sweep directory (``{"kind": "nqf-sweep", "version": 1}``): ``nqf sweep --out DIR`` writes
#: only into a new or empty folder, one carrying this marker, or a sweep written before markers (its sweep.json).
SWEEP_MARKER = "nqf-sweep.json"


def is_sweep_directory(root) -> bool:
    """True when ``root`` carries the sweep marker, or (a sweep written before markers) an nqf ``sweep.json``."""
    from .._report import has_marker

    root = Path(root)
    if has_marker(root, SWEEP_MARKER, "nqf-sweep"):
        return True
    p = root / "sweep.json"
    try:
        if p.is_symlink() or not p.is_file() or p.stat().st_size > 256 * 2**20:
            return False
        return json.loads(p.read_text(encoding="utf-8")).get("schema") == SCHEMA
    except (OSError, ValueError, AttributeError, RecursionError):  # not JSON, not an object, nested too deeply
        return False


def mark_sweep_directory(root) -> None:
    """Write the sweep marker into ``root`` (once)."""
    from .._report import atomic_write_text, marker_text

    if not (Path(root) / SWEEP_MARKER).is_file():
        atomic_write_text(Path(root) / SWEEP_MARKER, marker_text("nqf-sweep"))


_AT_VALUE = re.compile(r"\s+at\s+[^\s=()]+\s*=\s*[^\s()]+")
_PAREN_VALUE = re.compile(r"\s*\([^()]*=[^()]*\)")


def quantity_name(check_name: str) -> str:
    """The check name without clauses that name a parameter value (see module docstring)."""
    return _PAREN_VALUE.sub("", _AT_VALUE.sub("", check_name)).strip() or check_name


def _quantities(checks: list[dict]) -> tuple[dict, dict]:
    measured, predicted = {}, {}
    for c in checks:
        q = quantity_name(c["name"])
        if q in measured:  # two checks shorten to the same quantity: keep their full names
            q = c["name"]
        measured[q], predicted[q] = c.get("measured"), c.get("predicted")
    return measured, predicted


def build_table(
    points: list[Point], rows: dict[str, dict], *, experiment: str, base: dict, spec, root
) -> dict[str, Any]:
    """The ``sweep.json`` document for ``points`` and their ``rows`` (keyed by short hash)."""
    out_rows = []
    for pt in points:
        row = rows.get(pt.short) or {
            "status": "pending",
            "wall_seconds": None,
            "error_type": None,
            "error": None,
            "checks": [],
            "metrics": {},
            "reused": False,
        }
        measured, predicted = _quantities(row.get("checks") or [])
        out_rows.append(
            {
                "point": pt.short,
                "hash": pt.hash,
                "index": pt.index,
                "swept": pt.swept,
                "seed": pt.seed,
                "status": row["status"],
                "reused": bool(row.get("reused")),
                "wall_seconds": row.get("wall_seconds"),
                "error_type": row.get("error_type"),
                "error": row.get("error") if row["status"] != "complete" else None,
                "directory": f"points/{pt.short}" if pt.valid else None,
                "measured": measured,
                "predicted": predicted,
                "metrics": row.get("metrics") or {},
                "checks": row.get("checks") or [],
            }
        )
    counts = {s: sum(r["status"] == s for r in out_rows) for s in ("complete", "failed", "interrupted", "pending")}
    counts["total"] = len(out_rows)
    counts["reused"] = sum(r["reused"] for r in out_rows)
    return {
        "schema": SCHEMA,
        "experiment": experiment,
        "directory": str(root),
        "updated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "base_config": base,
        "sweep": spec.to_dict(),
        "keys": spec.keys,
        "counts": counts,
        "rows": out_rows,
    }


def _columns(doc: dict) -> list[str]:
    """The columns of ``sweep.csv`` (module docstring): every quantity and metric that some row has, in order."""
    qs: dict[str, None] = {}
    ms: dict[str, None] = {}
    for r in doc["rows"]:
        qs.update(dict.fromkeys(r["measured"]))
        ms.update(dict.fromkeys(r.get("metrics") or {}))
    return (
        ["point"]
        + list(doc["keys"])
        + ["seed", "status", "reused", "wall_seconds", "error_type", "error"]
        + [f"measured: {q}" for q in qs]
        + [f"metric: {m}" for m in ms]
    )


def _csv_cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, (list, dict)):
        return json.dumps(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _cell(row: dict, column: str):
    """The value of ``column`` (one of :func:`_columns`) in ``row`` (None where the row has none)."""
    if column.startswith("measured: "):
        return row["measured"].get(column[len("measured: ") :])
    if column.startswith("metric: "):
        return (row.get("metrics") or {}).get(column[len("metric: ") :])
    if column in row["swept"] and column not in ("point", "seed", "status"):
        return row["swept"][column]
    return row.get(column)


def to_csv(doc: dict) -> str:
    cols = _columns(doc)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(cols)
    for r in doc["rows"]:
        w.writerow([_csv_cell(_cell(r, c)) for c in cols])
    return buf.getvalue()


def write_table(root, doc: dict) -> tuple[Path, Path]:
    """Write ``sweep.json`` and ``sweep.csv`` atomically; returns their paths."""
    from .._report import atomic_write_text

    root = Path(root)
    pj, pc = root / "sweep.json", root / "sweep.csv"
    atomic_write_text(pj, json.dumps(doc, indent=2, allow_nan=False, default=str) + "\n")
    atomic_write_text(pc, to_csv(doc))
    return pj, pc


def read_table(root) -> dict:
    """The ``sweep.json`` of a sweep directory, checked (:func:`nqf.app._sweep._schema.read_sweep_file`).

    Raises
    ------
    SweepError
        No ``sweep.json``, or one that is unreadable, not JSON, or lacks a field the report reads or has it of
        the wrong type (the message names the file and the field).
    """
    path = Path(root) / "sweep.json"
    if not path.exists():
        raise SweepError(f"{root} holds no sweep.json (not a sweep directory?)")
    return read_sweep_file(path)


def _checked_rows(rows: Any) -> list[dict]:
    """Rows of a ``sweep.json`` given as Python data, checked like the file's (:class:`SweepRow`)."""
    if not isinstance(rows, list):
        raise SweepError(f"`path_or_rows`: `rows` must be a list of sweep.json rows; found {type(rows).__name__}")
    out = []
    for i, raw in enumerate(rows):
        if not isinstance(raw, dict):
            raise SweepError(f"`path_or_rows`: row {i} must be a dict (a sweep.json row); found {type(raw).__name__}")
        try:
            row = SweepRow.model_validate(raw)
        except ValidationError as exc:
            e = exc.errors()[0]
            loc = ".".join(str(p) for p in e["loc"]) or "(row)"
            raise SweepError(f"`path_or_rows`: row {i} is not a sweep.json row: `{loc}`: {e['msg']}") from None
        out.append(dict(raw, **row.model_dump()))
    return out


def _sweep_document(path_or_rows: Any) -> dict:
    """``{"experiment", "keys", "rows"}`` of a sweep directory, a ``sweep.json``, its document or its rows."""
    if isinstance(path_or_rows, (str, os.PathLike)):
        path = Path(path_or_rows)
        return read_table(path) if path.is_dir() else read_sweep_file(path)
    if isinstance(path_or_rows, dict):
        if "rows" not in path_or_rows:
            raise SweepError("`path_or_rows`: a sweep.json document needs its `rows`; found none")
        rows = _checked_rows(path_or_rows["rows"])
        keys = path_or_rows.get("keys")
        if keys is not None and not (isinstance(keys, list) and all(isinstance(k, str) for k in keys)):
            raise SweepError(f"`path_or_rows`: `keys` must be a list of the swept keys' names; found {keys!r:.80}")
        return {"experiment": path_or_rows.get("experiment"), "keys": keys, "rows": rows}
    if isinstance(path_or_rows, (list, tuple)):
        return {"experiment": None, "keys": None, "rows": _checked_rows(list(path_or_rows))}
    raise InvalidTypeError(
        "`path_or_rows` must be a sweep directory, a sweep.json path, its document (a dict) or its rows (a list); "
        f"found {type(path_or_rows).__name__}"
    )


def sweep_frame(path_or_rows) -> pd.DataFrame:
    """The sweep table as a pandas DataFrame, one row per point with the columns of ``sweep.csv``.

    pandas is optional: ``pip install 'nqf[frames]'``.  Columns: ``point`` (short config hash, the directory
    under ``points/``), each swept key, ``seed``, ``status``, ``reused``, ``wall_seconds``, ``error_type``,
    ``error``, then ``measured: Q`` for every check's measured quantity (:func:`quantity_name`) and
    ``metric: K`` for every metric.  Values are kept as read, with pandas' own dtypes (a value a row lacks is
    pandas' missing value, ``df.isna()``; a list-valued key stays a list).  ``df.attrs`` holds ``experiment``
    (``None`` for bare rows) and ``keys`` (the swept keys).

    Parameters
    ----------
    path_or_rows : str, path, dict or list of dict
        A sweep directory (``nqf sweep --out DIR``), its ``sweep.json``, the document :func:`read_table`
        returns, or that document's ``rows``.

    Raises
    ------
    SweepError
        No ``sweep.json`` there, or one (or rows) that does not match the sweep table schema.
    InvalidTypeError
        ``path_or_rows`` is none of the above.
    MissingDependencyError
        pandas is not installed.
    """
    pd = require_pandas("sweep_frame()")
    doc = _sweep_document(path_or_rows)
    if doc["keys"] is None:
        seen: dict[str, None] = {}
        for r in doc["rows"]:
            seen.update(dict.fromkeys(r["swept"]))
        doc["keys"] = list(seen)
    cols = _columns(doc)
    df = pd.DataFrame([[_cell(r, c) for c in cols] for r in doc["rows"]], columns=cols)
    df.attrs.update(experiment=doc.get("experiment"), keys=list(doc["keys"]))
    return df
