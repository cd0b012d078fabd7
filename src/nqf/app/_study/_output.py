"""An analysis as a run like every other: run directory, results.json, arrays, figures, report.html.

``nqf analyze`` runs :class:`AnalyzeExperiment` through
:func:`nqf.app.run_experiment` (atomic run directory, seed,
status, report); :func:`save_analysis` writes an :class:`Analysis` made in the
API the same way.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from ..._limits import MAX_STEPS
from ..._text import terminal_text
from .._experiments import Check, Experiment, Outcome, Params, Table
from ._result import Analysis
from ._table import level_cell as _level, number_cell as _num, plateau_rows
from ._verdict import LEVEL_FLOOR, MAX_RELATIVE, ROUNDOFF, error_of, fmt_pct, level_text

__all__ = [
    "AnalyzeParams",
    "AnalyzeExperiment",
    "fill_outcome",
    "save_analysis",
    "print_analysis",
    "printed_table",
    "plateau_rows",
]


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
    from .._data import load_dataset

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
        from ..._usercode import users_code
        from ._models import model_files
        from ._pipeline import analyze

        data = load_data(params, ctx.seed)
        # what the model file's code does wrong during the run (exits, raises, recurses) names the model
        with users_code(f"the model {params.model}", model_files(params.model), stdout=False):
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


def _validity_rows(a: Analysis) -> list[list]:
    v, L0 = a.validity, float(a.prediction.levels[0])
    g = v.get("max_gap")
    gap = fmt_pct(g, [v["gap_tolerance"]])
    if g is not None and math.isfinite(g) and g > MAX_RELATIVE and v.get("max_abs_gap") is not None:
        gap = f"|Δ| {v['max_abs_gap']:.3g} (above {100 * MAX_RELATIVE:g} %)"
    return [
        ["max |L_real − L_NQF| / max(L_NQF, 10⁻³ L_0)", gap],
        ["gap tolerance", f"{100 * v['gap_tolerance']:g} %"],
        ["NQF global minimum", None if v["nqf_minimum"] is None else _level(v["nqf_minimum"], L0)],
        ["final loss (real)", _level(v["final_real"], L0)],
        ["final loss (NQF)", _level(v["final_nqf"], L0)],
        ["left the quadratic regime at t = η·steps", _num(v["left_time"])],
        [f"left the quadratic regime at step (of η = {a.lr:.4g})", v["left_step"]],
        ["reason", v["reason"] or "stayed"],
    ]


#: How the plateau table says what its cells are (the caption in the report, the legend in the terminal).
PLATEAU_NOTE = (
    "err %: percent of the prediction (err t seeded: of the seeded NQF's time), one decimal; |Δ|: the absolute "
    f"difference, printed instead where the predicted level is below {LEVEL_FLOOR:g} L_0 or the relative error "
    f"exceeds {100 * MAX_RELATIVE:g} %; 0 (round-off): a level within {ROUNDOFF:g} L_0 of zero"
)


def _tables(a: Analysis) -> list[Table]:
    """The assumption checks, the plateaus and drops, and the validity tables of an analysis."""
    return [
        Table(
            "Assumption checks",
            ["check", "value", "criterion", "status", "note"],
            [[c.name, c.value, c.criterion, c.status, c.note] for c in a.checks],
        ),
        Table(
            "Plateaus and drops",
            list(Analysis.REPORT_COLUMNS),
            a.report_table(),
            caption=(
                "levels: loss at the middle of each predicted plateau; times t = η·steps: first downward crossing "
                f"of (L_{{k−1}}+L_k)/2; {PLATEAU_NOTE}; flat (real): yes/no with the loss change across the middle "
                f"third of the plateau / adjacent drop (flat ≤ {a.real.flat_threshold:g})"
            ),
        ),
        Table("Validity", ["quantity", "value"], _validity_rows(a)),
    ]


def _drop_note(a: Analysis, k: int) -> str:
    """Whether drop ``k + 1`` (and plateau ``k + 1``) counts in the verdict."""
    t, left = float(a.real.times_measured[k]), a.validity.get("left_time")
    if not math.isfinite(t):
        return "not reached by the real network"
    if left is not None and t >= left:
        return f"after the network left the quadratic regime (t = {left:.4g}): not judged"
    return "inside the quadratic regime: judged in the verdict"


def _checks(a: Analysis) -> list[Check]:
    """Per drop: the escape time and the level after it, predicted against the real network, with a note."""
    P, L0 = a.prediction, float(a.prediction.levels[0])
    floor, out = LEVEL_FLOOR * abs(L0), []
    for k in range(P.n_drops):
        note = _drop_note(a, k)
        t_pred, t_real = float(P.times[k]), float(a.real.times_measured[k])
        kind = error_of(t_real, t_pred)[0]
        why = f"; |Δ|: relative error above {100 * MAX_RELATIVE:g} %" if kind == "absolute" else ""
        out.append(
            Check(
                f"drop {k + 1}: escape time (real network)",
                t_pred,
                t_real,
                None,
                kind="absolute" if kind == "absolute" else "relative",
                reason=note + why,
            )
        )
        L_pred, L_real = float(P.levels[k + 1]), float(a.real.levels_measured[k + 1])
        if level_text(L_pred, L0).startswith("0 ("):
            note += f"; predicted {L_pred:.2g}: 0 up to round-off"
            L_pred = 0.0
        kind = error_of(L_real, L_pred, floor)[0]
        if kind == "absolute":
            small = abs(L_pred) < floor
            note += f"; |Δ|: the predicted level is below {LEVEL_FLOOR:g} L_0" if small else "; |Δ|: above 1000 %"
        out.append(
            Check(
                f"plateau {k + 1}: level (real network)",
                L_pred,
                L_real,
                None,
                kind="absolute" if kind == "absolute" else "relative",
                reason=note,
            )
        )
    return out


def fill_outcome(a: Analysis, out: Outcome) -> None:
    """Tables, checks, metrics, arrays, figures and summary of an analysis."""
    P = a.prediction
    v = a.validity
    out.tables.extend(_tables(a))
    out.checks.extend(_checks(a))
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
            "trust": a.verdict.trust,
            "max_time_error_real": a.verdict.max_time_error,
            "max_level_error_real": a.verdict.max_level_error,
            **{f"seconds_{k}": s for k, s in a.timings.items()},
            **{f"memory_{k}": v for k, v in a.memory.to_dict().items()},
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
    out.summary.extend([header_line(a)] + list(a.verdict.text))


def save_analysis(a: Analysis, out_dir, *, force: bool = False) -> dict:
    """Write ``a`` as a run directory (results.json, arrays.npz, figures, report.html); returns the results."""
    from .._experiments import run_experiment

    class _Saved(AnalyzeExperiment):
        def run(self, params, ctx, out):  # noqa: ARG002 - the analysis is done already
            fill_outcome(a, out)

    params = AnalyzeParams(model=a.model, data=a.data, eps=a.eps, lr=a.lr, steps=a.steps)
    return run_experiment(_Saved(), params, out_dir, force=force)


#: The printed per-plateau table: (header, column of :attr:`Analysis.REPORT_COLUMNS`); the same cells as the
#: report's and ``results.json``'s table (:func:`plateau_rows`), each formatted by :func:`nqf.app._report.format_cell`.
PRINTED_COLUMNS = (
    ("k", "k"),
    ("rank", "rank"),
    ("L pred", "L pred"),
    ("L NQF", "L NQF"),
    ("L real", "L real"),
    ("err %", "err L real %"),
    ("t pred", "t pred"),
    ("t NQF", "t NQF"),
    ("t real", "t real"),
    ("err %", "err t real %"),
    ("t seeded", "t seeded"),
    ("flat", "flat (real)"),
)


def header_line(a: Analysis) -> str:
    """Model, data (samples, outputs, task, class names), units and run settings in one line."""
    names = f", classes {', '.join(str(c) for c in a.classes)}" if a.classes else ""
    task = f", {a.task}" if a.task else ""
    return (
        f"model {a.model}, data {a.data} (N = {a.n_samples}, C = {a.n_outputs}{task}{names}); {a.units}; "
        f"operator {a.operator}; ε = {a.eps:g}, η = {a.lr:.4g}, {a.steps} steps of η (t = η·steps up to "
        f"{a.lr * a.steps:.4g})"
    )


def printed_table(a: Analysis) -> list[str]:
    """The per-plateau table as the terminal prints it: right-aligned columns one space apart, each at least
    8 characters wide, the cells of :func:`plateau_rows` picked by :data:`PRINTED_COLUMNS`."""
    from .._report import format_cell

    idx = [Analysis.REPORT_COLUMNS.index(name) for _, name in PRINTED_COLUMNS]
    cells = [[format_cell(r[j]) for j in idx] for r in a.report_table()]
    widths = [max(8, len(h), *(len(row[i]) for row in cells)) for i, (h, _) in enumerate(PRINTED_COLUMNS)]
    lines = ["  " + " ".join(h.rjust(w) for (h, _), w in zip(PRINTED_COLUMNS, widths, strict=True))]
    lines += ["  " + " ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return lines


def print_analysis(a: Analysis, echo=print) -> None:
    """The header, the checks table, the per-plateau table and the verdict, as text.

    The per-plateau table (:func:`printed_table`) holds the same cells as the report's and ``results.json``'s
    (errors: the real network's against the prediction, in percent; flat is ``yes``/``no`` with the ratio).
    Every line passes through :func:`nqf._text.terminal_text` (class and file names are the user's)."""

    def say(line: str) -> None:
        echo(terminal_text(line))

    say(header_line(a))
    say("assumption checks:")
    for c in a.checks:
        say(f"  {c.name:<24} {c.value:<24} {c.status:<4} {c.note}")
    say("")
    for line in printed_table(a):
        say(line)
    say(
        f"  ({PLATEAU_NOTE}; t = η·steps; t seeded: the real network's clock, the seeded NQF; "
        "flat: loss change across the plateau / adjacent drop)"
    )
    say("")
    for line in a.verdict.text:
        say(f"- {line}")
