"""What a run directory is made of (:mod:`nqf.report._rundir`): its marker, its lock, its errors, the names of
checkpoints and figures, reading its arrays, and how two run identities differ."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import zipfile
from pathlib import Path

import numpy as np

from ..errors import InvalidParameterError, NQFError
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
