"""The ``nqf`` command line: ``demo``, ``run``, ``list``, ``report``.

Exit codes: 0 success; 2 bad flags, bad config or a run directory that would be
overwritten; 130 interrupted (partial results kept); 1 the experiment failed.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import sys
from pathlib import Path
from typing import Optional

import typer

from . import __version__

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Neural Quadratic Forms: structure matrices, closed dynamics and staircase predictions.")


def _version(value: bool):
    if value:
        typer.echo(f"nqf {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: Optional[bool] = typer.Option(None, "--version", callback=_version, is_eager=True,
                                                  help="Print the version and exit.")):
    """Neural Quadratic Forms."""


def _fail(message: str, code: int = 2):
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _default_out(name: str) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{name}-{stamp}"


def _print_human(results: dict, rundir: Path) -> None:
    typer.echo(f"{results['experiment']}: {results['description']}")
    for line in results.get("summary", []):
        typer.echo(f"  {line}")
    if results["checks"]:
        typer.echo("")
        w = max(len(c["name"]) for c in results["checks"])
        typer.echo(f"  {'quantity':<{w}}  {'predicted':>11}  {'measured':>11}  {'rel.err':>8}  {'tol':>6}  ok")
        for c in results["checks"]:
            def f(v):
                return "—" if v is None else f"{v:.4g}"
            ok = {True: "yes", False: "NO", None: ""}[c["passed"]]
            tol = "—" if c["tolerance"] is None else f"{c['tolerance']:.3g}"
            typer.echo(f"  {c['name']:<{w}}  {f(c['predicted']):>11}  {f(c['measured']):>11}  "
                       f"{f(c['relative_error']):>8}  {tol:>6}  {ok}")
    typer.echo("")
    typer.echo(f"run directory: {rundir}   report: {rundir / 'report.html'}   ({results['wall_seconds']} s)")


def _execute(exp, params, *, out, seed, device, force, resume, as_json, threads) -> None:
    import torch

    from .experiments.runner import run_experiment
    from .report.rundir import RunDirectoryExistsError

    # The built-in experiments are many small tensor operations, for which one thread is fastest
    # (and a busy second core makes torch's thread pool stall); --threads raises it for big runs.
    torch.set_num_threads(threads)

    out = Path(out) if out else _default_out(exp.name)
    show = (not as_json) and sys.stderr.isatty()
    try:
        results = run_experiment(exp, params, out, seed=seed, device=device, force=force, resume=resume,
                                 show_progress=show)
    except RunDirectoryExistsError as exc:
        _fail(str(exc))
    except ValueError as exc:
        if str(exc).startswith("--device"):
            _fail(str(exc))
        raise
    except KeyboardInterrupt:
        typer.echo(f"\ninterrupted: partial results kept in {out}; continue with `nqf run CONFIG --out {out} "
                   f"--resume` or rebuild the report with `nqf report {out}`", err=True)
        raise typer.Exit(130)
    except Exception as exc:  # noqa: BLE001 - one line for the user; NQF_TRACEBACK=1 shows the traceback
        if os.environ.get("NQF_TRACEBACK"):
            raise
        _fail(f"experiment {exp.name!r} failed: {type(exc).__name__}: {exc} (what was finished is in {out}; "
              "set NQF_TRACEBACK=1 for the traceback)", code=1)
    if as_json:
        typer.echo(json.dumps(results, indent=2))
    else:
        _print_human(results, out)


_OUT = typer.Option(None, "--out", help="Run directory (default: runs/NAME-TIMESTAMP).")
_FORCE = typer.Option(False, "--force", help="Overwrite the files of an existing run directory.")
_RESUME = typer.Option(False, "--resume", help="Continue an interrupted run in --out, reusing finished parts.")
_JSON = typer.Option(False, "--json", help="Print the results summary as JSON (no progress bars).")
_DEVICE = typer.Option(None, "--device", help="cpu, cuda, cuda:N or auto.")
_SEED = typer.Option(None, "--seed", min=0, help="Random seed (runs are bit-for-bit reproducible on CPU).")
_THREADS = typer.Option(1, "--threads", min=1, help="CPU threads for torch (1 is fastest for small problems).")


@app.command()
def demo(out: Optional[Path] = _OUT, force: bool = _FORCE, as_json: bool = _JSON,
         seed: Optional[int] = _SEED, device: Optional[str] = _DEVICE, threads: int = _THREADS):
    """The main job: a real tanh MLP learns in steps at the predicted times (under a minute)."""
    from .experiments.base import get_experiment

    exp = get_experiment("demo")
    _execute(exp, exp.Params(), out=out, seed=0 if seed is None else seed, device=device or "cpu", force=force,
             resume=False, as_json=as_json, threads=threads)


@app.command("run")
def run_cmd(config: Path = typer.Argument(..., help="TOML config file (see `nqf list`)."),
            out: Optional[Path] = _OUT, force: bool = _FORCE, resume: bool = _RESUME, as_json: bool = _JSON,
            seed: Optional[int] = _SEED, device: Optional[str] = _DEVICE, threads: int = _THREADS):
    """Run a named experiment from a TOML config file."""
    from .experiments.config import ConfigError, load_config

    try:
        cfg, exp, params = load_config(config)
    except ConfigError as exc:
        _fail(str(exc))
    _execute(exp, params, out=out, seed=cfg.seed if seed is None else seed, device=device or cfg.device,
             force=force, resume=resume, as_json=as_json, threads=threads)


@app.command("list")
def list_cmd(as_json: bool = _JSON):
    """The named experiments, with one-line descriptions."""
    from .experiments.base import REGISTRY, get_experiment

    get_experiment("demo")  # loads the catalogue
    if as_json:
        typer.echo(json.dumps({n: {"description": e.description, "reproduces": e.reproduces,
                                   "params": e.Params().model_dump(mode="json")}
                               for n, e in sorted(REGISTRY.items())}, indent=2))
        return
    w = max(len(n) for n in REGISTRY)
    for name, exp in sorted(REGISTRY.items()):
        typer.echo(f"{name:<{w}}  {exp.description}")


@app.command()
def report(rundir: Path = typer.Argument(..., help="A run directory written by `nqf run` or `nqf demo`.")):
    """Rebuild report.html from a run directory's saved results."""
    from pydantic import ValidationError

    from .report.html import rebuild_report

    try:
        path = rebuild_report(rundir)
    except FileNotFoundError as exc:
        _fail(str(exc))
    except ValidationError as exc:
        _fail(f"{rundir}/results.json does not match the results schema: {exc.errors()[0]['msg']}")
    typer.echo(f"report: {path}")


# Commands that live with their own package register themselves here: each module defines
# ``register(app)`` and imports torch and friends only inside its commands (``nqf --version`` stays fast).
_COMMAND_MODULES = ("nqf.sweep.cli", "nqf.analyze.cli")


def _register_commands() -> None:
    import importlib

    for name in _COMMAND_MODULES:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and name.startswith(exc.name):
                continue  # that package is not part of this installation (yet)
            raise
        mod.register(app)


_register_commands()


def main() -> None:  # pragma: no cover - entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
