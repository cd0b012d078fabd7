"""``nqf analyze``: the command (registered on the main typer app by :func:`register`).

Exit codes: 0 done; 2 bad input (data, model, units, flags: one line on stderr,
nothing is run); 1 the analysis failed while running; 130 interrupted.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from ..._limits import DEFAULT_TIMEOUT, MAX_STEPS, MAX_THREADS
from ..._text import terminal_echo
from ._cli_exit import analyze_params, fail as _fail

__all__ = ["register_cli", "MAX_STEPS", "MAX_THREADS"]


_TIMEOUT = typer.Option(
    DEFAULT_TIMEOUT,
    "--timeout",
    help="Seconds each call into the model file may take during the input checks (import, factory, "
    "one forward over the data).",
)
_LIST_UNITS = typer.Option(
    False, "--list-units", help="List the model's layers of units (name, kind, units, p) and exit."
)
# `--predict-only` and the user's optimiser (nqf.app._study._predict_only)
_PREDICT_ONLY = typer.Option(
    False, "--predict-only", help="Predict the staircase and each drop's step; train nothing (seconds)."
)
_START = typer.Option(
    "eps",
    "--start",
    help="With --predict-only: eps (M(0) = εI, analyze's start) or weights (the factory's own weights).",
)
_MOMENTUM = typer.Option(0.0, "--momentum", help="With --predict-only: heavy-ball momentum of the steps --lr.")
_BATCH_SIZE = typer.Option(None, "--batch-size", help="With --predict-only: minibatch size (times as full batch).")
_LOSS = typer.Option(
    "half_mse",
    "--loss",
    help="With --predict-only: the loss --lr steps on: half_mse ((1/N) Σ ½‖f − y‖², analyze's) or mse "
    "(torch.nn.MSELoss, mean over samples and outputs).",
)


def register_cli(app: typer.Typer) -> None:
    """Add the ``analyze`` and ``compare`` commands to ``app``."""
    from ._compare_cli import register_compare

    register_compare(app)
    _register_analyze(app)


def _register_analyze(app: typer.Typer) -> None:
    """Add the ``analyze`` command to ``app``."""

    @app.command("analyze")
    def analyze_cmd(
        model: str = typer.Option(
            "mlp:width=256,act=tanh",
            "--model",
            help="FILE.py:FACTORY or a built-in spec mlp:width=INT,act=NAME[,bias=true].",
        ),
        data: str = typer.Option(
            ...,
            "--data",
            help="digits, iris, wine, breast_cancer, diabetes, linnerud, or a .npz (X, Y) / .csv / .pt file.",
        ),
        target: str | None = typer.Option(None, "--target", help="CSV target column(s), names or 0-based indices."),
        task: str = typer.Option(
            "auto", "--task", help="classification, regression, or auto: inferred from the targets (docs/analyze.md)."
        ),
        units: str | None = typer.Option(None, "--units", help="Layer of units to analyse (default: first found)."),
        eps: float = typer.Option(1e-6, "--eps", help="Initial scale: M(0) = εI."),
        lr: float | None = typer.Option(None, "--lr", help="GD step (default 0.02 / largest escape rate)."),
        steps: int | None = typer.Option(None, "--steps", help="GD steps (default: past the last drop)."),
        max_steps: int = typer.Option(
            MAX_STEPS,
            "--max-steps",
            min=1,
            help="Refuse a run of more GD steps than this (given by --steps or derived from --lr).",
        ),
        subset: int | None = typer.Option(None, "--subset", help="Analyse a random subset of this many samples."),
        no_standardize: bool = typer.Option(False, "--no-standardize", help="Keep the inputs as they are."),
        out: Path | None = typer.Option(None, "--out", help="Run directory (default: runs/analyze-TIMESTAMP)."),
        force: bool = typer.Option(False, "--force", help="Overwrite an existing run directory."),
        as_json: bool = typer.Option(False, "--json", help="Print the analysis as JSON."),
        seed: int = typer.Option(0, "--seed", min=0, help="Seed of the model factory and the initial frame."),
        threads: int = typer.Option(1, "--threads", min=1, max=MAX_THREADS, help="CPU threads for torch."),
        timeout: float = _TIMEOUT,
        list_units: bool = _LIST_UNITS,
        predict_only: bool = _PREDICT_ONLY,
        start: str = _START,
        momentum: float = _MOMENTUM,
        batch_size: int | None = _BATCH_SIZE,
        loss: str = _LOSS,
    ):
        """Your model on your data: predicted plateaus and drop times, NQF and real training, verdict."""
        import datetime as _dt

        import torch

        from ._output import AnalyzeExperiment

        torch.set_num_threads(threads)
        params = analyze_params(
            model=model,
            data=data,
            target=target,
            task=task,  # type: ignore[arg-type]  # checked by pydantic: one line naming --task
            units=units,
            eps=eps,
            lr=lr,
            steps=steps,
            max_steps=max_steps,
            subset=subset,
            standardize=not no_standardize,
        )
        if _check_input(params, seed, timeout, list_units):
            return
        if predict_only:
            opts = {"start": start, "momentum": momentum, "batch_size": batch_size, "loss": loss}
            return _predict_only(params, seed, as_json, opts)
        log = (lambda s: None) if as_json else (lambda s: terminal_echo(s, err=True))
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        out = Path(out) if out else Path("runs") / f"analyze-{stamp}"
        exp = AnalyzeExperiment(log=log)
        results = _run(exp, params, out, seed=seed, force=force, as_json=as_json)
        _report(exp.analysis, out, results, as_json)


def _predict_only(params, seed: int, as_json: bool, opts: dict) -> None:
    """``--predict-only``: :func:`nqf.app._study._predict_only.predict_only_cmd` with the optimiser flags ``opts``."""
    from ._predict_only import predict_only_cmd

    predict_only_cmd(
        params,
        seed=seed,
        as_json=as_json,
        fail=_fail,
        start=str(opts["start"]),
        momentum=float(opts["momentum"]),
        batch_size=opts["batch_size"],
        loss=str(opts["loss"]),
    )


def _check_input(params, seed: int, timeout: float, list_units: bool) -> bool:
    """Everything that can be wrong with the input fails here, before any run directory exists; each call into
    the model file gets at most ``--timeout`` seconds.  True when done (``--list-units`` printed)."""
    from ..._usercode import check_timeout, time_budget
    from ...errors import NQFError
    from ._output import load_data
    from ._pipeline import prepare_analysis

    try:
        budget = time_budget(check_timeout(timeout))
    except NQFError as exc:
        _fail(str(exc))
    if list_units:
        with budget:
            _list_units(params, seed)
        return True
    _check_steps(params.steps, params.max_steps, params.lr)
    try:
        with budget:
            ds = load_data(params, seed)
            prepare_analysis(params.model, ds, units=params.units, seed=seed)
    except NQFError as exc:
        _fail(str(exc))
    return False


def _report(a, out: Path, results: dict, as_json: bool) -> None:
    """The analysis on stdout: JSON (``--json``) or the printed tables and the verdict, then the run directory."""
    from ._output import print_analysis

    assert a is not None  # set by a complete run
    if as_json:
        terminal_echo(
            json.dumps(
                {"analysis": a.to_dict(), "run_directory": str(out), "wall_seconds": results["wall_seconds"]},
                indent=2,
            )
        )
        return
    print_analysis(a, terminal_echo)
    terminal_echo("")
    terminal_echo(f"run directory: {out}   report: {out / 'report.html'}   ({results['wall_seconds']} s)")


def _list_units(params, seed: int) -> None:
    """``--list-units``: load the data (for the sizes) and the model, print every layer of units; run nothing."""
    from ...errors import NQFError
    from ._discover import refusal_listing, unit_listing
    from ._models import build_model
    from ._output import load_data

    try:
        ds = load_data(params, seed)
        module = build_model(params.model, ds.n_features, ds.n_outputs, seed=seed, n_samples=ds.n_samples)
        lines, refused = unit_listing(module), refusal_listing(module)
    except NQFError as exc:
        _fail(str(exc))
    if not lines:
        _fail(f"`model`: no interchangeable units found in {params.model}" + "".join(f"; {r}" for r in refused))
    terminal_echo(f"{len(lines)} layer(s) of units (choose one with --units LAYER_NAME):")
    for line in lines:
        terminal_echo(f"  {line}")
    if refused:
        terminal_echo(f"{len(refused)} layer(s) not offered as units:")
    for line in refused:
        terminal_echo(f"  {line}")


def _check_steps(steps: int | None, max_steps: int, lr: float | None) -> None:
    """``--steps``, or the steps ``--lr`` needs at least, past ``--max-steps``: refused before anything is loaded
    (:func:`nqf.app._study._pipeline.check_step_budget`)."""
    from ...errors import InvalidParameterError
    from ._pipeline import check_step_budget

    if steps is not None and steps > max_steps:
        _fail(f"--steps: at most --max-steps={max_steps} GD steps (raise --max-steps to allow more); found {steps}")
    try:
        check_step_budget(steps, max_steps, lr)
    except InvalidParameterError as exc:
        _fail(str(exc))


def _run(exp, params, out: Path, *, seed: int, force: bool, as_json: bool) -> dict:
    """Run the analysis experiment into ``out``; failures become exit codes (1, 2; 130 when interrupted)."""
    from ...errors import NQFError
    from .._experiments import run_experiment

    try:
        return run_experiment(
            exp, params, out, seed=seed, force=force, show_progress=(not as_json) and sys.stderr.isatty()
        )
    except NQFError as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        terminal_echo(f"\ninterrupted: partial results kept in {out}", err=True)
        raise typer.Exit(130) from None
    # anything else reaches the last-resort handler of `nqf` (nqf.app._cli): out of memory and an unwritable
    # --out are input faults there (exit 2, naming the path), everything else is ours (exit 1)
