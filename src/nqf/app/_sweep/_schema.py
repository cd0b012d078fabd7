"""What a ``sweep.json`` must hold before ``nqf report SWEEP`` renders it (schema ``nqf.sweep/1``).

The file is read like a ``results.json`` (a regular file of bounded size, UTF-8, JSON, an object) and then
checked field by field against :class:`SweepFile`: every field the report and the figures read, with the
type they read it as.  Any problem raises :class:`~nqf.errors.SweepError` with one line naming the file and
the field (``rows.0.measured: Input should be a valid dictionary``), never a ``KeyError`` or ``TypeError``
from deep inside the report.  Fields the report does not read are not checked.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from ...errors import SweepError

__all__ = ["SCHEMA", "MAX_SWEEP_FILE_BYTES", "SweepFile", "SweepRow", "read_sweep_file"]

SCHEMA = "nqf.sweep/1"
#: A ``sweep.json`` larger than this is refused before it is read (a 100 000-point sweep writes about 100 MB).
MAX_SWEEP_FILE_BYTES = 256 * 2**20

Number = float | None
#: Nesting deeper than this is refused: nqf writes at most 6 levels (rows → row → swept → a list value → …).
MAX_DEPTH = 32


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore")


class SweepRow(_Loose):
    """One point of the table, as the report reads it."""

    point: str
    swept: dict[str, Any]
    seed: int | None = None
    status: str
    wall_seconds: Number = None
    error_type: str | None = None
    error: str | None = None
    directory: str | None = None
    measured: dict[str, Number]
    predicted: dict[str, Number] = {}
    metrics: dict[str, Any] = {}
    reused: bool = False


class SweepCounts(_Loose):
    total: int
    complete: int
    failed: int
    pending: int = 0
    interrupted: int = 0
    reused: int = 0


class SweepSpecDoc(_Loose):
    seeds: list[int] | None = None


class SweepFile(_Loose):
    """The fields of ``sweep.json`` that ``nqf report`` reads (see :func:`nqf.app._sweep._table.build_table`)."""

    schema_version: str
    experiment: str
    updated: str = ""
    keys: list[str]
    counts: SweepCounts
    sweep: SweepSpecDoc
    rows: list[SweepRow]
    base_config: Any = None

    model_config = ConfigDict(extra="ignore", populate_by_name=True)


def _load(path: Path) -> Any:
    """The JSON value in ``path``: a regular file of bounded size, UTF-8 and JSON, else one-line SweepError."""
    if path.is_symlink() or not path.is_file():
        raise SweepError(f"{path} is not a regular file; not a sweep table")
    try:
        size = path.stat().st_size
        if size > MAX_SWEEP_FILE_BYTES:
            raise SweepError(f"{path} is {size} bytes, more than {MAX_SWEEP_FILE_BYTES} for a sweep table")
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise SweepError(f"{path} cannot be read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise SweepError(f"{path} is not UTF-8 text (byte {exc.start}); not a sweep table") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SweepError(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise SweepError(f"{path} is nested too deeply to be a sweep table") from None


def _deep_path(doc: Any, limit: int = MAX_DEPTH) -> str | None:
    """The dotted path of the first value nested deeper than ``limit`` (walked without recursion), else None."""
    stack: list[tuple[Any, tuple]] = [(doc, ())]
    while stack:
        value, where = stack.pop()
        if len(where) > limit:
            return ".".join(str(p) for p in where[: limit + 1])
        if isinstance(value, dict):
            stack.extend((v, (*where, k)) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, (*where, i)) for i, v in enumerate(value))
    return None


def read_sweep_file(path) -> dict[str, Any]:
    """The document of a ``sweep.json``, checked against :class:`SweepFile`; :class:`SweepError` on any problem."""
    path = Path(path)
    doc = _load(path)
    if not isinstance(doc, dict):
        raise SweepError(f"{path} must hold a JSON object; found a {type(doc).__name__}")
    if doc.get("schema") != SCHEMA:
        raise SweepError(f"{path}: expected schema {SCHEMA!r}; found {doc.get('schema')!r}")
    deep = _deep_path(doc)
    if deep is not None:
        raise SweepError(f"{path}: `{deep}` is nested more than {MAX_DEPTH} levels deep; not a sweep table")
    try:
        checked = SweepFile.model_validate({**doc, "schema_version": doc["schema"]})
    except ValidationError as exc:
        e = exc.errors()[0]
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        more = len(exc.errors()) - 1
        also = f" (and {more} more)" if more else ""
        raise SweepError(f"{path} does not match the sweep table schema: `{loc}`: {e['msg']}{also}") from None
    # the checked (and coerced) values over the file's own, which keep the fields the report does not read
    rows = [dict(raw, **row.model_dump()) for raw, row in zip(doc["rows"], checked.rows, strict=True)]
    return {
        **doc,
        "counts": dict(doc["counts"], **checked.counts.model_dump()),
        "sweep": dict(doc["sweep"], **checked.sweep.model_dump()),
        "keys": checked.keys,
        "rows": rows,
    }
