"""The ``nqf`` command line: ``demo``, ``run``, ``list``, ``report``.

Error contract (by exception *type*, in :class:`_Group`, for every command):

* 0 success;
* 2 bad input: bad flags, a bad config, any :class:`nqf.errors.NQFError` (bad
  parameters, a run directory that would be overwritten or is locked, a resume
  that would mix runs, a malformed ``results.json``, a diverged run): one line
  ``error: …`` on stderr, never a traceback;
* 130 interrupted by Ctrl-C (what was finished is kept, with a ``--resume`` hint);
* 1 anything else (a bug, an unexpected failure): one line ``error: …``; the
  traceback with ``nqf --debug …`` or ``NQF_TRACEBACK=1``.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import json
import os
import shlex
import sys
from pathlib import Path

import typer
from typer.core import TyperGroup

from .. import __version__
from .._limits import MAX_STEPS, MAX_THREADS
from .._text import terminal_echo
from ..errors import NQFError

_DEBUG = {"on": False}


def _cli_exceptions() -> tuple:
    """Exit/usage exceptions of click and of typer's own copy of click: passed through untouched."""
    import importlib

    out = [typer.Exit, typer.Abort]
    for name in ("typer._click.exceptions", "click.exceptions"):
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        out += [getattr(mod, n) for n in ("ClickException", "Exit", "Abort") if isinstance(getattr(mod, n, None), type)]
    return tuple(out)


_PASS_THROUGH = _cli_exceptions()


def _usage_errors() -> tuple[tuple, tuple]:
    """(usage errors shown as one line, usage errors left to click: `no_args_is_help`)."""
    import importlib

    usage, keep = [], []
    for name in ("typer._click.exceptions", "click.exceptions"):
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        for attr, bucket in (("UsageError", usage), ("NoArgsIsHelpError", keep)):
            if isinstance(getattr(mod, attr, None), type):
                bucket.append(getattr(mod, attr))
    return tuple(usage), tuple(keep)


_USAGE, _HELP = _usage_errors()


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _debug() -> bool:
    return _DEBUG["on"] or bool(os.environ.get("NQF_TRACEBACK"))


class _Group(TyperGroup):
    """Maps exception types to exit codes for every command (see the module docstring)."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except _HELP:
            raise
        except _USAGE as exc:  # bad flags of a command: one line, exit 2
            cmd = exc.ctx.command_path if getattr(exc, "ctx", None) is not None else "nqf"
            terminal_echo(f"error: {_one_line(exc.format_message())} (see `{cmd} --help`)", err=True)
            raise typer.Exit(2) from None
        except _PASS_THROUGH:
            raise
        except KeyboardInterrupt:
            terminal_echo("\ninterrupted", err=True)
            raise typer.Exit(130) from None
        except BrokenPipeError:  # the reader went away (`nqf list | head`): not an error of ours
            _silence_stdout()
            raise typer.Exit(0) from None
        except NQFError as exc:
            if _debug():
                raise
            terminal_echo(f"error: {_one_line(exc)}{_kept(exc)}", err=True)
            raise typer.Exit(2) from None
        except Exception as exc:  # noqa: BLE001 - the last-resort handler: one line; --debug shows the traceback
            if _debug():
                raise
            fault = _input_fault(exc)
            if fault is not None:
                terminal_echo(f"error: {fault}{_kept(exc)}", err=True)
                raise typer.Exit(2) from None
            terminal_echo(
                f"error: {type(exc).__name__}: {_one_line(exc)}{_kept(exc)} (run `nqf --debug …` or set "
                "NQF_TRACEBACK=1 for the traceback)",
                err=True,
            )
            raise typer.Exit(1) from None


#: OSErrors that say what is wrong with a path the user gave (``--out`` on a read-only file system, a name
#: too long, a file where a folder is needed, a full disk): input faults, exit 2, naming the path.
_PATH_ERRNOS = frozenset(
    getattr(errno, n)
    for n in ("EROFS", "EACCES", "EPERM", "ENAMETOOLONG", "ENOSPC", "EDQUOT", "ENOTDIR", "EISDIR", "EEXIST", "ELOOP")
    if hasattr(errno, n)
)


def _input_fault(exc: BaseException) -> str | None:
    """The one-line message of an exception that is the input's fault (exit 2), or None (nqf's own, exit 1):
    an OSError about a path the user gave, and running out of memory for the sizes the input asks for."""
    if isinstance(exc, OSError) and exc.errno in _PATH_ERRNOS:
        name = exc.filename if exc.filename is not None else "a path given"
        return f"{name}: {exc.strerror or _one_line(exc)} (check --out and the paths given)"
    text = _one_line(exc)
    if isinstance(exc, MemoryError) or (
        isinstance(exc, RuntimeError) and ("alloc_cpu" in text or "out of memory" in text.lower())
    ):
        return (
            f"out of memory: the sizes asked for (data set, --subset, model width, --steps) need more memory than "
            f"is available ({type(exc).__name__}: {text[:200]})"
        )
    return None


def _kept(exc: BaseException) -> str:
    """`` (what was finished is in DIR)`` for a failure inside a run directory (or that the previous run was kept,
    under ``--force``), else ``""``."""
    kept = getattr(exc, "previous_run_kept", None)
    if kept is not None:
        return (
            f" ({shlex.quote(str(kept))}: the previous run is kept as it was; --force replaces a run only when "
            "the new one completes)"
        )
    rd = getattr(exc, "run_directory", None)
    return "" if rd is None else f" (what was finished is in {shlex.quote(str(rd))})"


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush does not raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    cls=_Group,
    help="Neural Quadratic Forms: structure matrices, closed dynamics and staircase predictions.",
)


def _version(value: bool):
    if value:
        terminal_echo(f"nqf {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool | None = typer.Option(
        None, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
    debug: bool = typer.Option(False, "--debug", help="Show the traceback of an unexpected error."),
):
    """Neural Quadratic Forms."""
    _DEBUG["on"] = debug


def _fail(message: str, code: int = 2):
    terminal_echo(f"error: {_one_line(message)}", err=True)
    raise typer.Exit(code)


def _default_out(name: str) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{name}-{stamp}"


def _judged(check: dict) -> str:
    """The error a check is judged by, as printed: ``rel 0.0123`` or ``abs 4.2e-05`` (an absolute check has no
    relative error to print: its reference is ~0 or its scale is absolute)."""
    err = check.get("error")
    if err is None:
        return "—"
    return f"{'abs' if check.get('kind') == 'absolute' else 'rel'} {err:.4g}"


def _print_human(results: dict, rundir: Path) -> None:
    terminal_echo(f"{results['experiment']}: {results['description']}")
    for line in results.get("summary", []):
        terminal_echo(f"  {line}")
    if results["checks"]:
        terminal_echo("")
        w = max(len(c["name"]) for c in results["checks"])
        terminal_echo(f"  {'quantity':<{w}}  {'predicted':>11}  {'measured':>11}  {'error':>14}  {'tol':>6}  ok")
        for c in results["checks"]:

            def f(v):
                return "—" if v is None else f"{v:.4g}"

            ok = {True: "yes", False: "NO", None: ""}[c["passed"]]
            tol = "—" if c["tolerance"] is None else f"{c['tolerance']:.3g}"
            terminal_echo(
                f"  {c['name']:<{w}}  {f(c['predicted']):>11}  {f(c['measured']):>11}  {_judged(c):>14}  {tol:>6}  {ok}"
            )
    terminal_echo("")
    terminal_echo(f"run directory: {rundir}   report: {rundir / 'report.html'}   ({results['wall_seconds']} s)")


def _execute(
    exp, params, *, out, seed, device, force, resume, as_json, threads, max_steps, rerun: str | None = None
) -> None:
    """Run and print; ``rerun`` is the command that repeats this run (for the ``--resume`` hint)."""
    import torch

    from ._experiments import run_experiment

    # The built-in experiments are many small tensor operations, for which one thread is fastest
    # (and a busy second core makes torch's thread pool stall); --threads raises it for big runs.
    torch.set_num_threads(threads)

    out = Path(out) if out else _default_out(exp.name)
    show = (not as_json) and sys.stderr.isatty()
    q = shlex.quote(str(out))
    try:
        results = run_experiment(
            exp,
            params,
            out,
            seed=seed,
            device=device,
            force=force,
            resume=resume,
            show_progress=show,
            max_steps=max_steps,
        )
    except KeyboardInterrupt as exc:
        if getattr(exc, "previous_run_kept", None) is not None:
            terminal_echo(
                f"\ninterrupted: --force replaces a run only when the new one completes; {q} is as it was", err=True
            )
        elif getattr(exc, "run_directory", None) is not None:
            terminal_echo(
                f"\ninterrupted: partial results kept in {q}; continue with "
                f"`{rerun or 'nqf run CONFIG'} --out {q} --resume` or rebuild the report with "
                f"`nqf report {q}`",
                err=True,
            )
        else:
            terminal_echo(f"\ninterrupted before anything was saved; {q} is as it was", err=True)
        raise typer.Exit(130) from None
    # any other failure reaches the group's handler, which adds where the finished part is (.run_directory)
    if as_json:
        terminal_echo(json.dumps(results, indent=2))
    else:
        _print_human(results, out)


def _rerun(argv: list, sets, seed, device) -> str:
    """The shell command (quoted) that repeats a run's settings, for the ``--resume`` hint."""
    for item in sets or ():
        argv += ["--set", item]
    if seed is not None:
        argv += ["--seed", str(seed)]
    if device is not None:
        argv += ["--device", device]
    return shlex.join(argv)


_OUT = typer.Option(None, "--out", help="Run directory (default: runs/NAME-TIMESTAMP).")
_FORCE = typer.Option(False, "--force", help="Overwrite the files of an existing run directory.")
_RESUME = typer.Option(False, "--resume", help="Continue an interrupted run in --out, reusing finished parts.")
_JSON = typer.Option(False, "--json", help="Print the results summary as JSON (no progress bars).")
_DEVICE = typer.Option(None, "--device", help="cpu, cuda, cuda:N or auto.")
_SEED = typer.Option(
    None, "--seed", min=0, max=2**32 - 1, help="Random seed in [0, 2**32) (runs are bit-for-bit reproducible on CPU)."
)
_THREADS = typer.Option(
    1, "--threads", min=1, max=MAX_THREADS, help="CPU threads for torch (1 is fastest for small problems)."
)
_SET = typer.Option(None, "--set", help="KEY=VALUE: override a config value, read as TOML (repeatable).")
_MAX_STEPS = typer.Option(
    MAX_STEPS, "--max-steps", min=1, help="Refuse a run whose GD loops take more steps than this (default 10⁷)."
)


@app.command()
def demo(
    out: Path | None = _OUT,
    force: bool = _FORCE,
    resume: bool = _RESUME,
    as_json: bool = _JSON,
    seed: int | None = _SEED,
    device: str | None = _DEVICE,
    threads: int = _THREADS,
    set_: list[str] | None = _SET,
    max_steps: int = _MAX_STEPS,
):
    """The main job: a real tanh MLP learns in steps at the predicted times (under a minute)."""
    from ._experiments import ConfigError, apply_overrides, parse_config, parse_set

    try:
        cfg, exp, params = parse_config(apply_overrides({"experiment": "demo"}, parse_set(set_)), "--set")
    except ConfigError as exc:
        _fail(str(exc))
    if cfg.experiment != "demo":
        _fail("--set: `experiment` cannot be changed for `nqf demo`; use `nqf run CONFIG --set …`")
    _execute(
        exp,
        params,
        out=out,
        seed=cfg.seed if seed is None else seed,
        device=cfg.device if device is None else device,
        force=force,
        resume=resume,
        as_json=as_json,
        threads=threads,
        max_steps=max_steps,
        rerun=_rerun(["nqf", "demo"], set_, seed, device),
    )


@app.command("run")
def run_cmd(
    config: Path = typer.Argument(..., help="TOML config file (see `nqf list`)."),
    out: Path | None = _OUT,
    force: bool = _FORCE,
    resume: bool = _RESUME,
    as_json: bool = _JSON,
    seed: int | None = _SEED,
    device: str | None = _DEVICE,
    threads: int = _THREADS,
    set_: list[str] | None = _SET,
    max_steps: int = _MAX_STEPS,
):
    """Run a named experiment from a TOML config file."""
    from ._experiments import ConfigError, load_config, parse_set

    try:
        cfg, exp, params = load_config(config, parse_set(set_) if set_ else None)
    except ConfigError as exc:
        _fail(str(exc))
    _execute(
        exp,
        params,
        out=out,
        seed=cfg.seed if seed is None else seed,
        device=cfg.device if device is None else device,
        force=force,
        resume=resume,
        as_json=as_json,
        threads=threads,
        max_steps=max_steps,
        rerun=_rerun(["nqf", "run", str(config)], set_, seed, device),
    )


@app.command("list")
def list_cmd(as_json: bool = _JSON):
    """The named experiments, with one-line descriptions (--json: also their claims, checks and parameters)."""
    from ._experiments import all_experiments, describe

    if as_json:  # the parameters' defaults need the experiments themselves (and torch)
        terminal_echo(
            json.dumps(
                {
                    n: {
                        "description": e.description,
                        "reproduces": e.reproduces,
                        "checks": list(getattr(e, "checks", ())),
                        "params": e.Params().model_dump(mode="json"),
                    }
                    for n, e in all_experiments().items()
                },
                indent=2,
            )
        )
        return
    descriptions = describe()  # from the catalogue: imports no experiment
    w = max(len(n) for n in descriptions)
    for name, description in descriptions.items():
        terminal_echo(f"{name:<{w}}  {description}")


@app.command()
def report(rundir: Path = typer.Argument(..., help="A run directory (`nqf run`, `nqf demo`) or sweep directory.")):
    """Redraw the figures from arrays.npz and rebuild report.html from a run directory's (or a sweep
    directory's) saved results."""
    from ._report import rebuild_report

    if not rundir.is_dir():
        _fail(f"`RUN_DIR` {rundir} {'is not a directory' if rundir.exists() else 'does not exist'}")
    if (rundir / "sweep.json").is_file():  # a sweep directory (`nqf sweep`)
        from ._sweep import rebuild_sweep_report

        try:
            terminal_echo(f"report: {rebuild_sweep_report(rundir)}")
        except ValueError as exc:
            _fail(str(exc))
        return
    from ._experiments import redraw

    drawn = redraw(rundir)  # a missing or malformed results.json: ResultsFileError, exit 2
    if drawn:
        terminal_echo(f"figures redrawn from arrays.npz: {', '.join(sorted(drawn))}")
    path = rebuild_report(rundir)
    terminal_echo(f"report: {path}")


# Commands that live with their own package register themselves here: each package exports
# ``register_cli(app)`` and imports torch and friends only inside its commands (``nqf --version`` stays fast).
_COMMAND_PACKAGES = ("nqf.app._sweep", "nqf.app._study")


def _register_commands() -> None:
    import importlib

    for name in _COMMAND_PACKAGES:
        importlib.import_module(name).register_cli(app)


_register_commands()


def main() -> None:  # pragma: no cover - entry point (tests run `python -m nqf` in a subprocess)
    """The ``nqf`` command; ends the process past any non-daemon thread the user's model code left running
    (Python's own exit would wait for it forever)."""
    try:
        app(prog_name="nqf")
    except SystemExit as exc:
        from .._usercode import alive_foreign_threads

        if alive_foreign_threads():
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            os._exit(code)
        raise


if __name__ == "__main__":  # pragma: no cover
    main()
