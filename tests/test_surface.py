"""The library's public surface, measured (issue 36, item 1).

The *library* doors are ``nqf`` and the packages a user of the library calls (``structure``, ``modules``,
``dynamics``, ``networks``, ``reductions`` with its four reductions, ``curves``); the *application* is one
package, ``nqf.app``, whose parts (``_study``, ``_experiments``, ``_sweep``, ``_report``, ``_data``, ``_cli``)
are private to it and whose door exports what a user scripts.  The checks:

* the library's names are counted: at most :data:`TARGET` (the issue's target, met), and the count may fall but
  never rise (:data:`LIBRARY_SURFACE` is today's count);
* no door, library or application, exports the application's plumbing (run directories, atomic writes, locks,
  markers, report safety, run identities): a planted plumbing name in a library door is found, and the same
  pattern does find the plumbing behind the application's door (in its private ``_report``);
* the application's door holds :data:`APP_SURFACE` names, and may not grow.

A ``python`` block in docs/architecture.md (run by tests/test_docs_blocks.py) prints the same counts.
"""

from __future__ import annotations

import importlib
import re
import types

LIBRARY_DOORS = (
    "nqf",
    "nqf.structure",
    "nqf.modules",
    "nqf.dynamics",
    "nqf.networks",
    "nqf.reductions",
    "nqf.reductions.lv",
    "nqf.reductions.saddles",
    "nqf.reductions.svd_modes",
    "nqf.reductions.dormant",
    "nqf.curves",
)
APP_DOORS = ("nqf.app",)
#: Today's count of the library's public names: it may fall, never rise (lower it when names leave a door).
LIBRARY_SURFACE = 170
#: The application door's names (what a user scripts: analyze, run_experiment, load_dataset, …): may not grow.
APP_SURFACE = 24
#: The issue's target for the library's documented surface.
TARGET = 170
#: What the application's plumbing is called: run directories and their files, writes, locks and markers, the
#: report's safety checks, run identities and recorded failures, config error formatting, devices and versions.
PLUMBING = re.compile(
    r"^(atomic_write_\w+|acquire_lock|hold_lock|HeldLock|has_marker|marker_text|svg_is_safe|safe_figure_path"
    r"|MAX_EMBED_\w+|RunDirectory\w*|is_run_directory|verify_run|read_arrays|figure_files|run_identity"
    r"|RECORDED_FAILURES|format_validation_error|resolve_device|versions|CheckpointError|ResumeMismatchError)$"
)


def public_names(doors) -> dict[str, list[str]]:
    """``{door: its public names}``, subpackages listed in a door not counted as names (they are doors)."""
    out = {}
    for door in doors:
        mod = importlib.import_module(door)
        out[door] = [n for n in mod.__all__ if not isinstance(getattr(mod, n), types.ModuleType)]
    return out


def plumbing_in(names: dict[str, list[str]]) -> list[str]:
    return [f"{door}.{n}" for door, ns in names.items() for n in ns if PLUMBING.match(n)]


def test_library_surface_is_counted_and_does_not_grow():
    count = sum(map(len, public_names(LIBRARY_DOORS).values()))
    assert count <= LIBRARY_SURFACE, f"the library's public names grew: {count} > {LIBRARY_SURFACE}"
    assert LIBRARY_SURFACE <= TARGET


def test_no_door_exports_the_applications_plumbing():
    assert plumbing_in(public_names(LIBRARY_DOORS)) == []
    assert plumbing_in(public_names(APP_DOORS)) == []
    assert plumbing_in(public_names(("nqf.app._report",)))  # the pattern does see the plumbing behind the door


def test_the_application_door_exports_what_a_user_scripts_and_does_not_grow():
    """``nqf.app``'s names: the analyses, the experiments, data, finished runs and the command line."""
    names = public_names(APP_DOORS)["nqf.app"]
    assert len(names) <= APP_SURFACE, names
    assert {"analyze", "Analysis", "run_experiment", "load_dataset", "main"} <= set(names)


def test_planted_plumbing_name_in_a_library_door_is_found():
    assert plumbing_in({"nqf.curves": ["compare_staircase", "atomic_write_bytes"]}) == ["nqf.curves.atomic_write_bytes"]
