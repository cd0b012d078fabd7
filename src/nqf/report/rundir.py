"""The run directory: atomic writes of results, arrays, figures and checkpoints.

Layout of a run directory::

    results.json      versioned summary (schema ``nqf.results/1``, see :mod:`nqf.report.schema`)
    arrays.npz        every array the experiment produced
    figures/NAME.png  and figures/NAME.svg
    report.html       self-contained report (figures embedded)
    checkpoints/      finished parts, reused by ``--resume``

Every file is written to a temporary name in the same directory and moved into
place with :func:`os.replace`, so an interrupted run never leaves a truncated file.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np

__all__ = ["RunDirectory", "atomic_write_bytes", "atomic_write_text", "RunDirectoryExistsError"]


class RunDirectoryExistsError(FileExistsError):
    """The run directory already holds results and neither ``force`` nor ``resume`` was given."""


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temporary file + ``os.replace``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


class RunDirectory:
    """A run directory on disk.

    Parameters
    ----------
    path : str or Path
    force : bool
        Allow writing into a directory that already holds results (existing
        files are replaced one by one, atomically).
    resume : bool
        Reuse finished parts from ``checkpoints/`` of an earlier, interrupted run.
    """

    RESULT_FILES = ("results.json", "arrays.npz", "report.html")

    def __init__(self, path, *, force: bool = False, resume: bool = False):
        self.path = Path(path)
        self.resume = resume
        if self.path.exists() and not self.path.is_dir():
            raise RunDirectoryExistsError(f"`--out` {self.path} exists and is not a directory")
        if self.path.is_dir() and any(self.path.iterdir()) and not (force or resume):
            raise RunDirectoryExistsError(
                f"run directory {self.path} already holds files; pass --force to overwrite them or "
                "--resume to continue an interrupted run")
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / "figures").mkdir(exist_ok=True)

    # ------------------------------------------------------------------ files
    def write_json(self, name: str, obj: Any) -> Path:
        p = self.path / name
        atomic_write_text(p, json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n")
        return p

    def write_arrays(self, arrays: dict[str, np.ndarray], name: str = "arrays.npz") -> Path:
        buf = io.BytesIO()
        np.savez_compressed(buf, **{k: np.asarray(v) for k, v in arrays.items()})
        p = self.path / name
        atomic_write_bytes(p, buf.getvalue())
        return p

    def write_figure(self, name: str, fig) -> dict[str, str]:
        """Save a matplotlib figure as PNG and SVG; returns relative paths."""
        out = {}
        for ext in ("png", "svg"):
            buf = io.BytesIO()
            fig.savefig(buf, format=ext, dpi=120, bbox_inches="tight")
            rel = f"figures/{name}.{ext}"
            atomic_write_bytes(self.path / rel, buf.getvalue())
            out[ext] = rel
        return out

    # ------------------------------------------------------------ checkpoints
    def checkpoint(self, key: str, compute: Callable[[], Any]) -> Any:
        """Return the saved value of part ``key`` when resuming, else compute and save it."""
        p = self.path / "checkpoints" / f"{key}.pkl"
        if self.resume and p.exists():
            with open(p, "rb") as fh:
                return pickle.load(fh)
        value = compute()
        atomic_write_bytes(p, pickle.dumps(value))
        return value


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
    raise TypeError(f"object of type {type(obj).__name__} is not JSON serialisable")
