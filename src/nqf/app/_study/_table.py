"""The per-plateau table as printed (terminal, ``report.html``, ``results.json``): the cells of
:meth:`nqf.app.Analysis.report_table`, formatted by the rules of :mod:`nqf.app._study._verdict`."""

from __future__ import annotations

import math

from ...curves import RealClock, StaircaseComparison
from ...reductions import Staircase
from ._verdict import LEVEL_FLOOR, error_of, fmt_sig, level_text

__all__ = ["plateau_rows", "number_cell", "level_cell", "error_cell"]


def number_cell(x) -> float | None:
    """A time or loss as printed: 4 significant digits (None where missing)."""
    return float(f"{float(x):.4g}") if x is not None and math.isfinite(float(x)) else None


def level_cell(L, L0: float) -> float | str | None:
    """A level as printed: 4 significant digits, ``0 (round-off)`` within ``ROUNDOFF · L_0`` of zero."""
    text = level_text(L, L0)
    return None if text == "—" else text if text.startswith("0 (") else float(text)


def error_cell(measured, reference, floor: float = 0.0) -> float | str | None:
    """An error as printed: percent, one decimal (a number), or ``|Δ| …`` (:func:`error_of`)."""
    kind, v = error_of(measured, reference, floor)
    if v is None:
        return None
    return float(f"{100 * v:.1f}") if kind == "relative" else f"|Δ| {v:.3g}"


def plateau_rows(
    prediction: Staircase, nqf: StaircaseComparison, real: StaircaseComparison, clock: RealClock | None
) -> list[list]:
    """The per-plateau table as printed (terminal, HTML, ``results.json``), columns
    :attr:`Analysis.REPORT_COLUMNS`: levels and times at 4 significant digits, errors in percent of the reference
    to one decimal or ``|Δ|`` (module :mod:`._verdict`), flat with its ratio: from the prediction, the NQF's
    and the real network's comparisons and the real network's clock (an :class:`~nqf.app.Analysis`'s fields)."""
    P, S, R, C = prediction, nqf, real, clock
    L0 = float(P.levels[0])
    floor = LEVEL_FLOOR * abs(L0)
    rows = []
    for k in range(P.levels.size):
        d, tk = k > 0, k - 1
        tp = P.times[tk] if d else None
        ts = C.times[tk] if d and C is not None else None
        ratio = fmt_sig(R.flatness[k], [R.flat_threshold])
        rows.append(
            [
                k,
                int(P.ranks[k]) if k < P.ranks.size else None,
                level_cell(P.levels[k], L0),
                level_cell(S.levels_measured[k], L0),
                level_cell(R.levels_measured[k], L0),
                error_cell(S.levels_measured[k], P.levels[k], floor),
                error_cell(R.levels_measured[k], P.levels[k], floor),
                number_cell(tp),
                (P.time_rules[tk] if tk < len(P.time_rules) else "") if d else "",
                number_cell(S.times_measured[tk]) if d else None,
                number_cell(R.times_measured[tk]) if d else None,
                error_cell(S.times_measured[tk], tp) if d else None,
                error_cell(R.times_measured[tk], tp) if d else None,
                f"{'yes' if R.flat[k] else 'no'} ({ratio})",
                number_cell(ts),
                error_cell(R.times_measured[tk], ts) if ts is not None else None,
            ]
        )
    return rows
