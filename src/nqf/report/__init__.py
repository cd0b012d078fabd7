"""Run directories, the results schema and the HTML report; figure helpers (matplotlib, loaded on first use)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._codec import CheckpointError
from ._html import (
    MAX_EMBED_BYTES,
    MAX_EMBED_TOTAL,
    format_cell,
    rebuild_report,
    render_report,
    safe_figure_path,
    svg_is_safe,
    write_report,
)
from ._rundir import (
    HeldLock,
    ResumeMismatchError,
    RunDirectory,
    RunDirectoryError,
    RunDirectoryExistsError,
    RunDirectoryLockedError,
    acquire_lock,
    atomic_write_bytes,
    atomic_write_text,
    figure_files,
    has_marker,
    hold_lock,
    is_run_directory,
    marker_text,
    read_arrays,
    verify_run,
)
from ._schema import (
    SCHEMA_VERSION,
    CheckModel,
    ResultsFile,
    ResultsFileError,
    TableModel,
    read_results_json,
    validate_results,
)

if TYPE_CHECKING:
    from ._figures import mark_times, new_figure

__all__ = [
    "RunDirectory",
    "RunDirectoryError",
    "RunDirectoryExistsError",
    "RunDirectoryLockedError",
    "ResumeMismatchError",
    "CheckpointError",
    "atomic_write_bytes",
    "atomic_write_text",
    "verify_run",
    "SCHEMA_VERSION",
    "ResultsFile",
    "ResultsFileError",
    "validate_results",
    "render_report",
    "write_report",
    "rebuild_report",
    "safe_figure_path",
    "svg_is_safe",
    "MAX_EMBED_BYTES",
    "MAX_EMBED_TOTAL",
    "format_cell",
    "acquire_lock",
    "hold_lock",
    "HeldLock",
    "figure_files",
    "read_arrays",
    "has_marker",
    "is_run_directory",
    "marker_text",
    "CheckModel",
    "TableModel",
    "read_results_json",
    "new_figure",
    "mark_times",
]

#: Names loaded on first use (matplotlib is imported only by a command that draws).
_LAZY = {"new_figure": "._figures", "mark_times": "._figures"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
