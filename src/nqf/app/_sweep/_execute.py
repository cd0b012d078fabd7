"""Run the points of a sweep on a Dask ``distributed.Client`` — one code path for every executor.

* ``workers=N`` / ``scheduler="local"``: a :class:`distributed.LocalCluster` of
  ``N`` worker *processes* (default: the number of cores), one thread each;
* ``scheduler="tcp://HOST:PORT"``: an existing Dask cluster (``dask-scheduler``,
  ``dask-jobqueue`` on Slurm/PBS, …) whose workers have ``nqf`` installed and
  see the sweep directory (a shared file system).

Each point runs :func:`nqf.app.run_experiment` — exactly what
``nqf run`` runs — in its own run directory, with one torch thread, so its
arrays and measured values are bit-identical to ``nqf run`` of the same config
and seed.  A point that raises is recorded (error type and message) and the
sweep goes on.  A worker that dies (killed, out of memory) loses its point to
the scheduler, which runs it again on another worker, up to ``retries`` times
(Dask's ``distributed.scheduler.allowed-failures``; for an existing cluster its
own setting applies); after that the point is recorded as failed
(``KilledWorker``).  A point rerun after a crash resumes its run directory
(finished parts are reused; the directory is named by the config hash, so the
parts are of the same config).

Dask is imported only here, lazily: ``pip install 'nqf[dask]'``.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import SweepError
from ...results import Result
from ._points import Point, is_finished, point_dir, read_results

__all__ = [
    "DaskMissingError",
    "require_dask",
    "check_scheduler",
    "open_client",
    "run_point",
    "execute",
    "row_from_results",
    "finished_rows",
    "SweepState",
]

#: Seconds without a scheduler before the client stops waiting (the unfinished points are then "interrupted").
SCHEDULER_LOST_AFTER = 20.0

DASK_MESSAGE = "nqf sweep needs Dask: install it with `pip install 'nqf[dask]'` (dask and distributed)"


class DaskMissingError(ImportError):
    """Dask (``dask`` and ``distributed``) is not installed."""


def require_dask():
    """Import ``distributed`` or raise :class:`DaskMissingError` with the one-line install hint."""
    try:
        import dask  # noqa: F401
        import distributed
    except ImportError:
        raise DaskMissingError(DASK_MESSAGE) from None
    return distributed


def check_scheduler(scheduler: str | None) -> None:
    """``--scheduler``: ``None``, ``"local"`` or a Dask address (``tcp://``, ``tls://``, ``ucx://``, ``inproc://``);
    checked before the sweep starts, so a bad one is the only line printed."""
    if scheduler not in (None, "local") and not str(scheduler).startswith(("tcp://", "tls://", "ucx://", "inproc://")):
        raise SweepError(f"`--scheduler`: expected 'local' or an address like tcp://HOST:PORT; found {scheduler!r}")


@contextmanager
def open_client(scheduler: str | None = None, workers: int | None = None, retries: int = 3):
    """A ``distributed.Client`` for the executor (see module docstring); closes what it started."""
    distributed = require_dask()
    import dask.config

    if scheduler not in (None, "local"):
        check_scheduler(scheduler)
        client = distributed.Client(scheduler, timeout="20s")
        try:
            yield client
        finally:
            client.close()
        return
    n = workers or os.cpu_count() or 1
    with dask.config.set({"distributed.scheduler.allowed-failures": int(retries)}):
        cluster = distributed.LocalCluster(
            n_workers=n,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,  # pyright: ignore[reportArgumentType]
            silence_logs=logging.ERROR,
            env={"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"},
        )
        client = distributed.Client(cluster)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


# ----------------------------------------------------------------------------- on the worker
def row_from_results(results: dict) -> dict[str, Any]:
    """The per-point outcome kept in the sweep table: status, wall time, checks and scalar metrics."""
    metrics = {
        k: v
        for k, v in (results.get("metrics") or {}).items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) or v is None
    }
    return {
        "status": results.get("status"),
        "wall_seconds": results.get("wall_seconds"),
        "error_type": None,
        "error": results.get("message") or None,
        "checks": [
            {k: c.get(k) for k in ("name", "predicted", "measured", "relative_error", "passed")}
            for c in results.get("checks") or []
        ],
        "metrics": metrics,
    }


def run_point(config: dict, out_dir: str, max_steps: int | None = None) -> dict[str, Any]:
    """Run one point (on a worker): validate ``config``, run it into ``out_dir`` (GD loops capped at ``max_steps``).

    A point refused or failing for its input (an :class:`~nqf.errors.NQFError`: a bad value, a device this
    machine lacks, a divergence, sizes past the memory limit), for memory or for the file system
    (``MemoryError``, ``OSError``) returns a failed row with its wall time.  Anything else is a fault of nqf:
    it is raised, and the client records the point as failed from the future's exception (error type and
    message), so the sweep goes on either way.

    Returns
    -------
    dict
        ``row_from_results`` of the written results, or ``status = "failed"`` with ``error_type`` and ``error``.
    """
    import torch

    from ...errors import NQFError
    from .._experiments import parse_config, run_experiment

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    try:
        cfg, exp, params = parse_config(config, "point")
        # resume: a point rerun after a failure or a killed worker reuses the finished parts of the same
        # config (the directory is named by the config hash); a fresh directory starts from scratch
        results = run_experiment(
            exp,
            params,
            Path(out_dir),
            seed=cfg.seed,
            device=cfg.device,
            resume=True,
            show_progress=False,
            max_steps=max_steps,
        )
    except (NQFError, MemoryError, OSError) as exc:  # the point's fault: recorded in the sweep table
        return {
            "status": "failed",
            "wall_seconds": round(time.perf_counter() - t0, 3),
            "error_type": type(exc).__name__,
            "error": str(exc),
            "checks": [],
            "metrics": {},
        }
    return row_from_results(results)


# ----------------------------------------------------------------------------- on the client
def finished_rows(points: list[Point], root) -> dict[str, dict]:
    """The rows of the points whose run directory under ``root`` is finished (read from disk, ``reused``)."""
    return {
        pt.short: dict(row_from_results(read_results(point_dir(root, pt)) or {}), reused=True)
        for pt in points
        if is_finished(root, pt)
    }


def _lost_row(root, pt: Point, error_type: str, error: str, status: str = "failed") -> dict:
    """The row of a point whose future did not return a row: complete when its directory is (on this
    machine), else ``status`` with the error."""
    if is_finished(root, pt):
        return dict(row_from_results(read_results(point_dir(root, pt)) or {}), reused=False)
    return {
        "status": status,
        "wall_seconds": None,
        "error_type": error_type,
        "error": error or error_type,
        "checks": [],
        "metrics": {},
    }


def _checked_row(root, pt: Point, row: dict) -> dict:
    """A worker's row, checked against the disk of the client: a point a worker finished where this machine
    cannot see it is not complete here."""
    if row.get("status") == "complete" and not is_finished(root, pt):
        return {
            **row,
            "status": "failed",
            "error_type": "SweepDirectoryNotShared",
            "error": f"the worker finished the point but {point_dir(root, pt)} is not visible here: the workers "
            "must see the sweep directory (a shared file system)",
        }
    return row


def _scheduler_alive(client) -> bool:
    try:
        return client.status == "running" and client.scheduler_info().get("address") is not None
    except (OSError, RuntimeError, ValueError):  # CommClosedError, timeouts, a closed client: not reachable now
        return False


@dataclass(repr=False)
class SweepState(Result):
    """Counts for the progress display, and the row of every finished point.

    Not frozen: :func:`execute` updates it while the sweep runs (it is the live progress
    record that ``on_tick`` sees); compact repr and :meth:`to_dict` as every result.
    """

    total: int
    done: int = 0
    failed: int = 0
    running: int = 0
    skipped: int = 0
    started: float = field(default_factory=time.perf_counter)
    rows: dict[str, dict] = field(default_factory=dict)


def execute(
    points: list[Point],
    root,
    client,
    *,
    on_point: Callable[[Point, dict], None] | None = None,
    on_tick: Callable[[SweepState], None] | None = None,
    poll: float = 0.25,
    max_steps: int | None = None,
) -> SweepState:
    """Run every unfinished point on ``client``; returns the state with one row per point (by short hash).

    Finished points (see :func:`nqf.app._sweep.is_finished`) are read, not rerun, and their files
    are not touched.  Invalid points are recorded as failed without running.  ``on_point(point, row)``
    is called once per point as it finishes; ``on_tick(state)`` every ``poll`` seconds.  ``max_steps`` caps the
    GD loops of every point (:func:`run_point`).
    """
    root = Path(os.path.abspath(root))  # the workers (in their own working directories) write here
    state = SweepState(total=len(points))
    futures = {}
    for pt in points:
        if not pt.valid:
            row = {
                "status": "failed",
                "wall_seconds": 0.0,
                "error_type": "ConfigError",
                "error": pt.error,
                "checks": [],
                "metrics": {},
                "reused": False,
            }
            _finish(state, pt, row, on_point)
        elif is_finished(root, pt):
            row = finished_rows([pt], root)[pt.short]
            state.skipped += 1
            _finish(state, pt, row, on_point)
        else:
            key = f"nqf-point-{pt.short}-{uuid.uuid4().hex[:8]}"
            fut = client.submit(run_point, pt.config, str(point_dir(root, pt)), max_steps, key=key, pure=False)
            futures[fut] = pt
    pending = set(futures)
    last_running = 0.0
    lost_since: float | None = None
    try:
        while pending:
            for fut in [f for f in pending if f.done()]:
                pending.discard(fut)
                pt = futures[fut]
                try:
                    row = _checked_row(root, pt, fut.result())
                except (KeyboardInterrupt, SystemExit):
                    raise
                except BaseException as exc:  # noqa: BLE001 - KilledWorker, a cancelled future (scheduler lost)
                    row = _lost_row(root, pt, type(exc).__name__, str(exc))
                row["reused"] = False
                _finish(state, pt, row, on_point)
            if time.perf_counter() - last_running > 1.0:
                last_running = time.perf_counter()
                state.running = _running(client, pending)
                lost_since = None if _scheduler_alive(client) else (lost_since or time.perf_counter())
                if lost_since is not None and time.perf_counter() - lost_since > SCHEDULER_LOST_AFTER:
                    for fut in list(pending):
                        pending.discard(fut)
                        row = _lost_row(
                            root,
                            futures[fut],
                            "SchedulerLost",
                            "the Dask scheduler stopped answering; rerun the sweep to finish this point",
                            status="interrupted",
                        )
                        _finish(state, futures[fut], dict(row, reused=False), on_point)
            if on_tick is not None:
                on_tick(state)
            if pending:
                time.sleep(poll)
    except BaseException:
        try:
            client.cancel(list(pending))
        except (OSError, RuntimeError, ValueError):  # the scheduler may be gone; the interrupt is what matters
            pass
        raise
    state.running = 0
    if on_tick is not None:
        on_tick(state)
    return state


def _running(client, pending) -> int:
    try:
        processing = client.processing()
    except (OSError, RuntimeError, TimeoutError):  # a lost scheduler (CommClosedError is an OSError): cosmetic
        return 0
    keys = {f.key for f in pending}
    return sum(1 for tasks in processing.values() for k in tasks if k in keys)


def _finish(state: SweepState, pt: Point, row: dict, on_point) -> None:
    state.rows[pt.short] = row
    state.done += 1
    if row["status"] != "complete":
        state.failed += 1
    if on_point is not None:
        on_point(pt, row)
