"""The run directory: written all or nothing, by one writer at a time, and never holding a pickle.

Layout of a run directory ``NAME/``::

    results.json              versioned summary (schema ``nqf.results/2``, see :mod:`nqf.report._schema`)
    arrays.npz                every array the experiment produced
    figures/FIG.png, FIG.svg  the figures
    report.html               self-contained report (figures embedded)
    checkpoints/KEY.ckpt.npz  finished parts, reused by ``--resume`` (JSON + arrays, no pickle:
                              see :mod:`nqf.report._codec`)

**Run id.**  Every run gets a fresh id (:attr:`RunDirectory.run_id`), recorded in every
file of the run; :mod:`nqf.report._runid` says where, and :func:`verify_run` checks that
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
the hash of the full resolved config (:func:`nqf.experiments.config_hash`),
the config itself, the seed, the nqf version and the format version.  With
``resume=True`` these are compared before any work starts; anything different
raises :class:`ResumeMismatchError` naming what differs.  A pickle found in
``checkpoints/`` is refused, never loaded.

**Permissions** and the atomic file operations: :mod:`nqf.report._atomic`.
"""

from __future__ import annotations

import glob
import hashlib
import io
import json
import os
import re
import secrets
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InvalidParameterError, InvalidTypeError, NQFError
from . import _codec as codec
from ._atomic import atomic_write_bytes, atomic_write_text
from ._atomic import carry_entry as _carry
from ._atomic import exchange_paths as _exchange  # a module global: tests patch it to kill a run mid-commit
from ._atomic import remove_tree as _rmtree
from ._runid import RUN_ID_KEY, archive_comment, figure_metadata, read_run_ids, verify_run

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
    "describe_differences",
    "figure_files",
    "read_arrays",
]

#: The marker file nqf writes into every run directory (``{"kind": "nqf-run", "version": 1}``): ``--force`` and
#: ``--resume`` replace only a directory that carries it (or an empty one, or a run written before markers).
RUN_MARKER = "nqf-run.json"
MARKER_VERSION = 1
#: Entries of a run directory that belong to the run (everything else is carried over by ``--force``).
RUN_OUTPUTS = ("results.json", "arrays.npz", "report.html", "figures", "checkpoints", RUN_MARKER)
_CKPT_SUFFIX = ".ckpt.npz"
_PICKLE_SUFFIXES = (".pkl", ".pickle", ".pck", ".p")


class RunDirectoryError(NQFError):
    """A run directory cannot be used as asked."""


class RunDirectoryExistsError(RunDirectoryError, FileExistsError):
    """The run directory already holds results and neither ``force`` nor ``resume`` was given."""


class RunDirectoryLockedError(RunDirectoryError, RuntimeError):
    """Another process is writing the same run directory."""


class ResumeMismatchError(RunDirectoryError, ValueError):
    """``--resume`` found parts written by a different run (config, seed, version or format), or unsafe files."""


# --------------------------------------------------------------------------- names
def _checkpoint_name(key: str) -> str:
    if not isinstance(key, str) or not key:
        raise InvalidParameterError(f"checkpoint key must be a non-empty string; found {key!r}")
    if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,100}", key):
        return key + _CKPT_SUFFIX
    safe = re.sub(r"[^A-Za-z0-9._+-]", "_", key)[:60].lstrip(".") or "key"
    return f"{safe}-{hashlib.sha256(key.encode('utf-8')).hexdigest()[:12]}{_CKPT_SUFFIX}"


def _figure_stem(name: str) -> str:
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,100}", name) or ".." in name:
        raise InvalidParameterError(f"figure name must be a plain file name (letters, digits, . _ + -); found {name!r}")
    return name


def figure_files(name: str, fig, run_id: str) -> dict[str, bytes]:
    """A matplotlib figure as the bytes of ``figures/NAME.png`` and ``figures/NAME.svg``, tagged with ``run_id``."""
    stem = _figure_stem(name)
    meta = figure_metadata(run_id)
    out = {}
    for ext in ("png", "svg"):
        buf = io.BytesIO()
        fig.savefig(buf, format=ext, dpi=120, bbox_inches="tight", metadata=meta[ext])
        out[f"figures/{stem}.{ext}"] = buf.getvalue()
    return out


def read_arrays(path) -> dict[str, np.ndarray]:
    """The arrays of a run directory's ``arrays.npz`` (``allow_pickle=False``: nothing read is executed)."""
    p = Path(path)
    try:
        with np.load(p, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise RunDirectoryError(f"`{p}` is not a readable arrays file ({type(exc).__name__}: {exc})") from None


# --------------------------------------------------------------------------- marker
def marker_text(kind: str) -> str:
    """The JSON text of the marker file of a directory nqf writes (``kind``: ``"nqf-run"`` or ``"nqf-sweep"``)."""
    return json.dumps({"kind": kind, "version": MARKER_VERSION}) + "\n"


def has_marker(path, name: str, kind: str) -> bool:
    """True when ``path/name`` is a small regular file holding the marker JSON of ``kind``."""
    p = Path(path) / name
    try:
        if p.is_symlink() or not p.is_file() or p.stat().st_size > 4096:
            return False
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("kind") == kind


def is_run_directory(path) -> bool:
    """True when ``path`` is a run directory nqf wrote: it carries the ``nqf-run.json`` marker, or (a run written
    before markers existed) its ``results.json`` is an nqf results file."""
    path = Path(path)
    if has_marker(path, RUN_MARKER, "nqf-run"):
        return True
    p = path / "results.json"
    try:
        if p.is_symlink() or not p.is_file() or p.stat().st_size > 64 * 2**20:
            return False
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and str(data.get("schema", "")).startswith("nqf.results/") and "run_id" in data


# --------------------------------------------------------------------------- lock
def lock_path(path) -> Path:
    """The lock file of run directory ``path``: ``.NAME.nqf-lock`` beside it."""
    real = Path(os.path.realpath(path))
    return real.parent / f".{real.name}.nqf-lock"


def acquire_lock(path):
    """Take the lock of run directory ``path`` without waiting (a held ``filelock.FileLock``); release it with
    ``.release()``.  Raises :class:`RunDirectoryLockedError` when another process holds it."""
    from filelock import FileLock, Timeout

    lp = lock_path(path)
    lp.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(lp), timeout=0)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise RunDirectoryLockedError(
            f"run directory {path} is being written by another nqf process (lock {lp} is held); wait for it to "
            "finish or choose another --out"
        ) from None
    return lock


# --------------------------------------------------------------------------- identity
def describe_differences(found: dict, expected: dict) -> list[str]:
    """What differs between the identity recorded by a run (``found``) and the one of this run (``expected``)."""
    out = []
    for key, label in (("format", "format"), ("nqf_version", "nqf version")):
        if key in expected and found.get(key) != expected.get(key):
            out.append(f"{label} {found.get(key)!r} (in the run) vs {expected.get(key)!r} (now)")
    fc, ec = found.get("config"), expected.get("config")
    if isinstance(fc, dict) and isinstance(ec, dict):
        a, b = _flatten(fc), _flatten(ec)
        for k in sorted(set(a) | set(b)):
            if a.get(k, "<unset>") != b.get(k, "<unset>"):
                out.append(f"{k} {a.get(k, '<unset>')!r} (in the run) vs {b.get(k, '<unset>')!r} (now)")
    elif found.get("seed") != expected.get("seed"):
        out.append(f"seed {found.get('seed')!r} (in the run) vs {expected.get('seed')!r} (now)")
    if not out and found.get("config_hash") != expected.get("config_hash"):
        out.append(
            f"config hash {str(found.get('config_hash'))[:12]}… (in the run) vs "
            f"{str(expected.get('config_hash'))[:12]}… (now)"
        )
    return out


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, name + "."))
        else:
            out[name] = v
    return out


# --------------------------------------------------------------------------- the directory
class RunDirectory:
    """A run directory being written (see the module docstring for the life cycle).

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

    Use as a context manager (commits on success, discards on an exception) or call
    :meth:`commit` / :meth:`discard` yourself.  Files are written into :attr:`staging`
    until then.
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
        if real.exists() and not real.is_dir():
            raise RunDirectoryExistsError(f"`--out` {self.path} exists and is not a directory")
        self._parent.mkdir(parents=True, exist_ok=True)
        self._lock = self._acquire_lock()
        self._done = False
        try:
            self._recover()
            existing = real.is_dir() and any(real.iterdir())
            if existing and not (force or resume):
                raise RunDirectoryExistsError(
                    f"run directory {self.path} already holds files; pass --force to overwrite them or "
                    "--resume to continue an interrupted run"
                )
            clash = sorted(e.name for e in real.iterdir() if e.name in RUN_OUTPUTS) if existing else []
            if clash and not is_run_directory(real):
                raise RunDirectoryExistsError(
                    f"`--out` {self.path} is not a run directory (no {RUN_MARKER} marker) and holds "
                    f"{', '.join(clash)}, which a run would replace: nqf never overwrites files it did not write, "
                    "so nothing was changed; choose a new or empty --out"
                )
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
