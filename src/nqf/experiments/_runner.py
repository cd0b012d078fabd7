"""Run an experiment into a run directory: seeding, progress, interruption, all-or-nothing outputs.

The run directory is written by :class:`~nqf.report.RunDirectory`: into a
staging sibling, committed atomically at the end (also after Ctrl-C or a
failure, with status ``"interrupted"``/``"failed"``), under a lock.  Every run
records its identity — the full resolved config and its hash, the seed and the
nqf version — in ``results.json`` and in every checkpoint, and ``--resume``
refuses parts of a different run.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import platform
import shlex
import signal
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .._validation import ParameterError, seed_value
from ..report import SCHEMA_VERSION, RunDirectory, write_report
from ._base import Experiment, Outcome, Params

__all__ = ["RunContext", "run_experiment", "resolve_device", "versions", "run_identity"]


def resolve_device(name: str) -> torch.device:
    """``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"auto"`` → a device that exists here (else :class:`ParameterError`)."""
    expected = "expected 'cpu', 'cuda', 'cuda:N' or 'auto'"
    if not isinstance(name, str):
        raise ParameterError(f"--device (`device`): {expected}; found {name!r} ({type(name).__name__})")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if not name.strip() or name != name.strip():
        raise ParameterError(f"--device (`device`): {expected}; found {name!r}")
    try:
        dev = torch.device(name)
    except (RuntimeError, ValueError):
        raise ParameterError(f"--device (`device`): {expected}; found {name!r}") from None
    if dev.type not in ("cpu", "cuda") or (dev.type == "cpu" and dev.index not in (None, 0)):
        raise ParameterError(f"--device (`device`): {expected}; found {name!r}")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ParameterError(
                f"--device (`device`): {name!r} requested but CUDA is not available on this machine; use --device cpu"
            )
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ParameterError(
                f"--device (`device`): {name!r} requested but this machine has "
                f"{torch.cuda.device_count()} CUDA device(s)"
            )
    return dev


def versions() -> dict[str, str]:
    import scipy

    from .. import __version__

    return {
        "nqf": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "scipy": scipy.__version__,
    }


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


def run_identity(exp: Experiment, params: Params, *, seed: int, device: str) -> dict[str, Any]:
    """What a run is: the full resolved config, its hash, the seed and the nqf version (compared by ``--resume``)."""
    from .. import __version__
    from ._config import RunConfig, config_hash, resolved_config

    resolved = resolved_config(RunConfig(experiment=exp.name, seed=seed, device=device), params)
    return {"config": resolved, "config_hash": config_hash(resolved), "seed": seed, "nqf_version": __version__}


@contextlib.contextmanager
def _deferred_interrupts():
    """Hold SIGINT while the outputs are written and committed; yields a list that is non-empty if one came."""
    got: list = []
    if threading.current_thread() is not threading.main_thread():
        yield got
        return
    try:
        old = signal.signal(signal.SIGINT, lambda signum, frame: got.append(signum))
    except (ValueError, OSError):  # pragma: no cover - no signals here
        yield got
        return
    try:
        yield got
    finally:
        signal.signal(signal.SIGINT, old)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def run_experiment(
    exp: Experiment,
    params: Params,
    out_dir,
    *,
    seed: int = 0,
    device: str = "cpu",
    force: bool = False,
    resume: bool = False,
    show_progress: bool = False,
) -> dict[str, Any]:
    """Run ``exp`` and write its run directory; returns the results dictionary.

    The run directory appears all at once when the run ends (see
    :mod:`nqf.report._rundir`).  A ``KeyboardInterrupt`` stops the experiment, keeps
    everything it had finished (status ``"interrupted"``, checkpoints included, so
    ``resume=True`` continues it) and is re-raised; any other exception is recorded
    as status ``"failed"`` and re-raised (with ``.run_directory`` set to the path).  With ``force=True`` over an
    existing run, a run that does not complete is not committed: the previous run stays in place whole (the
    exception's ``.previous_run_kept`` is the path, ``.run_directory`` is ``None``).

    Raises
    ------
    ParameterError
        ``seed`` not an int in ``[0, 2**32)``, an unknown or unavailable ``device``.
    RunDirectoryExistsError, RunDirectoryLockedError, ResumeMismatchError
        See :class:`~nqf.report.RunDirectory`.
    """
    seed = seed_value(seed)
    dev = resolve_device(device)
    identity = run_identity(exp, params, seed=seed, device=str(dev))
    rundir = RunDirectory(out_dir, force=force, resume=resume, identity=identity)
    kept = False
    try:
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
            q = shlex.quote(str(rundir.path))
            message = (
                f"interrupted: partial results kept in {q}; continue with "
                f"`nqf run CONFIG --out {q} --resume` (finished parts are reused) "
                f"or rebuild the report with `nqf report {q}`"
            )
        except Exception as exc:  # noqa: BLE001 - recorded, then re-raised
            status, error = "failed", exc
            message = f"{type(exc).__name__}: {exc}"
        with _deferred_interrupts() as late:  # a second Ctrl-C must not lose what is being saved
            results = _write_outputs(
                exp,
                params,
                out,
                rundir,
                identity=identity,
                seed=seed,
                device=str(dev),
                status=status,
                message=message,
                started=started,
                wall=time.perf_counter() - t0,
            )
            if status != "complete" and rundir.force and rundir.previous is not None:
                rundir.discard()  # --force swaps only on success: the previous run stays whole
                kept = True
            else:
                rundir.commit()
                kept = False
    except BaseException:
        rundir.discard()
        raise
    if late and error is None:
        error = KeyboardInterrupt()
    if error is not None:
        try:
            # any exception may propagate here; the CLI reads the path back with getattr
            error.run_directory = None if kept else rundir.path  # pyright: ignore[reportAttributeAccessIssue]
            error.previous_run_kept = rundir.path if kept else None  # pyright: ignore[reportAttributeAccessIssue]
        except AttributeError:  # pragma: no cover - exceptions without a __dict__
            pass
        raise error
    return results


def _draw(exp: Experiment, params: Params, out: Outcome) -> None:
    """Fill ``out.figures`` from ``out.arrays`` with :meth:`Experiment.plot` (a partial run: what it can draw)."""
    try:
        out.figures.update(exp.plot(dict(out.arrays), params))
    except KeyError as exc:  # an interrupted or failed run lacks arrays: its figures are not drawn
        out.summary.append(f"figures not drawn: the run saved no array {exc}")


def _write_outputs(
    exp, params, out: Outcome, rundir: RunDirectory, *, identity, seed, device, status, message, started, wall
) -> dict[str, Any]:
    import matplotlib.pyplot as plt

    _draw(exp, params, out)
    figures = {}
    for name, fig in list(out.figures.items()):
        figures[name] = rundir.write_figure(name, fig)
        plt.close(fig)
    arrays = None
    if out.arrays:
        arrays = rundir.write_arrays(out.arrays).name
    recorded = out.to_dict()
    results = {
        "schema": SCHEMA_VERSION,
        "run_id": rundir.run_id,
        "config_hash": identity["config_hash"],
        "experiment": exp.name,
        "description": exp.description,
        "status": status,
        "message": message,
        "config": identity["config"],
        "seed": seed,
        "device": device,
        "versions": versions(),
        "started": started,
        "finished": _now(),
        "wall_seconds": round(wall, 3),
        "metrics": recorded["metrics"],
        "checks": recorded["checks"],
        "tables": recorded["tables"],
        "figures": figures,
        "arrays": arrays,
        "summary": recorded["summary"],
    }
    write_report(rundir.staging, results)
    rundir.write_json("results.json", results)  # last: a staged run with results.json is complete
    return results


def redraw(path) -> dict[str, dict[str, str]]:
    """Redraw a run directory's figures from its ``arrays.npz`` and config alone (``nqf report RUN_DIR``).

    Writes ``figures/NAME.png``/``.svg`` (tagged with the run's id) and their names into
    ``results.json``, under the run directory's lock.  Returns the figures written
    (``{}`` when the experiment draws no figure from arrays, or the run saved none).

    Raises
    ------
    ResultsFileError
        ``results.json`` missing or malformed.
    RunDirectoryError
        ``arrays.npz`` unreadable, or the directory locked by a run.
    """
    import json

    import matplotlib.pyplot as plt

    from ..report import (
        acquire_lock,
        atomic_write_bytes,
        atomic_write_text,
        figure_files,
        read_arrays,
        read_results_json,
        validate_results,
    )
    from ._catalog import all_experiments

    path = Path(path)
    validate_results(path)
    results = read_results_json(path)
    exp = all_experiments().get(str(results.get("experiment")))
    if exp is None or not results.get("arrays"):
        return {}
    params = exp.Params(**results["config"]["params"])
    arrays = read_arrays(path / results["arrays"])
    lock = acquire_lock(path)
    try:
        figs = exp.plot(arrays, params)
        written = {}
        for name, fig in figs.items():
            rels = {}
            for rel, data in figure_files(name, fig, str(results["run_id"])).items():
                atomic_write_bytes(path / rel, data)
                rels[rel.rsplit(".", 1)[1]] = rel
            written[name] = rels
            plt.close(fig)
        if written:
            results["figures"] = {**results.get("figures", {}), **written}
            atomic_write_text(path / "results.json", json.dumps(results, indent=2) + "\n")
        return written
    finally:
        lock.release()
