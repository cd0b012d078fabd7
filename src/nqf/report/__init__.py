"""Run directories, the results schema and the HTML report."""

from .html import rebuild_report, render_report, write_report
from .rundir import RunDirectory, RunDirectoryExistsError, atomic_write_bytes, atomic_write_text
from .schema import SCHEMA_VERSION, ResultsFile, validate_results

__all__ = ["RunDirectory", "RunDirectoryExistsError", "atomic_write_bytes", "atomic_write_text", "SCHEMA_VERSION",
           "ResultsFile", "validate_results", "render_report", "write_report", "rebuild_report"]
