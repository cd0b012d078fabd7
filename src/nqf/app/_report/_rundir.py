"""The run directory: written all or nothing, by one writer at a time, and never holding a pickle.

Layout of a run directory ``NAME/``::

    results.json              versioned summary (schema ``nqf.results/2``, see :mod:`nqf.app._report._schema`)
    arrays.npz                every array the experiment produced
    figures/FIG.png, FIG.svg  the figures
    report.html               self-contained report (figures embedded)
    checkpoints/KEY.ckpt.npz  finished parts, reused by ``--resume`` (JSON + arrays, no pickle:
                              see :mod:`nqf.app._report._codec`)

**Run id.**  Every run gets a fresh id (:attr:`RunDirectory.run_id`), recorded in every
file of the run; :mod:`nqf.app._report._runid` says where, and :func:`verify_run` checks that
they all agree.

**All or nothing.**  A run never writes into ``NAME/`` itself.  It writes into a
fresh sibling ``.NAME.nqf-new-RUNID/`` and :meth:`RunDirectory.commit` moves that
into place: renamed to ``NAME`` when there is none, else exchanged with the
existing ``NAME`` in one atomic step (Linux ``renameat2(RENAME_EXCHANGE)``; where
that is unavailable, the old directory is renamed to ``.NAME.nqf-old-RUNID`` and
the new one renamed in, and a kill between the two renames is repaired by the
next writer, which puts the old run back).  The previous run, now in the
sibling, is then deleted.  Hence a kill (even ``SIGKILL``) at any moment leaves
``NAME/`` holding either the complete previous run or the complete new run.
Entries of the previous directory that are not run outputs (anything but the
names above) are carried over into the new one as hard links (copies across
file systems), so ``--force`` never deletes a file nqf did not write.

**One writer.**  A lock file ``.NAME.nqf-lock`` beside the directory is taken
(without waiting) for the whole life of the :class:`RunDirectory`; a second
writer fails at once with :class:`RunDirectoryLockedError`.  Stale siblings
left by a killed writer (``.NAME.nqf-new-*``, ``.NAME.nqf-old-*``) are removed
by the next writer, which holds the lock, so they are never in use.

**Interrupted runs.**  Where the partial state of an interrupted run lives:

* Ctrl-C (``KeyboardInterrupt``) or a failing experiment: the runner writes what
  was finished (status ``"interrupted"`` / ``"failed"``, the finished
  checkpoints included) and commits it, so ``NAME/`` holds that run;
  ``--resume`` then reuses ``NAME/checkpoints/``.
* A kill that cannot be caught (``SIGKILL``, power loss): ``NAME/`` keeps the
  previous run, and the killed run's finished checkpoints stay in its sibling
  ``.NAME.nqf-new-RUNID/checkpoints/``.  ``--resume`` adopts those that match
  the run (same identity, see below) before deleting the sibling; any other run
  just deletes it.

**Resume cannot mix runs.**  Every checkpoint header and ``results.json`` record
the hash of the full resolved config (:func:`nqf.app._experiments.config_hash`),
the config itself, the seed, the nqf version and the format version.  With
``resume=True`` these are compared before any work starts; anything different
raises :class:`ResumeMismatchError` naming what differs.  A pickle found in
``checkpoints/`` is refused, never loaded.

**Permissions** and the atomic file operations: :mod:`nqf.app._report._atomic`.
"""

from __future__ import annotations

import glob
import io
import json
import os
import secrets
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import InvalidTypeError
from . import _codec as codec
from ._atomic import (
    atomic_write_bytes,
    atomic_write_text,
    carry_entry as _carry,
    exchange_paths as _exchange,  # a module global: tests patch it to kill a run mid-commit
    remove_tree as _rmtree,
)
from ._runfiles import (
    _CKPT_SUFFIX,
    _PICKLE_SUFFIXES,
    RUN_MARKER,
    RUN_OUTPUTS,
    HeldLock,
    ResumeMismatchError,
    RunDirectoryError,
    RunDirectoryExistsError,
    RunDirectoryLockedError,
    _checkpoint_name,
    acquire_lock,
    describe_differences,
    figure_files,
    has_marker,
    hold_lock,
    is_run_directory,
    lock_path,
    marker_text,
    read_arrays,
)
from ._runid import RUN_ID_KEY, archive_comment, read_run_ids, verify_run

__all__ = [
    "RunDirectory",
    "atomic_write_bytes",
    "atomic_write_text",
    "RunDirectoryError",
    "RunDirectoryExistsError",
    "RunDirectoryLockedError",
    "ResumeMismatchError",
    "verify_run",
    "read_run_ids",
    "RUN_OUTPUTS",
    "RUN_MARKER",
    "RUN_ID_KEY",
    "is_run_directory",
    "has_marker",
    "marker_text",
    "lock_path",
    "acquire_lock",
    "hold_lock",
    "HeldLock",
    "describe_differences",
    "figure_files",
    "read_arrays",
]


# --------------------------------------------------------------------------- names


# --------------------------------------------------------------------------- marker


# --------------------------------------------------------------------------- lock


# --------------------------------------------------------------------------- identity


# --------------------------------------------------------------------------- the directory
class RunDirectory:
    """A run directory being written (see the module docstring for the life cycle).

    Use as a context manager (commits on success, discards on an exception) or call
    :meth:`commit` / :meth:`discard` yourself.  Files are written into :attr:`staging`
    until then.

    Parameters
    ----------
    path : str or Path
        The run directory ``NAME``.
    force : bool
        Replace an existing run directory (atomically, at :meth:`commit`).
    resume : bool
        Reuse finished parts from ``NAME/checkpoints/`` (and from a killed writer's sibling).
    identity : dict, optional
        ``{"config": resolved config, "config_hash": …, "seed": …, "nqf_version": …}`` recorded in every
        checkpoint and compared on resume.
    """

    RESULT_FILES = ("results.json", "arrays.npz", "report.html")

    def __init__(self, path, *, force: bool = False, resume: bool = False, identity: dict | None = None):
        self.path = Path(path)
        self.resume = resume
        self.force = force
        self.identity = dict(identity or {})
        self.run_id = secrets.token_hex(8)
        real = Path(os.path.realpath(self.path))
        if real.name in ("", ".", "..") or real.parent == real:
            raise RunDirectoryExistsError(f"`--out` {self.path}: cannot use this path as a run directory")
        self._real = real
        self._parent = real.parent
        self._refuse(force, resume)  # before the lock: a refused --out creates nothing, beside it or anywhere
        self._parent.mkdir(parents=True, exist_ok=True)
        self._lock = self._acquire_lock()
        self._done = False
        try:
            self._recover()
            self._refuse(force, resume)  # again, holding the lock: nothing changed in between
            existing = real.is_dir() and any(real.iterdir())
            self.previous = real if existing else None
            stale = self._siblings("new") + self._siblings("old")
            self._reuse: dict[str, tuple[Path, dict]] = {}
            self.staging = self._parent / f".{real.name}.nqf-new-{self.run_id}"
            self.staging.mkdir()
            try:
                (self.staging / "figures").mkdir()
                atomic_write_text(self.staging / RUN_MARKER, marker_text("nqf-run"))
                if resume:
                    self._check_previous_results()
                    self._collect_checkpoints(stale)
            except BaseException:
                _rmtree(self.staging)
                raise
            for s in stale:
                _rmtree(s)
        except BaseException:
            self._release()
            raise

    def _refuse(self, force: bool, resume: bool) -> None:
        """Refuse ``--out`` that is a file, a folder holding files without ``force``/``resume``, a folder nqf did not
        write that holds names a run writes, or a symbolic link to a folder nqf did not write that is not empty."""
        real, shown = self._real, self.path
        if real.exists() and not real.is_dir():
            raise RunDirectoryExistsError(f"`--out` {shown} exists and is not a directory")
        entries = sorted(e.name for e in real.iterdir()) if real.is_dir() else []
        if not entries:
            return
        run = is_run_directory(real)
        if os.path.islink(os.path.abspath(shown)) and not run:
            raise RunDirectoryExistsError(
                f"`--out` {shown} is a symbolic link to {real}, a folder nqf did not write (no {RUN_MARKER} marker) "
                f"that holds {len(entries)} entries; nqf writes a run only into a new or empty folder or a run "
                "directory it wrote, so nothing was changed: choose another --out"
            )
        if not (force or resume):
            what = "a previous run" if run else f"{len(entries)} entries and is not a run directory (no {RUN_MARKER})"
            raise RunDirectoryExistsError(
                f"`--out` {shown} already holds {what}; pass --force to replace the run (files nqf did not write are "
                "carried into it) or --resume to continue an interrupted run, or choose another --out"
            )
        clash = [e for e in entries if e in RUN_OUTPUTS]
        if clash and not run:
            raise RunDirectoryExistsError(
                f"`--out` {shown} is not a run directory (no {RUN_MARKER} marker) and holds "
                f"{', '.join(clash)}, which a run would replace: nqf never overwrites files it did not write, "
                "so nothing was changed; choose a new or empty --out"
            )

    # ------------------------------------------------------------------ lock and recovery
    @property
    def lock_path(self) -> Path:
        return lock_path(self._real)

    def _acquire_lock(self):
        return acquire_lock(self.path)

    def _release(self) -> None:
        lock, self._lock = getattr(self, "_lock", None), None
        if lock is not None:
            lock.release()

    def _siblings(self, kind: str) -> list[Path]:
        pattern = str(self._parent / f".{glob.escape(self._real.name)}.nqf-{kind}-*")
        return sorted((Path(p) for p in glob.glob(pattern)), key=lambda p: p.stat().st_mtime, reverse=True)

    def _recover(self) -> None:
        """After a kill between the two renames of the fallback swap: put the old run back."""
        if self._real.exists():
            return
        olds = [p for p in self._siblings("old") if p.is_dir() and not p.is_symlink() and is_run_directory(p)]
        if olds:  # only a run directory nqf wrote is put back (a foreign sibling is left alone, then removed)
            os.rename(olds[0], self._real)

    # ------------------------------------------------------------------ resume checks
    def _mismatch(self, where: str, found: dict) -> None:
        if not self.identity:
            return
        diffs = describe_differences(found, self.identity)
        if diffs:
            raise ResumeMismatchError(
                f"cannot --resume {self.path}: {where} was written by a different run: "
                + "; ".join(diffs)
                + ". Resume with the same config, seed and nqf version, or start over with --force "
                "(without --resume) or another --out"
            )

    def _check_previous_results(self) -> None:
        if self.previous is None or not (self.previous / "results.json").exists():
            return
        from ._schema import SCHEMA_VERSION, ResultsFileError, read_results_json

        try:
            data = read_results_json(self.previous / "results.json")
        except ResultsFileError as exc:
            raise ResumeMismatchError(f"cannot --resume {self.path}: {exc}") from None
        if data.get("schema") != SCHEMA_VERSION:
            raise ResumeMismatchError(
                f"cannot --resume {self.path}: its results.json has format {data.get('schema')!r}, this nqf writes "
                f"{SCHEMA_VERSION!r}; start over with --force (without --resume)"
            )
        found = {
            "config": data.get("config"),
            "config_hash": data.get("config_hash"),
            "seed": data.get("seed"),
            "nqf_version": (data.get("versions") or {}).get("nqf"),
        }
        self._mismatch("results.json", found)

    def _collect_checkpoints(self, stale: list[Path]) -> None:
        """Validate every checkpoint of the previous run (refusing on any mismatch) and adopt matching ones of
        killed writers' siblings."""
        if self.previous is not None and (self.previous / "checkpoints").is_dir():
            for p in sorted((self.previous / "checkpoints").iterdir()):
                if p.name.startswith(".") and p.name.endswith(".tmp"):
                    continue
                if p.suffix.lower() in _PICKLE_SUFFIXES or not p.name.endswith(_CKPT_SUFFIX):
                    raise ResumeMismatchError(
                        f"cannot --resume {self.path}: checkpoints/{p.name} is not an nqf checkpoint "
                        f"(*{_CKPT_SUFFIX}); nqf never loads pickles or other files from a run directory, since "
                        "loading them could run code. Delete it, or start over with --force (without --resume)"
                    )
                if not p.is_file():
                    raise ResumeMismatchError(f"cannot --resume {self.path}: checkpoints/{p.name} is not a file")
                try:
                    header = codec.read_header(p.read_bytes(), f"checkpoints/{p.name}")
                except codec.CheckpointError as exc:
                    raise ResumeMismatchError(f"cannot --resume {self.path}: {exc}") from None
                self._mismatch(f"checkpoints/{p.name}", header)
                self._reuse[p.name] = (p, header)
        for s in stale:
            ck = s / "checkpoints"
            if s.is_symlink() or not s.name.startswith(f".{self._real.name}.nqf-new-") or not ck.is_dir():
                continue
            for p in ck.iterdir():
                if not p.name.endswith(_CKPT_SUFFIX) or p.name in self._reuse or p.is_symlink() or not p.is_file():
                    continue
                header = self._sibling_header(s, p)
                if header is None:
                    continue
                dst = self.staging / "checkpoints" / p.name
                dst.parent.mkdir(exist_ok=True)
                os.replace(p, dst)  # adopted: the sibling is deleted next
                self._reuse[p.name] = (dst, header)

    def _sibling_header(self, sibling: Path, p: Path) -> dict | None:
        """The header of checkpoint ``p`` of a killed writer's ``sibling`` when it is one of this very run, else
        ``None`` (ignored): the whole file must decode, its part key must be the one its name says, it must have
        been written by the run that made the sibling (run id = the sibling's suffix) and record exactly this
        run's identity (config hash, seed, nqf version, format)."""
        if not self.identity:
            return None
        try:
            header, _ = codec.loads(p.read_bytes(), p.name)
        except (OSError, codec.CheckpointError):
            return None
        key = header.get("key")
        if not isinstance(key, str) or not key or _checkpoint_name(key) != p.name:
            return None
        if header.get("run_id") != sibling.name.rsplit("-", 1)[-1]:
            return None
        if header.get("config_hash") != self.identity.get("config_hash"):
            return None
        if describe_differences(header, self.identity):
            return None
        return header

    # ------------------------------------------------------------------ writing
    def write_json(self, name: str, obj: Any) -> Path:
        p = self.staging / name
        atomic_write_text(p, json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n")
        return p

    def write_arrays(self, arrays: dict[str, Any], name: str = "arrays.npz") -> Path:
        """Save ``arrays`` (numpy arrays or torch tensors; numeric only: no object arrays, which would need pickle)
        with the run id as zip comment."""
        clean = {}
        for k, v in arrays.items():
            a = np.asarray(v.detach().cpu() if hasattr(v, "detach") else v)
            if a.dtype.kind not in "biufc":
                raise InvalidTypeError(f"array {k!r} has dtype {a.dtype}; only numeric arrays are saved (no pickle)")
            clean[k] = a
        buf = io.BytesIO()
        np.savez_compressed(buf, **clean)
        with zipfile.ZipFile(buf, "a") as zf:
            zf.comment = archive_comment(self.run_id)
        p = self.staging / name
        atomic_write_bytes(p, buf.getvalue())
        return p

    def write_figure(self, name: str, fig) -> dict[str, str]:
        """Save a matplotlib figure as PNG and SVG (both tagged with the run id); returns relative paths."""
        out = {}
        for rel, data in figure_files(name, fig, self.run_id).items():
            atomic_write_bytes(self.staging / rel, data)
            out[rel.rsplit(".", 1)[1]] = rel
        return out

    # ------------------------------------------------------------ checkpoints
    def checkpoint(self, key: str, compute: Callable[[], Any]) -> Any:
        """Return the saved value of part ``key`` when resuming, else compute and save it (never pickled)."""
        name = _checkpoint_name(key)
        dst = self.staging / "checkpoints" / name
        if self.resume and name in self._reuse:
            src, _ = self._reuse[name]
            data = src.read_bytes()
            try:
                header, value = codec.loads(data, f"checkpoints/{name}")
            except codec.CheckpointError as exc:
                raise ResumeMismatchError(f"cannot --resume {self.path}: {exc}") from None
            if header.get("key") != key:
                raise ResumeMismatchError(
                    f"cannot --resume {self.path}: checkpoints/{name} holds part {header.get('key')!r}, not {key!r}"
                )
            self._mismatch(f"checkpoints/{name}", header)
            atomic_write_bytes(dst, data)
            return value
        value = compute()
        header = dict(self.identity, key=key, run_id=self.run_id)
        atomic_write_bytes(dst, codec.dumps(value, header))
        return value

    # ------------------------------------------------------------ commit
    def commit(self) -> Path:
        """Move the staged run into place (atomically replacing a previous one) and release the lock."""
        if self._done:
            return self.path
        try:
            real, staging = self._real, self.staging
            if real.is_dir() and any(real.iterdir()):
                for entry in real.iterdir():
                    if entry.name not in RUN_OUTPUTS and not os.path.lexists(staging / entry.name):
                        _carry(entry, staging / entry.name)
                if _exchange(staging, real):
                    _rmtree(staging)
                else:
                    old = self._parent / f".{real.name}.nqf-old-{self.run_id}"
                    os.rename(real, old)
                    os.rename(staging, real)
                    _rmtree(old)
            else:
                os.rename(staging, real)  # replaces an empty directory atomically
            self._done = True
        finally:
            self._release()
        return self.path

    def discard(self) -> None:
        """Drop the staged files (the previous run, if any, is untouched) and release the lock."""
        if not self._done:
            _rmtree(self.staging)
            self._done = True
        self._release()

    def __enter__(self) -> RunDirectory:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.discard()

    def __del__(self):  # pragma: no cover - a forgotten directory must not keep the lock
        try:
            self._release()
        except (OSError, AttributeError, TypeError):  # a half-built object, or interpreter shutdown
            pass


def _json_default(obj):
    if isinstance(obj, (np.floating, np.integer)):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    try:
        import torch

        if isinstance(obj, torch.Tensor):
            return obj.detach().cpu().tolist()
    except ImportError:  # pragma: no cover
        pass
    raise InvalidTypeError(f"object of type {type(obj).__name__} is not JSON serialisable")
