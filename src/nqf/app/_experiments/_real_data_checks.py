"""The checks of the ``real-data`` experiment (:mod:`nqf.app._experiments._real_data`): per initial scale (drop times
and levels of the real network against the prediction, the seeded NQF, the gap to the NQF) and the trend of the
errors with ε; and the experiment's parameters, which they read."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from ._base import Check, EpsList, Params

#: (samples, features) of the data sets ``datasets`` may name (scikit-learn's bundled copies).
_DATA_SIZES = {"iris": (150, 4), "wine": (178, 13), "breast_cancer": (569, 30), "digits": (1797, 64)}


class RealDataParams(Params):
    datasets: list[Literal["digits", "wine", "iris", "breast_cancer"]] = Field(["digits", "wine"], min_length=1)
    eps: EpsList = Field([1e-6, 1e-10], min_length=2, description="at least two initial scales")
    width: int = Field(256, ge=2, description="hidden units of the real MLP (≥ p = C + D)")
    subset: int | None = Field(None, ge=10, description="random subset of each data set (None: all samples)")
    lr_fraction: float = Field(
        0.02, gt=0, le=0.2, description="η × largest escape rate (GD is late against the flow by at most lr_fraction/4)"
    )
    save_points: int = Field(600, ge=20)
    time_tolerance: float = Field(0.12, gt=0, description="relative tolerance of drop times at ε = 1e-10")
    level_tolerance: float = Field(0.08, gt=0, description="relative tolerance of plateau levels at ε = 1e-10")
    gap_tolerance: float = Field(0.01, gt=0, description="max |L_real − L_NQF|/L_NQF up to the second drop")
    gap_datasets: list[str] = Field(
        ["digits"],
        description="data sets on which the gap tolerance is judged "
        "(issue 11 states it for digits; elsewhere reported)",
    )
    seeded_tolerance: float = Field(
        0.05, gt=0, description="relative tolerance of every drop against the seeded NQF (issue 20 acceptance)"
    )
    planted_init_factor: float = Field(
        1.0,
        gt=0,
        description="multiplies the real network's W(0) (≠ 1 plants a wrong initial scale that the checks must catch)",
    )


#: The ε at which issue 11 states the tolerances (scaled by ``ln(1/_REF_EPS)/ln(1/ε)`` elsewhere).
_REF_EPS = 1e-10


class UpperBoundCheck(Check):
    """A one-sided check: passes when ``measured ≤ predicted`` (``predicted`` is an upper bound)."""

    @property
    def error(self) -> float | None:
        p, m = self.predicted, self.measured
        if p is None or m is None or not (self._finite(p) and self._finite(m)):
            return None
        return max(0.0, float(m) - float(p))


def _tolerances(eps: float, P: RealDataParams) -> tuple[float, float, float]:
    """``(scale, time tolerance, level tolerance)``: issue 11's acceptance at ε = 1e-10 × ln(1e10)/ln(1/ε)."""
    scale = math.log(1 / _REF_EPS) / math.log(1 / eps)
    return scale, P.time_tolerance * scale, P.level_tolerance * scale


def eps_checks(name: str, eps: float, st, m: dict, P: RealDataParams) -> list[Check]:
    """Per drop: time and plateau level against the real network; the network–NQF gaps (pure data in)."""
    scale, tol_t, tol_l = _tolerances(eps, P)
    times, rules, cr, pred_l = st.times, st.time_rules, m["cr"], m["pred_l"]
    origin = f"issue 11 acceptance at ε = 1e-10, × ln(1e10)/ln(1/ε) = {scale:.3g} (error order 1/ln(1/ε))"
    checks = []
    for k in range(len(times)):
        checks.append(
            Check(
                f"{name} ε={eps:g}: t_{k + 1} ({rules[k]})",
                float(times[k]),
                float(cr.times_measured[k]),
                tol_t,
                reference="real network: first downward crossing of (L_{k-1}+L_k)/2",
                tolerance_origin=origin,
            )
        )
        flat = bool(cr.flat[k + 1])
        checks.append(
            Check(
                f"{name} ε={eps:g}: L_{k + 1}" + ("" if flat else " (not flat)"),
                float(pred_l[k + 1]),
                float(cr.levels_measured[k + 1]),
                tol_l if flat else None,
                reference=f"real network: loss mid-plateau (last: end of run); predicted: "
                f"saddle value {m['levels'][k + 1]:.4g} + orbit tails",
                tolerance_origin=origin,
                reason=""
                if flat
                else (
                    f"not judged: the real network does not rest on this "
                    f"plateau (flatness {cr.flatness[k + 1]:.2f} > 0.25 "
                    "of the adjacent drop)"
                ),
            )
        )
    return checks + _seeded_checks(name, eps, m, P) + _gap_checks(name, eps, m, P)


def _seeded_checks(name: str, eps: float, m: dict, P: RealDataParams) -> list[Check]:
    """Per drop: the seeded NQF's time (the real network's clock) against the real network."""
    clock, cr = m["clock"], m["cr"]
    return [
        Check(
            f"{name} ε={eps:g}: t_{k + 1} (seeded NQF" + (", seeded drop)" if clock.seeded[k] else ")"),
            float(clock.times[k]),
            float(cr.times_measured[k]),
            P.seeded_tolerance,
            reference="real network: first downward crossing of (L_{k-1}+L_k)/2",
            tolerance_origin="issue 20 acceptance: every drop within 5 % of the corrected prediction",
        )
        for k in range(clock.times.size)
    ]


def _gap_checks(name: str, eps: float, m: dict, P: RealDataParams) -> list[Check]:
    """The real network's relative gap to its NQF up to the second drop (judged on `gap_datasets`) and over the run."""
    return [
        Check(
            f"{name} ε={eps:g}: max |L_real − L_NQF|/L_NQF up to t_2",
            0.0,
            m["gap"],
            P.gap_tolerance if name in P.gap_datasets else None,
            kind="absolute",
            reference="real network vs NQF order-parameter simulation, same steps",
            tolerance_origin="issue 11: within 0.13 % up to the second drop on digits; 1 % is its acceptance",
        ),
        Check(
            f"{name} ε={eps:g}: max |L_real − L_NQF|/L_NQF over the run",
            0.0,
            m["gap_all"],
            None,
            kind="absolute",
            reference="real network vs NQF simulation",
            reason="reported: after the first drops the weights are O(1) and the network's "
            "terms beyond second order shift its later escape rates; the shift in "
            "time grows with the plateau lengths ∝ ln(1/ε)",
        ),
    ]


def trend_checks(name: str, errs: dict, P: RealDataParams) -> list[Check]:
    """Across ε: the largest time error must not grow as ε falls (one-sided); the level error is reported."""
    e1, e2 = P.eps[0], P.eps[-1]
    return [
        UpperBoundCheck(
            f"{name}: largest time error at ε={e2:g} ≤ at ε={e1:g}",
            errs[e1][0],
            errs[e2][0],
            0.0,
            kind="absolute",
            reference="real network's largest relative drop-time error",
            tolerance_origin="one-sided: the theory's time error is O(1/ln(1/ε)), so it must not grow as ε falls",
        ),
        # levels: reported, not judged — on a plateau the weights are O(1), so the real network's deviation
        # from its NQF there (terms beyond second order) does not shrink with ε; only the crowding part does
        Check(
            f"{name}: largest level error at ε={e2:g} (vs {errs[e1][1]:.3g} at ε={e1:g})",
            errs[e1][1],
            errs[e2][1],
            None,
            kind="absolute",
            reference="real network's largest relative plateau-level error",
            reason="not judged: the level error has an ε-independent floor (the network's "
            "terms beyond second order at O(1) weights)",
        ),
    ]
