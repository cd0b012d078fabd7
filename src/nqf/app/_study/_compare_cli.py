"""``nqf compare``: a run's own loss log judged against the forecast of its model, data and optimiser.

Exit codes: 0 judged (whatever the verdict); 2 bad input (a log, model, data or flag nqf cannot use: one line
on stderr, nothing written); 1 a failure of nqf's own.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from ..._text import terminal_echo
from ._cli_exit import analyze_params, fail as _fail

__all__ = ["register_compare", "compare_run"]

_LOG = typer.Option(
    ..., "--log", help="The run's loss log: a .csv (step, loss), a trainer_state.json or TensorBoard files."
)
_KEY = typer.Option(None, "--key", help="The loss column or tag (default: loss, train_loss, train/loss, …).")
_LR = typer.Option(..., "--lr", help="The step your loop used (on the --loss below).")
_START = typer.Option("weights", "--start", help="weights (the factory's model as it started training) or eps.")
_LOSS = typer.Option("mse", "--loss", help="Your loss: mse (torch.nn.MSELoss) or half_mse ((1/N) Σ ½‖f − y‖²).")
_FIGURE = typer.Option(None, "--figure", help="Where to draw the figure (default: LOG's name + '.forecast.png').")


def compare_run(
    params, log, *, key=None, seed=0, start="weights", momentum=0.0, batch_size=None, loss="mse", tolerance=0.1
):
    """``(forecast, loss log, judgement)`` of ``nqf compare`` (``params``: analyze's validated flags).

    Raises
    ------
    NQFError
        A log, model, data or setting it cannot use.
    """
    from .._data import read_loss_log
    from ._predict_only import predict_only

    curve = read_loss_log(log, key=key)  # a bad log fails before any model is built
    fc = predict_only(params, seed=seed, start=start, momentum=momentum, batch_size=batch_size, loss=loss)
    return fc, curve, fc.judge(curve.steps, curve.loss, tolerance=tolerance)


def _verdict(fc, j) -> str:
    import numpy as np

    reached = fc.trusted & np.isfinite(j.measured)
    if not fc.trusted.any():
        return "verdict: no drop is trusted (each drop's reason is above); the comparison is shown, not judged"
    if not reached.any():
        return "verdict: the log does not reach any trusted drop"
    worst = float(abs(j.errors[reached]).max())
    word = "within" if j.passed else "NOT within"
    return f"verdict: the trusted drops the log reaches are {word} {j.tolerance:.0%} (largest error {worst:.1%})"


def register_compare(app: typer.Typer) -> None:
    """Add the ``compare`` command to ``app``."""

    @app.command("compare")
    def compare_cmd(
        model: str = typer.Option(..., "--model", help="FILE.py:FACTORY (your model as it starts training) or a spec."),
        data: str = typer.Option(..., "--data", help="The data your loop trained on (as nqf analyze --data)."),
        target: str | None = typer.Option(None, "--target", help="CSV target column(s), names or 0-based indices."),
        task: str = typer.Option("auto", "--task", help="classification, regression, or auto (as nqf analyze)."),
        log: Path = _LOG,
        key: str | None = _KEY,
        lr: float = _LR,
        momentum: float = typer.Option(0.0, "--momentum", help="Heavy-ball momentum of your optimiser."),
        batch_size: int | None = typer.Option(None, "--batch-size", help="Your minibatch size."),
        loss: str = _LOSS,
        start: str = _START,
        eps: float = typer.Option(1e-6, "--eps", help="With --start eps: M(0) = εI."),
        units: str | None = typer.Option(None, "--units", help="Layer of units (default: the first found)."),
        no_standardize: bool = typer.Option(False, "--no-standardize", help="Keep the inputs as they are."),
        figure: Path | None = _FIGURE,
        force: bool = typer.Option(False, "--force", help="Overwrite an existing figure."),
        as_json: bool = typer.Option(False, "--json", help="Print the forecast and the judgement as JSON."),
        seed: int = typer.Option(0, "--seed", min=0, help="Seed of the model factory."),
    ):
        """Judge a run's own loss log against the forecast of its model, data and optimiser (nothing trained)."""
        from ...errors import NQFError

        params = analyze_params(
            model=model,
            data=data,
            target=target,
            task=task,  # type: ignore[arg-type]  # checked by pydantic: one line naming --task
            units=units,
            eps=eps,
            lr=lr,
            standardize=not no_standardize,
        )
        out = figure if figure is not None else Path(f"{log.name}.forecast.png")
        if out.exists() and not force or out.is_symlink():
            _fail(f"--figure: {out} exists (or is a link); pass --force to overwrite a file, or another --figure")
        try:
            fc, curve, j = compare_run(
                params, log, key=key, seed=seed, start=start, momentum=momentum, batch_size=batch_size, loss=loss
            )
        except NQFError as exc:
            _fail(str(exc))
        _write_figure(fc, curve, j, out)
        if as_json:
            body = {
                "forecast": fc.to_dict(),
                "log": {"path": curve.path, "format": curve.format, "key": curve.key},
                "judgement": j.to_dict(),
                "figure": str(out),
            }
            terminal_echo(json.dumps(body, indent=2))
            return
        for line in [
            *fc.lines(),
            f"log: {curve.path} ({curve.format}, {curve.key!r}, {curve.steps.size} points)",
            *j.lines(),
            _verdict(fc, j),
            f"figure: {out}",
        ]:
            terminal_echo(line)


def _write_figure(fc, curve, j, out: Path) -> None:
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .._report import atomic_write_bytes
    from ._figures import forecast_figure

    fig = forecast_figure(fc, curve.steps, curve.loss, j, title=f"{Path(curve.path).name} against its forecast")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(out, buf.getvalue())
