"""The versioned schema of ``results.json`` (``nqf.results/2``).

Validate a file with :func:`validate_results`; the JSON Schema is
``ResultsFile.model_json_schema()``.  Any problem with the file — missing,
empty, truncated, not UTF-8, not JSON, another schema version, fields that do
not match — raises :class:`ResultsFileError` with a one-line message.

Version 2 adds ``run_id`` (shared by every file of the run, see
:mod:`nqf.app._report._rundir`) and ``config_hash`` (of the full resolved config).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ...errors import NQFError

SCHEMA_VERSION = "nqf.results/2"

__all__ = [
    "SCHEMA_VERSION",
    "ResultsFile",
    "TableModel",
    "CheckModel",
    "ResultsFileError",
    "validate_results",
    "read_results_json",
]

_MAX_BYTES = 256 * 1024 * 1024


class ResultsFileError(NQFError, ValueError):
    """A ``results.json`` is missing, unreadable, malformed or of another schema version (one-line message)."""


Cell = float | int | str | bool | None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TableModel(_Strict):
    """One table; :meth:`nqf.app._experiments.Table.to_dict` builds its dictionary through this model."""

    name: str
    caption: str = ""
    columns: list[str]
    rows: list[list[Cell]]


class CheckModel(_Strict):
    """One prediction held against a measurement; :meth:`nqf.app._experiments.Check.to_dict` builds its dictionary
    through this model, so the result objects and the file agree by construction."""

    name: str
    predicted: float | None
    measured: float | None
    tolerance: float | None = Field(None, description="allowed |measured − predicted| / |predicted|")
    relative_error: float | None = None
    passed: bool | None = None
    kind: Literal["relative", "absolute"] = "relative"
    error: float | None = Field(None, description="the error judged against the tolerance (see kind)")
    reference: str = Field("", description="the independent value the prediction is held against")
    tolerance_origin: str = Field("", description="where the tolerance comes from (numerics, theory's error order)")
    reason: str = Field("", description="why the check is not judged, or failed without a comparison")


class Versions(_Strict):
    nqf: str
    python: str
    torch: str
    numpy: str
    scipy: str


class ResultsFile(_Strict):
    schema_version: Literal["nqf.results/2"] = Field(alias="schema")
    run_id: str = Field(pattern=r"^[0-9a-f]{8,64}$")
    config_hash: str = Field(pattern=r"^[0-9a-f]{64}$")
    experiment: str
    description: str
    status: Literal["complete", "interrupted", "failed"]
    message: str = ""
    config: dict[str, Any]
    seed: int
    device: str
    versions: Versions
    started: str
    finished: str | None
    wall_seconds: float | None
    metrics: dict[str, Cell]
    checks: list[CheckModel]
    tables: list[TableModel]
    figures: dict[str, dict[str, str]]
    arrays: str | None
    summary: list[str] = []

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def read_results_json(path) -> dict:
    """The JSON object of a ``results.json`` (not yet validated against the schema); one-line errors."""
    path = Path(path)
    if path.is_dir():
        path = path / "results.json"
    where = str(path)
    if not path.exists():
        raise ResultsFileError(f"{path.parent} holds no results.json (not a run directory?)")
    if not path.is_file():
        raise ResultsFileError(f"{where} is not a file")
    try:
        size = path.stat().st_size
        if size > _MAX_BYTES:
            raise ResultsFileError(f"{where} is {size} bytes, too large for a results file")
        raw = path.read_bytes()
    except OSError as exc:
        raise ResultsFileError(f"{where} cannot be read: {exc.strerror or exc}") from None
    if not raw.strip():
        raise ResultsFileError(f"{where} is empty (an interrupted copy?)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ResultsFileError(f"{where} is not UTF-8 text (byte {exc.start}); not a results file") from None
    try:
        data = json.loads(text, parse_constant=lambda c: math.nan)
    except json.JSONDecodeError as exc:
        raise ResultsFileError(
            f"{where} is not valid JSON (truncated?): {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except RecursionError:
        raise ResultsFileError(f"{where} is nested too deeply to be a results file") from None
    if not isinstance(data, dict):
        raise ResultsFileError(f"{where} must hold a JSON object; found a {type(data).__name__}")
    return data


def validate_results(path) -> ResultsFile:
    """Load and validate ``results.json`` (a file or a run directory); :class:`ResultsFileError` on any problem."""
    data = read_results_json(path)
    where = Path(path) / "results.json" if Path(path).is_dir() else Path(path)
    version = data.get("schema")
    if version != SCHEMA_VERSION:
        raise ResultsFileError(
            f"{where} has results schema {version!r}; this nqf reads {SCHEMA_VERSION!r} "
            "(rerun the experiment with this version of nqf)"
        )
    try:
        return ResultsFile.model_validate(data)
    except ValidationError as exc:
        e = exc.errors()[0]
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        more = len(exc.errors()) - 1
        raise ResultsFileError(
            f"{where} does not match the results schema: {loc}: {e['msg']}" + (f" (and {more} more)" if more else "")
        ) from None
