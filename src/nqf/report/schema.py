"""The versioned schema of ``results.json`` (``nqf.results/1``).

Validate a file with :func:`validate_results`; the JSON Schema is
``ResultsFile.model_json_schema()``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = "nqf.results/1"

__all__ = ["SCHEMA_VERSION", "ResultsFile", "TableModel", "CheckModel", "validate_results"]

Cell = Union[float, int, str, bool, None]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TableModel(_Strict):
    name: str
    caption: str = ""
    columns: list[str]
    rows: list[list[Cell]]


class CheckModel(_Strict):
    """One prediction held against a measurement."""

    name: str
    predicted: Optional[float]
    measured: Optional[float]
    tolerance: Optional[float] = Field(None, description="allowed |measured − predicted| / |predicted|")
    relative_error: Optional[float] = None
    passed: Optional[bool] = None
    kind: Literal["relative", "absolute"] = "relative"
    error: Optional[float] = Field(None, description="the error judged against the tolerance (see kind)")
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
    schema_version: Literal["nqf.results/1"] = Field(alias="schema")
    experiment: str
    description: str
    status: Literal["complete", "interrupted", "failed"]
    message: str = ""
    config: dict[str, Any]
    seed: int
    device: str
    versions: Versions
    started: str
    finished: Optional[str]
    wall_seconds: Optional[float]
    metrics: dict[str, Cell]
    checks: list[CheckModel]
    tables: list[TableModel]
    figures: dict[str, dict[str, str]]
    arrays: Optional[str]
    summary: list[str] = []

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def validate_results(path) -> ResultsFile:
    """Load and validate ``results.json`` (a file or a run directory)."""
    path = Path(path)
    if path.is_dir():
        path = path / "results.json"
    data = json.loads(path.read_text(), parse_constant=lambda c: math.nan)
    return ResultsFile.model_validate(data)
