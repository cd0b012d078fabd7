"""Run an experiment into a run directory: seeding, progress, interruption, atomic outputs."""

from __future__ import annotations

import datetime as _dt
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import torch

from ..report.html import write_report
from ..report.rundir import RunDirectory
from ..report.schema import SCHEMA_VERSION
from .base import Experiment, Outcome, Params

__all__ = ["RunContext", "run_experiment", "resolve_device", "versions"]


def resolve_device(name: str) -> torch.device:
    """``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"auto"`` → a device that exists here."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise ValueError(f"--device: expected 'cpu', 'cuda', 'cuda:N' or 'auto'; found {name!r}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device: {name!r} requested but CUDA is not available on this machine; use --device cpu")
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"--device: expected 'cpu', 'cuda', 'cuda:N' or 'auto'; found {name!r}")
    return dev


def versions() -> dict[str, str]:
    import scipy

    from .. import __version__

    return {"nqf": __version__, "python": platform.python_version(), "torch": torch.__version__,
            "numpy": np.__version__, "scipy": scipy.__version__}


@dataclass
class RunContext:
    """What an experiment may use while running.

    Attributes
    ----------
    rundir : RunDirectory
    device : torch.device
    seed : int
    show_progress : bool
    """

    rundir: RunDirectory
    device: torch.device
    seed: int
    show_progress: bool = False

    def progress(self, iterable: Iterable, desc: str, total: int | None = None):
        """Wrap ``iterable`` in a progress bar on a terminal (off otherwise and with ``--json``)."""
        if not self.show_progress:
            return iterable
        from tqdm.auto import tqdm

        return tqdm(iterable, desc=desc, total=total, leave=False, file=sys.stderr)

    def checkpoint(self, key: str, compute):
        """Compute a finished part once; ``--resume`` reuses it from the run directory."""
        return self.rundir.checkpoint(key, compute)

    def generator(self, offset: int = 0) -> torch.Generator:
        return torch.Generator(device="cpu").manual_seed(self.seed + offset)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def run_experiment(exp: Experiment, params: Params, out_dir, *, seed: int = 0, device: str = "cpu",
                   force: bool = False, resume: bool = False, show_progress: bool = False) -> dict[str, Any]:
    """Run ``exp`` and write its run directory; returns the results dictionary.

    A ``KeyboardInterrupt`` stops the experiment, keeps everything it had
    finished (outputs written atomically, status ``"interrupted"``) and is
    re-raised; any other exception is recorded as status ``"failed"`` and re-raised.
    """
    dev = resolve_device(device)
    rundir = RunDirectory(out_dir, force=force, resume=resume)
    torch.manual_seed(seed)
    np.random.seed(seed)
    ctx = RunContext(rundir, dev, seed, show_progress)
    out = Outcome()
    started, t0 = _now(), time.perf_counter()
    status, message, error = "complete", "", None
    try:
        exp.run(params, ctx, out)
    except KeyboardInterrupt as exc:
        status, error = "interrupted", exc
        message = (f"interrupted: partial results kept in {rundir.path}; continue with "
                   f"`nqf run CONFIG --out {rundir.path} --resume` (finished parts are reused) "
                   f"or rebuild the report with `nqf report {rundir.path}`")
    except Exception as exc:  # noqa: BLE001 - recorded, then re-raised
        status, error = "failed", exc
        message = f"{type(exc).__name__}: {exc}"
    results = _write_outputs(exp, params, out, rundir, seed=seed, device=str(dev), status=status,
                             message=message, started=started, wall=time.perf_counter() - t0)
    if error is not None:
        raise error
    return results


def _write_outputs(exp, params, out: Outcome, rundir: RunDirectory, *, seed, device, status, message, started,
                   wall) -> dict[str, Any]:
    import matplotlib.pyplot as plt

    figures = {}
    for name, fig in list(out.figures.items()):
        figures[name] = rundir.write_figure(name, fig)
        plt.close(fig)
    arrays = None
    if out.arrays:
        arrays = rundir.write_arrays(out.arrays).name
    from .base import _cell

    results = {
        "schema": SCHEMA_VERSION,
        "experiment": exp.name,
        "description": exp.description,
        "status": status,
        "message": message,
        "config": {"experiment": exp.name, "seed": seed, "device": device, "params": params.model_dump(mode="json")},
        "seed": seed,
        "device": device,
        "versions": versions(),
        "started": started,
        "finished": _now(),
        "wall_seconds": round(wall, 3),
        "metrics": {k: _cell(v) for k, v in out.metrics.items()},
        "checks": [c.to_dict() for c in out.checks],
        "tables": [t.to_dict() for t in out.tables],
        "figures": figures,
        "arrays": arrays,
        "summary": list(out.summary),
    }
    rundir.write_json("results.json", results)
    write_report(rundir.path, results)
    return results
