"""Run directories, the results schema and the HTML report."""

from .codec import CheckpointError
from .html import rebuild_report, render_report, safe_figure_path, write_report
from .rundir import (
    ResumeMismatchError,
    RunDirectory,
    RunDirectoryError,
    RunDirectoryExistsError,
    RunDirectoryLockedError,
    atomic_write_bytes,
    atomic_write_text,
    verify_run,
)
from .schema import SCHEMA_VERSION, ResultsFile, ResultsFileError, validate_results

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
]
