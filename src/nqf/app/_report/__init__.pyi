"""The names of ``nqf.app._report``: what type checkers see and what is loaded on first use (lazy_loader)."""

from ._codec import (
    CheckpointError as CheckpointError,
)
from ._figures import (
    mark_times as mark_times,
    new_figure as new_figure,
)
from ._html import (
    MAX_EMBED_BYTES as MAX_EMBED_BYTES,
    MAX_EMBED_TOTAL as MAX_EMBED_TOTAL,
    format_cell as format_cell,
    rebuild_report as rebuild_report,
    render_report as render_report,
    svg_is_safe as svg_is_safe,
    write_report as write_report,
)
from ._rundir import (
    HeldLock as HeldLock,
    ResumeMismatchError as ResumeMismatchError,
    RunDirectory as RunDirectory,
    RunDirectoryError as RunDirectoryError,
    RunDirectoryExistsError as RunDirectoryExistsError,
    RunDirectoryLockedError as RunDirectoryLockedError,
    acquire_lock as acquire_lock,
    atomic_write_bytes as atomic_write_bytes,
    atomic_write_text as atomic_write_text,
    figure_files as figure_files,
    has_marker as has_marker,
    hold_lock as hold_lock,
    is_run_directory as is_run_directory,
    marker_text as marker_text,
    read_arrays as read_arrays,
    verify_run as verify_run,
)
from ._schema import (
    SCHEMA_VERSION as SCHEMA_VERSION,
    CheckModel as CheckModel,
    ResultsFile as ResultsFile,
    ResultsFileError as ResultsFileError,
    TableModel as TableModel,
    read_results_json as read_results_json,
    validate_results as validate_results,
)
