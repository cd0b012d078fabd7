"""An analysis as a run like every other: run directory, results.json, arrays, figures, report.html.

``nqf analyze`` runs :class:`AnalyzeExperiment` through
:func:`nqf.experiments.run_experiment` (atomic run directory, seed,
status, report); :func:`save_analysis` writes an :class:`Analysis` made in the
API the same way.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .._limits import MAX_STEPS
from ..experiments import Check, Experiment, Outcome, Params, Table
from ._result import Analysis

__all__ = ["AnalyzeParams", "AnalyzeExperiment", "fill_outcome", "save_analysis", "print_analysis"]


class AnalyzeParams(Params):
    model: str = Field(default="mlp:width=256,act=tanh", description="built-in spec or FILE.py:FACTORY")
    data: str = Field(default="digits", description="bundled name or .npz/.csv/.pt file")
    target: str | None = Field(default=None, description="CSV target columns")
    task: Literal["auto", "classification", "regression"] = Field(
        default="auto", description="classification, regression, or auto (inferred from the targets)"
    )
    units: str | None = Field(default=None, description="layer of units (default: the first found)")
    eps: float = Field(default=1e-6, gt=0, lt=1, description="initial scale: M(0) = εI")
    lr: float | None = Field(default=None, gt=0, description="GD step (default 0.02 / largest escape rate)")
    steps: int | None = Field(default=None, ge=1, description="GD steps (default: to t = 1.5 t_K + 5)")
    max_steps: int = Field(default=MAX_STEPS, ge=1, description="refuse more GD steps than this (given or from lr)")
    subset: int | None = Field(default=None, ge=1, description="random subset of the samples")
    standardize: bool = Field(default=True, description="standardise the inputs")
    one_hot: bool = Field(default=True, description="classification targets as centred one-hot")
    center: bool = Field(default=True, description="centre the targets")
    gap_tolerance: float = Field(default=0.05, gt=0, description="relative gap real vs NQF that counts as leaving it")
    flat_threshold: float = Field(default=0.25, gt=0, description="flat plateau: loss change / adjacent drop ≤ this")


def load_data(P: AnalyzeParams, seed: int = 0):
    from ..data import load_dataset

    return load_dataset(
        P.data,
        target=P.target,
        task=P.task,
        standardize=P.standardize,
        one_hot=P.one_hot,
        center=P.center,
        subset=P.subset,
        seed=seed,
    )


class AnalyzeExperiment(Experiment):
    """``nqf analyze`` as a run (not in the catalogue: its parameters name the user's model and data)."""

    name = "analyze"
    description = "your model on your data: predicted staircase, NQF simulation, real training, verdict"
    reproduces = "docs/analyze.md"
    Params = AnalyzeParams

    def __init__(self, log=None):
        self.log = log
        self.analysis: Analysis | None = None

    def run(self, params: AnalyzeParams, ctx, out: Outcome) -> None:
        from ._pipeline import analyze

        data = load_data(params, ctx.seed)
        a = analyze(
            params.model,
            data,
            eps=params.eps,
            units=params.units,
            lr=params.lr,
            steps=params.steps,
            max_steps=params.max_steps,
            seed=ctx.seed,
            gap_tolerance=params.gap_tolerance,
            flat_threshold=params.flat_threshold,
            log=self.log,
        )
        self.analysis = a
        fill_outcome(a, out)


def _tables(a: Analysis) -> list[Table]:
    """The assumption checks, the plateaus and drops, and the validity tables of an analysis."""
    v = a.validity
    return [
        Table(
            "Assumption checks",
            ["check", "value", "criterion", "status", "note"],
            [[c.name, c.value, c.criterion, c.status, c.note] for c in a.checks],
        ),
        Table(
            "Plateaus and drops",
            list(Analysis.TABLE_COLUMNS),
            a.table(),
            caption=(
                "levels: loss at the middle of each predicted plateau; times: first downward crossing of "
                "(L_{k−1}+L_k)/2; errors relative to the prediction; flatness = loss change across the middle "
                f"third of the plateau / adjacent drop (flat ≤ {a.real.flat_threshold:g})"
            ),
        ),
        Table(
            "Validity",
            ["quantity", "value"],
            [
                ["max |L_real − L_NQF| / L_NQF", v["max_gap"]],
                ["gap tolerance", v["gap_tolerance"]],
                ["NQF global minimum", v["nqf_minimum"]],
                ["final loss (real)", v["final_real"]],
                ["final loss (NQF)", v["final_nqf"]],
                ["left the quadratic regime at step", v["left_step"]],
                ["reason", v["reason"] or "stayed"],
            ],
        ),
    ]


def fill_outcome(a: Analysis, out: Outcome) -> None:
    """Tables, checks, metrics, arrays, figures and summary of an analysis."""
    P = a.prediction
    v = a.validity
    out.tables.extend(_tables(a))
    for k in range(P.n_drops):
        out.checks.append(
            Check(f"drop {k + 1}: escape time (real network)", float(P.times[k]), float(a.real.times_measured[k]), None)
        )
        out.checks.append(
            Check(
                f"plateau {k + 1}: level (real network)",
                float(P.levels[k + 1]),
                float(a.real.levels_measured[k + 1]),
                None,
            )
        )
    out.metrics.update(
        {
            "eps": a.eps,
            "lr": a.lr,
            "steps": a.steps,
            "p": a.p,
            "width": a.width,
            "n_samples": a.n_samples,
            "method": P.method,
            "drops": P.n_drops,
            "max_gap_real_vs_nqf": v["max_gap"],
            "left_step": v["left_step"],
            "trust": a.verdict["trust"],
            "max_time_error_real": a.verdict["max_time_error"],
            "max_level_error_real": a.verdict["max_level_error"],
            **{f"seconds_{k}": s for k, s in a.timings.items()},
            **{f"memory_{k}": v for k, v in a.memory.items()},
        }
    )
    out.arrays.update({k: v for k, v in a.curves.items()})
    out.arrays.update(
        {
            "levels_predicted": P.levels,
            "times_predicted": P.times,
            "times_leading_order": P.times_leading,
            "escape_rates": P.rates,
        }
    )
    out.figures["analysis"] = a.plot()
    out.summary.extend([header_line(a)] + list(a.verdict["text"]))


def save_analysis(a: Analysis, out_dir, *, force: bool = False) -> dict:
    """Write ``a`` as a run directory (results.json, arrays.npz, figures, report.html); returns the results."""
    from ..experiments import run_experiment

    class _Saved(AnalyzeExperiment):
        def run(self, params, ctx, out):  # noqa: ARG002 - the analysis is done already
            fill_outcome(a, out)

    params = AnalyzeParams(model=a.model, data=a.data, eps=a.eps, lr=a.lr, steps=a.steps)
    return run_experiment(_Saved(), params, out_dir, force=force)


#: The printed per-plateau table: (header, column of :meth:`Analysis.table`); the flat column adds the ratio.
PRINTED_COLUMNS = (
    ("k", 0),
    ("rank", 1),
    ("L pred", 2),
    ("L NQF", 3),
    ("L real", 4),
    ("err", 6),
    ("t pred", 7),
    ("t NQF", 9),
    ("t real", 10),
    ("err", 12),
    ("t seeded", 15),
    ("flat", 14),
)


def header_line(a: Analysis) -> str:
    """Model, data (samples, outputs, task, class names), units and run settings in one line."""
    names = f", classes {', '.join(str(c) for c in a.classes)}" if a.classes else ""
    task = f", {a.task}" if a.task else ""
    return (
        f"model {a.model}, data {a.data} (N = {a.n_samples}, C = {a.n_outputs}{task}{names}); {a.units}; "
        f"operator {a.operator}; ε = {a.eps:g}, η = {a.lr:.4g}, {a.steps} steps"
    )


def print_analysis(a: Analysis, echo=print) -> None:
    """The header, the checks table, the per-plateau table and the verdict, as text.

    The per-plateau columns are picked from :meth:`Analysis.table` by :data:`PRINTED_COLUMNS` (the
    errors are the real network's against the prediction; flat is ``yes``/``no`` with the flatness ratio).
    """
    from ..report import format_cell

    echo(header_line(a))
    echo("assumption checks:")
    for c in a.checks:
        echo(f"  {c.name:<24} {c.value:<24} {c.status:<4} {c.note}")
    echo("")
    echo("  " + " ".join(f"{h:>8}" for h, _ in PRINTED_COLUMNS))
    flat_col = Analysis.TABLE_COLUMNS.index("flatness (real)")
    for r in a.table():
        cells = [format_cell(r[j]) for _, j in PRINTED_COLUMNS]
        cells[-1] = f"{cells[-1]} ({format_cell(r[flat_col])})"
        echo("  " + " ".join(f"{c:>8}" for c in cells))
    echo(
        "  (err: real network vs prediction; t seeded: the real network's clock, the seeded NQF; "
        "flat: loss change across the plateau / adjacent drop)"
    )
    echo("")
    for line in a.verdict["text"]:
        echo(f"- {line}")
