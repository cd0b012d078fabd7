"""What a run directory is made of (:mod:`nqf.app._report._rundir`): its marker, its lock, its errors, the names of
checkpoints and figures, reading its arrays, and how two run identities differ."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import zipfile
from pathlib import Path

import numpy as np

from ...errors import InvalidParameterError, NQFError
from ._runid import figure_metadata

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


def lock_path(path) -> Path:
    """The lock file of run directory ``path``: ``.NAME.nqf-lock`` beside it."""
    real = Path(os.path.realpath(path))
    return real.parent / f".{real.name}.nqf-lock"


class HeldLock:
    """A held ``filelock.FileLock`` whose file is removed when it is released (:func:`hold_lock`)."""

    def __init__(self, lock, path: Path):
        self._lock, self.path = lock, path

    def release(self) -> None:
        """Remove the lock file, then release the lock (idempotent).  The file goes while the lock is still held:
        a process that opened it in the meantime finds its inode unlinked and retries (filelock ≥ 3.20.4 checks
        ``st_nlink``), so two holders never exist."""
        lock, self._lock = self._lock, None
        if lock is None:
            return
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
        finally:
            lock.release()

    @property
    def is_locked(self) -> bool:
        return self._lock is not None and self._lock.is_locked

    def __repr__(self) -> str:
        return f"HeldLock({str(self.path)!r}, held={self.is_locked})"


def hold_lock(path, busy: str, name: str = "--out") -> HeldLock:
    """Take the lock file ``path`` without waiting; its folder must exist.  Raises :class:`RunDirectoryLockedError`
    with ``busy`` when another process holds it, and :class:`RunDirectoryError` naming ``name`` when the file
    cannot be created there (a read-only or virtual file system such as ``/proc``)."""
    from filelock import FileLock, Timeout

    path = Path(path)
    lock = FileLock(str(path), timeout=0)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        if path.is_file():
            raise RunDirectoryLockedError(busy) from None
        raise RunDirectoryError(f"`{name}`: cannot create the lock file {path} (is {path.parent} writable?)") from None
    except OSError as exc:
        raise RunDirectoryError(
            f"`{name}`: cannot create the lock file {path} ({exc.strerror or exc}); choose another {name}"
        ) from None
    return HeldLock(lock, path)


def acquire_lock(path) -> HeldLock:
    """Take the lock of run directory ``path`` without waiting (:func:`hold_lock`, beside the directory); its
    ``.release()`` removes the lock file.  Raises :class:`RunDirectoryLockedError` when another process holds it."""
    lp = lock_path(path)
    lp.parent.mkdir(parents=True, exist_ok=True)
    return hold_lock(
        lp,
        f"run directory {path} is being written by another nqf process (lock {lp} is held); wait for it to "
        "finish or choose another --out",
    )


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
