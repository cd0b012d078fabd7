"""Run an experiment into a run directory: seeding, progress, interruption, all-or-nothing outputs.

The run directory is written by :class:`~nqf.app._report.RunDirectory`: into a
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
import threading
import time
from collections.abc import Iterable, Sized
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..._memory import check_memory
from ..._validation import ParameterError, seed_value, step_cap
from ...errors import NQFError
from .._report import SCHEMA_VERSION, RunDirectory, write_report
from ._base import Experiment, Outcome, Params

__all__ = [
    "RunContext",
    "run_experiment",
    "versions",
    "RECORDED_FAILURES",
]

#: The failures of an experiment that a run records (status ``"failed"``, what was finished kept) before they are
#: re-raised: an input refused (:class:`~nqf.errors.NQFError`), the numbers (``ArithmeticError``), memory and the
#: file system (``MemoryError``, ``OSError``: a full disk), torch's ``RuntimeError`` and the built-in errors a fault
#: of nqf raises.  Any other exception (a user's own exception class from a model file, ``SystemExit``) propagates
#: without a record: the staged run is dropped, a previous run stays as it was.
RECORDED_FAILURES: tuple[type[BaseException], ...] = (
    NQFError,
    ArithmeticError,
    MemoryError,
    OSError,
    RuntimeError,
    ValueError,
    TypeError,
    LookupError,
    AttributeError,
    AssertionError,
)


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

    from ... import __version__

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

    _bars: Any = field(default=None, init=False, repr=False, compare=False)  # the live rich Progress

    def progress(self, iterable: Iterable, desc: str, total: int | None = None):
        """Wrap ``iterable`` in a progress bar on a terminal (off otherwise and with ``--json``).

        The bar is rich's, on stderr, and transient: it is erased when the loop ends (or is left by ``break`` or
        an exception).  A loop inside another adds its bar under the outer one (one live display).
        """
        if not self.show_progress:
            return iterable
        return self._track(iterable, desc, len(iterable) if total is None and isinstance(iterable, Sized) else total)

    def _track(self, iterable: Iterable, desc: str, total: int | None):
        """Yield from ``iterable`` with its task in the live display, started by the outermost loop."""
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        outer = self._bars is None
        if outer:
            self._bars = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
                redirect_stdout=False,  # as before: the run's own output is not captured
                redirect_stderr=False,
            )
            self._bars.start()
        bars = self._bars
        task = bars.add_task(desc, total=total)
        try:
            for item in iterable:
                yield item
                bars.advance(task)
        finally:
            bars.remove_task(task)
            if outer:
                bars.stop()
                self._bars = None

    def checkpoint(self, key: str, compute):
        """Compute a finished part once; ``--resume`` reuses it from the run directory."""
        return self.rundir.checkpoint(key, compute)

    def generator(self, offset: int = 0) -> torch.Generator:
        return torch.Generator(device="cpu").manual_seed(self.seed + offset)


def run_identity(exp: Experiment, params: Params, *, seed: int, device: str) -> dict[str, Any]:
    """What a run is: the full resolved config, its hash, the seed and the nqf version (compared by ``--resume``)."""
    from ... import __version__
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
    max_steps: int | None = None,
) -> dict[str, Any]:
    """Run ``exp`` and write its run directory; returns the results dictionary.

    The run directory appears all at once when the run ends (see
    :mod:`nqf.app._report._rundir`).  A ``KeyboardInterrupt`` stops the experiment, keeps
    everything it had finished (status ``"interrupted"``, checkpoints included, so
    ``resume=True`` continues it) and is re-raised; a failure (:data:`RECORDED_FAILURES`) is recorded
    as status ``"failed"`` and re-raised (with ``.run_directory`` set to the path).  With ``force=True`` over an
    existing run, a run that does not complete is not committed: the previous run stays in place whole (the
    exception's ``.previous_run_kept`` is the path, ``.run_directory`` is ``None``).  An input refused
    (an :class:`~nqf.errors.NQFError`) before the run finished anything leaves no run directory behind
    (``.run_directory`` is ``None``; a previous run stays as it was).

    ``max_steps`` caps the GD steps of every loop the experiment starts (:func:`nqf._validation.step_cap`;
    ``nqf run``/``demo``/``sweep`` pass ``--max-steps``, default 10⁷; ``None``: no cap).

    Raises
    ------
    ParameterError
        ``seed`` not an int in ``[0, 2**32)``, an unknown or unavailable ``device``; sizes whose arrays cannot
        fit in memory (:func:`check_sizes`).
    RunDirectoryExistsError, RunDirectoryLockedError, ResumeMismatchError
        See :class:`~nqf.app._report.RunDirectory`.
    """
    seed = seed_value(seed)
    dev = resolve_device(device)
    identity = run_identity(exp, params, seed=seed, device=str(dev))
    check_sizes(exp, params, dev)  # before the run directory: a refusal leaves nothing behind
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
            with step_cap(max_steps):  # a loop of more steps is refused when it starts
                exp.run(params, ctx, out)
        except KeyboardInterrupt as exc:
            status, error = "interrupted", exc
            q = shlex.quote(str(rundir.path))
            message = (
                f"interrupted: partial results kept in {q}; continue with "
                f"`nqf run CONFIG --out {q} --resume` (finished parts are reused) "
                f"or rebuild the report with `nqf report {q}`"
            )
        except RECORDED_FAILURES as exc:  # recorded, then re-raised
            status, error = "failed", exc
            message = f"{type(exc).__name__}: {exc}"
        refused = _refused(error, out, rundir)  # before the figures are drawn (a note would count as output)
        with _deferred_interrupts() as late:  # a second Ctrl-C must not lose what is being saved
            results = None
            if not refused:
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
            kept = _commit_or_keep(rundir, status, refused)
    except BaseException:
        rundir.discard()
        raise
    if late and error is None:
        error = KeyboardInterrupt()
    if error is not None:
        try:
            # any exception may propagate here; the CLI reads the path back with getattr
            error.run_directory = None if kept or refused else rundir.path  # pyright: ignore[reportAttributeAccessIssue]
            error.previous_run_kept = rundir.path if kept else None  # pyright: ignore[reportAttributeAccessIssue]
        except AttributeError:  # pragma: no cover - exceptions without a __dict__
            pass
        raise error
    assert results is not None  # written whenever nothing was refused
    return results


def check_sizes(exp: Experiment, params: Params, device=None) -> None:
    """Refuse ``params`` whose sizes cannot fit in memory, before anything is allocated.

    The bytes are :meth:`Experiment.memory_estimate`'s lower bound; above the memory limit (a quarter of the
    available memory, or ``NQF_MEMORY_LIMIT`` bytes) raises :class:`ParameterError` naming the size parameters."""
    nbytes, named, what = exp.memory_estimate(params)
    names = ", ".join(f"`params.{k}` = {v}" for k, v in named.items()) or f"the sizes of {exp.name}"
    check_memory(nbytes, names, f"{exp.name}: {what}", device=device)


def _commit_or_keep(rundir: RunDirectory, status: str, refused: bool) -> bool:
    """Commit the staged run, or drop it; True when a previous run at the path is kept as it was.

    Dropped: a refused input (no run directory is left behind) and, under ``--force``, a run that did not
    complete (``--force`` swaps only on success)."""
    if refused or (status != "complete" and rundir.force and rundir.previous is not None):
        rundir.discard()
        return rundir.previous is not None
    rundir.commit()
    return False


def _refused(error: BaseException | None, out: Outcome, rundir: RunDirectory) -> bool:
    """True when the run failed on an input refused (an :class:`~nqf.errors.NQFError`: a step count past its cap,
    sizes past the memory limit) before it finished anything: no checkpoint, no array, metric, check, table or
    summary line.  Such a run leaves no run directory (and a previous run as it was)."""
    if not isinstance(error, NQFError):
        return False
    if out.arrays or out.metrics or out.checks or out.tables or out.summary or out.figures:
        return False
    ckpt = rundir.staging / "checkpoints"
    return not (ckpt.is_dir() and any(ckpt.iterdir()))


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

    from .._report import (
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
