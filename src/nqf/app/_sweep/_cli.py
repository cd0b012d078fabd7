"""The ``nqf sweep`` command (registered on the ``nqf`` typer app by :func:`register_cli`).

Exit codes: 0 every point finished; 3 some points failed (their errors are in
the sweep table); 2 bad flags or config, Dask missing, or another sweep running
in the same directory; 130 interrupted (finished points are kept, a rerun
finishes the rest).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import typer

from ..._limits import MAX_STEPS
from ..._text import terminal_echo, terminal_text

__all__ = ["register_cli", "sweep"]

EXIT_SOME_FAILED = 3


def _fail(message: str, code: int = 2):
    terminal_echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _swept_text(point) -> str:
    parts = [f"{k}={json.dumps(v) if isinstance(v, (list, dict)) else v}" for k, v in point.swept.items()]
    return " ".join(parts + [f"seed={point.seed}"])


def _plain(value) -> str:
    """User text inside a rich markup line: terminal controls shown (:func:`terminal_text`), brackets escaped."""
    from rich.markup import escape

    return escape(terminal_text(value))


def _point_line(point, row) -> str:
    """The point's line for the rich console: nqf's own markup around user text that is shown as typed."""
    if row["status"] == "complete":
        checks = [c for c in row["checks"] if c.get("measured") is not None][:3]
        from ._table import quantity_name

        vals = "  ".join(f"{quantity_name(c['name'])}={c['measured']:.4g}" for c in checks)
        how = "reused" if row.get("reused") else f"{row['wall_seconds']} s"
        return f"[green]done[/]   {_plain(f'{point.short}  {_swept_text(point)}  ({how})  {vals}')}"
    err = f"{row.get('error_type') or ''}: {row.get('error') or ''}".strip(": ")
    return f"[red]failed[/] {_plain(f'{point.short}  {_swept_text(point)}  {err}')}"


def sweep(
    config: Path = typer.Argument(..., help="TOML config file (its \\[sweep] table, if any, is read too)."),
    grid: list[str] | None = typer.Option(None, "--grid", help="KEY=V1,V2,… (repeatable; Cartesian product)."),
    zip_: list[str] | None = typer.Option(None, "--zip", help="KEY=V1,V2,… (repeatable; varied together)."),
    seeds: str | None = typer.Option(None, "--seeds", help="Seeds: 0-9, 0,3,7 or 0-3,7."),
    set_: list[str] | None = typer.Option(None, "--set", help="KEY=VALUE override of the base config."),
    out: Path | None = typer.Option(None, "--out", help="Sweep directory (default: sweeps/CONFIG-NAME)."),
    workers: int | None = typer.Option(
        None, "--workers", min=1, help="Local worker processes (default: number of cores)."
    ),
    scheduler: str | None = typer.Option(
        None, "--scheduler", help="'local' (a LocalCluster) or tcp://HOST:PORT (a Dask cluster)."
    ),
    retries: int = typer.Option(3, "--retries", min=0, help="Reruns of a point whose worker died."),
    dry_run: bool = typer.Option(False, "--dry-run", help="List the points and exit."),
    as_json: bool = typer.Option(False, "--json", help="Print the final table as JSON (no progress)."),
    max_steps: int = typer.Option(
        MAX_STEPS, "--max-steps", min=1, help="Refuse a point whose GD loops take more steps than this."
    ),
):
    """Run an experiment over a grid of parameters and seeds, in parallel (Dask), one run directory per point.

    Exit codes: 0 all points finished, 3 some failed, 2 bad input or Dask missing, 130 interrupted.
    """
    from ...errors import SweepError
    from .._experiments import ConfigError, apply_overrides, parse_config, parse_set, read_config_data
    from ._execute import DaskMissingError, check_scheduler, require_dask
    from ._grid import combine, parse_assignments, sweep_from_table
    from ._points import build_points

    if not dry_run:
        try:
            require_dask()
        except DaskMissingError as exc:
            _fail(str(exc))
    try:
        data = read_config_data(config)
        table = data.pop("sweep", None)
        if set_:
            data = apply_overrides(data, parse_set(set_))
        parse_config(data, str(config))
        spec = combine(
            sweep_from_table(table), parse_assignments(grid, "--grid"), parse_assignments(zip_, "--zip"), seeds
        )
        points = build_points(data, spec)
    except (ConfigError, SweepError) as exc:
        _fail(str(exc))
    try:
        check_scheduler(scheduler)
    except SweepError as exc:
        _fail(str(exc))
    if scheduler not in (None, "local") and workers is not None:
        _fail("`--workers` sets the size of a local cluster; with `--scheduler tcp://…` the cluster has its own")
    root = out if out is not None else Path("sweeps") / config.stem
    if dry_run:
        for pt in points:
            terminal_echo(f"{pt.short}  {_swept_text(pt)}" + (f"  invalid: {pt.error}" if pt.error else ""))
        terminal_echo(f"{len(points)} points → {root}/points/")
        return
    code = _run(
        points,
        spec,
        data,
        root,
        scheduler=scheduler,
        workers=workers,
        retries=retries,
        as_json=as_json,
        max_steps=max_steps,
    )
    raise typer.Exit(code)


def _run(points, spec, base, root: Path, *, scheduler, workers, retries, as_json, max_steps=None) -> int:
    from rich.console import Console

    from ...errors import SweepError
    from ._execute import execute, finished_rows, open_client
    from ._points import is_finished
    from ._report import write_sweep_report
    from ._table import build_table, write_table

    shown = root
    root, lock = _claim_root(root)  # absolute: the workers of a cluster write where the user named, not in their cwd
    experiment = base["experiment"]
    console = Console(stderr=True, highlight=False)
    state = None
    done: dict[str, dict] = {}
    try:
        done = finished_rows(points, root)  # what is on disk: a killed client's sweep.json never forgets it
        write_table(root, build_table(points, done, experiment=experiment, base=base, spec=spec, root=root))
        progress = _progress(console, as_json)
        with progress:
            task = progress.add_task("sweep", total=len(points), failed=0, running=0)

            def on_point(pt, row):
                done[pt.short] = row
                if row["status"] == "complete" and not row.get("reused"):
                    write_table(root, build_table(points, done, experiment=experiment, base=base, spec=spec, root=root))
                if not as_json:
                    progress.console.print(_point_line(pt, row), soft_wrap=True)

            def on_tick(st):
                progress.update(task, completed=st.done, failed=st.failed, running=st.running)

            try:
                if any(pt.valid and not is_finished(root, pt) for pt in points):
                    with open_client(scheduler, workers, retries) as client:
                        state = execute(points, root, client, on_point=on_point, on_tick=on_tick)
                else:  # nothing to run: no cluster to start
                    state = execute(points, root, None, on_point=on_point, on_tick=on_tick)
            except SweepError as exc:
                _fail(str(exc))
            except OSError as exc:
                _fail(
                    f"`--scheduler` {scheduler}: the Dask scheduler could not be reached or stopped answering "
                    f"({exc}); finished points are kept in {shown}/sweep.json, rerun the same command to finish "
                    "the rest"
                )
    except KeyboardInterrupt:
        console.print(
            _plain(
                f"\ninterrupted: finished points are kept in {root}/points; rerun the same command to finish the rest"
            )
        )
        return 130
    finally:
        if state is not None or (root / "sweep.json").exists():
            rows = _final_rows(points, root, done, state)
            doc = build_table(points, rows, experiment=experiment, base=base, spec=spec, root=root)
            write_table(root, doc)
            write_sweep_report(root, doc)
        lock.release()
    counts = doc["counts"]
    if as_json:
        terminal_echo(json.dumps(doc, indent=2))
    else:
        summary = (
            f"{counts['total']} points: {counts['complete']} complete ({counts['reused']} reused), "
            f"{counts['failed']} failed → {root / 'sweep.csv'}, {root / 'report.html'}"
        )
        console.print(_plain(summary), soft_wrap=True)
    return 0 if counts["failed"] == 0 and counts["complete"] == counts["total"] else EXIT_SOME_FAILED


def _progress(console, as_json: bool):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    return Progress(
        TextColumn("[bold]sweep"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("failed {task.fields[failed]}  running {task.fields[running]}"),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
        disable=as_json,
        transient=False,
    )


def _final_rows(points, root: Path, done: dict, state) -> dict:
    """The rows to record at the end: those seen, then the disk's word (a point complete there is complete)."""
    from ._execute import finished_rows

    rows = {**done, **(state.rows if state is not None else {})}
    for short, row in finished_rows(points, root).items():
        if rows.get(short, {}).get("status") != "complete":
            rows[short] = dict(row, reused=False)
    return rows


def _claim_root(root: Path):
    """``(directory, held lock)``: the sweep directory ``root`` made absolute, created, marked and locked;
    refuses (exit 2) a folder that is not a sweep of nqf and holds files (nothing nqf did not write is
    overwritten), and a directory another `nqf sweep` is writing."""
    from ...errors import NQFError
    from .._report import hold_lock
    from ._table import SWEEP_MARKER, is_sweep_directory, mark_sweep_directory

    absolute = Path(os.path.abspath(root))
    if absolute.exists() and not absolute.is_dir():
        _fail(f"`--out` {root} exists and is not a directory")
    if absolute.is_dir() and any(absolute.iterdir()) and not is_sweep_directory(absolute):
        _fail(
            f"`--out` {root} is not a sweep directory (no {SWEEP_MARKER} marker) and is not empty: nqf never "
            "overwrites files it did not write, so nothing was changed; choose a new or empty --out"
        )
    try:
        absolute.mkdir(parents=True, exist_ok=True)
        mark_sweep_directory(absolute)
    except OSError as exc:
        _fail(f"`--out` {root}: cannot create the sweep directory ({exc.strerror or exc})")
    try:  # removed again when the sweep ends (HeldLock.release)
        lock = hold_lock(
            absolute / ".sweep.lock", f"another `nqf sweep` is running in {root}; wait for it or use another --out"
        )
    except NQFError as exc:
        _fail(str(exc))
    return absolute, lock


def register_cli(app: typer.Typer) -> None:
    """Add the ``sweep`` command to the ``nqf`` app."""
    app.command("sweep")(sweep)
