"""The library's public surface, measured (issue 36, item 1).

The *library* doors are ``nqf`` and the packages a user of the library calls (``structure``, ``modules``,
``dynamics``, ``networks``, ``reductions`` with its four reductions, ``curves``); the *application* doors
(``study``, ``experiments``, ``sweep``, ``report``, ``data``) serve ``nqf analyze``, the experiments and the run
directories.  Two checks:

* the library's names are counted, and the count may fall but never rise: :data:`LIBRARY_SURFACE` is today's
  count, against the issue's target of at most :data:`TARGET` (not met yet: the names the application needs
  from the library are library API until the application is one package);
* no library door exports the application's plumbing (run directories, atomic writes, locks, markers, report
  safety, run identities): a planted plumbing name in a library door is found.

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
APP_DOORS = ("nqf.study", "nqf.experiments", "nqf.sweep", "nqf.report", "nqf.data")
#: Today's count of the library's public names: it may fall, never rise (lower it when names leave a door).
LIBRARY_SURFACE = 208
#: The application's plumbing its doors still export (run directories, locks, atomic writes, … that ``cli``,
#: ``study`` and ``sweep`` import from ``report`` and ``experiments``): it may fall, never rise.
APP_PLUMBING = 22
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


def test_no_library_door_exports_the_applications_plumbing():
    assert plumbing_in(public_names(LIBRARY_DOORS)) == []
    assert plumbing_in(public_names(("nqf.report",)))  # the pattern does see the application's plumbing


def test_the_application_doors_export_no_more_plumbing_than_the_app_itself_needs():
    """Plumbing used only inside its own module is off the doors (``format_validation_error``, ``resolve_device``,
    ``run_identity``, ``safe_figure_path``); what ``cli``, ``study`` and ``sweep`` import stays until the
    application is one package."""
    found = plumbing_in(public_names(APP_DOORS))
    assert len(found) <= APP_PLUMBING, found
    assert not {"nqf.experiments.run_identity", "nqf.report.safe_figure_path"} & set(found)


def test_planted_plumbing_name_in_a_library_door_is_found():
    assert plumbing_in({"nqf.curves": ["compare_staircase", "atomic_write_bytes"]}) == ["nqf.curves.atomic_write_bytes"]
