"""The real network's clock inside :func:`nqf.analyze`: the seeded NQF beside the NQF (docs/theory.md §7).

Run only when there is a later drop to seed (two or more predicted drops) and the operator
satisfies the zero-gradient condition; the module is evaluated along the seeded trajectory,
never trained.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time

import numpy as np

from ...curves import TRUSTED_TIME_ERROR, RealClock, level_read_times, level_time_bounds, real_clock, step_clock
from ...structure import channel_split
from ._plan import Problem, RunPlan
from ._runs import secs, timed_step_cost, two_step_counts

__all__ = ["seeded_clock", "clock_sentences", "seeds_off_level", "SEEDS_OFF_FRACTION"]

#: The clock's seeds go off where the loss is within this fraction of the last predicted drop above its level.
SEEDS_OFF_FRACTION = 0.25


def seeds_off_level(levels) -> float:
    """Where the clock's runs switch their seeds off: ``L_K + SEEDS_OFF_FRACTION (L_{K−1} − L_K)`` of the predicted
    levels (``seed_until`` of :class:`nqf.dynamics.Seeding`).

    Past the last predicted drop there is nothing left to seed: every drop's midpoint crossing, and the step map's
    anchors up to it, lie before, and the runs go on to the horizon as the NQF's own GD (the module is not evaluated
    again), for the directions the last drop learned, which :func:`nqf.dynamics.active_levels` reads at the horizon.
    A run whose loss never gets there is seeded to the end.  NaN (seeded to the end) unless the last predicted step
    is a drop, ``L_{K−1} > L_K``: a level at or above the one before could be reached before the last drop.
    """
    lev = np.asarray(levels, float).reshape(-1)
    if lev.size < 2 or not lev[-2] > lev[-1]:
        return math.nan
    return float(lev[-1] + SEEDS_OFF_FRACTION * (lev[-2] - lev[-1]))


def seeded_clock(
    enabled: bool, problem: Problem, run: RunPlan, pred, sim, say
) -> tuple[RealClock | None, dict[str, float]]:
    """The seeded NQF's drop times (:func:`nqf.dynamics.seeded_nqf`) read against the NQF run ``sim``.

    With ``run.real_step_factor > 2`` the seeded NQF runs as the real network does, at ``factor × η`` and half that
    step, and its times are carried onto the clock of ``η`` by the two runs' own delays
    (:func:`nqf.curves.step_clock`); otherwise at ``η``.  Where the NQF runs on moment rows (``problem.nqf.rows``;
    its targets there the moment targets minus ``f(0)``, its loss offset ``problem.nqf.shift``) the seeded NQF
    takes the NQF's steps there (the same gradient, on ``D`` rows) and the module's seeds on the data
    (``source``).  The plateaus are bridged in closed form (``Seeding(bridge=True)``).  Returns the clock (None
    when not run) and the seconds it took (``"estimate_seeded_nqf"``, ``"seeded_nqf"``, ``"active_levels"``).
    """
    from ...dynamics import Save, Seeding, seeded_nqf

    module, found, Xt, Yt, op, W0 = problem.module, problem.found, problem.X, problem.Y, problem.op, problem.W0
    lr, steps, factor = run.lr, run.steps, run.real_step_factor
    if not enabled or pred.n_drops < 2 or not op.satisfies_zgz:
        return None, {}
    moments = problem.nqf.rows is not None
    shift, (op_nqf, X_nqf, Y_nqf) = 0.0, (op, Xt, Yt)
    if moments:  # the NQF's steps on the moment rows; the seeds from the module on the data
        op_nqf, X_nqf, shift = problem.nqf.op, problem.nqf.rows, problem.nqf.shift
        Y_nqf = problem.nqf.Y + _zero_output(module, found, X_nqf)

    stop = seeds_off_level(pred.levels) - shift
    stop = stop if math.isfinite(stop) else None  # no last drop (or no finite levels): seeded to the horizon
    seeding = Seeding(bridge=True, seed_until=stop, source=(op, Xt, Yt) if moments else None)

    def go(h: float, k: int, save_every: int, save_W: bool = False):
        return seeded_nqf(
            op_nqf, copy.deepcopy(module), found.layout, X_nqf, Y_nqf, W0=W0, lr=h, steps=k, seeding=seeding,
            save=Save(every=save_every, W=save_W, M=False),
        )  # fmt: skip

    plan = [(lr * factor / 2, two_step_counts(steps, factor)[0]), (lr * factor, two_step_counts(steps, factor)[1])]
    if factor <= 2:
        plan = [(lr, steps)]
    n_total = sum(k for _, k in plan)
    timings = {"estimate_seeded_nqf": timed_step_cost(lambda k: go(plan[0][0], k, 1), n_total) * n_total}
    say(
        f"seeded NQF (the real network's clock): {' and '.join(f'{k} steps at η = {h:.4g}' for h, k in plan)}, "
        f"estimated at most ~{secs(timings['estimate_seeded_nqf'])} s"
        + (
            f" (the seeds go off once the last predicted drop is {100 * (1 - SEEDS_OFF_FRACTION):g} % done)"
            if stop is not None
            else " (seeded to the end: the last predicted step is not a drop)"
        )
    )
    t0 = time.perf_counter()
    runs = [go(h, k, 1 if i else max(1, k // 600), save_W=not i) for i, (h, k) in enumerate(plan)]
    timings["seeded_nqf"] = time.perf_counter() - t0
    say(f"seeded NQF: {secs(timings['seeded_nqf'])} s")
    if any(r.status != 0 for r in runs):
        say("seeded NQF: a run diverged; the real network's clock is not given")
        return None, timings
    traj, t, loss = runs[0], runs[0].t.numpy(), runs[0].loss.numpy() + shift
    if len(runs) == 2:
        big = (runs[1].t.numpy(), runs[1].loss.numpy() + shift)
        t = step_clock((t, loss), big, steps=(plan[0][0], plan[1][0]), h=lr)(t)
    clock = real_clock(pred, t, loss, sim.t.numpy(), sim.loss.numpy())
    clock, seconds = _with_levels(clock, problem, (t, traj.W), lr, lr * steps, say)
    return clock, {**timings, **seconds}


def _zero_output(module, found, X):
    """The module's output with its units at zero, ``f(0)`` on ``X`` (the NQF's constant part)."""
    import torch

    from ...modules import UnitScatter

    scatter = UnitScatter(module, found.layout)
    with torch.no_grad():
        return scatter.module_output(module, torch.zeros(scatter.p, scatter.m, dtype=X.dtype), X, None)


def _with_levels(
    clock: RealClock, problem: Problem, states: tuple, lr: float, t_end: float, say
) -> tuple[RealClock, dict[str, float]]:
    """The clock's staircase with the module's level on each plateau (:func:`nqf.dynamics.active_levels`, from the
    seeded states) and each time's bound from it (:func:`nqf.curves.level_time_bounds`); unchanged where a drop
    time is missing.  The flows stop where they are stiffer than GD at ``lr`` follows (NaN levels: those drops are
    not trusted).  With the seconds the levels took (``"active_levels"``; none when not computed)."""
    from ...dynamics import active_levels

    st = clock.staircase
    if not np.isfinite(st.times).all() or np.any(np.diff(st.times) < 0):
        return clock, {}
    module, found, Xt, Yt, op = problem.module, problem.found, problem.X, problem.Y, problem.op
    if channel_split(op) is not None:  # the staircase's ranks count channels, the cost step's spans count units
        say(
            "the module's level on each plateau: not computed (the units are channels of the heads, and the "
            "cost step's span of learned directions is one direction per head)"
        )
        return clock, {}
    t0 = time.perf_counter()
    reads = level_read_times(t_end, st.times)
    levels = active_levels(module, found.layout, Xt, Yt, states, st.times, st.ranks, reads, lr=lr)
    reference = active_levels(module, found.layout, Xt, Yt, states, st.times, st.ranks, reads, nqf=op, lr=lr)
    levels = np.where(np.isfinite(reference), levels, np.nan)  # a level without its reference is not judged
    seconds = time.perf_counter() - t0
    say(f"the module's level on each plateau (its flow over the learned directions): {secs(seconds)} s")
    bounds = level_time_bounds(st.levels, levels, reference)
    st = dataclasses.replace(st, levels_module=levels, time_uncertainty=bounds)
    return dataclasses.replace(clock, staircase=st), {"active_levels": seconds}


def clock_sentences(clock: RealClock | None, t_real: np.ndarray) -> list[str]:
    """Verdict sentences: which drops are seeded at this ε, their floors, and the seeded times' errors."""
    if clock is None:
        return []
    with np.errstate(invalid="ignore", divide="ignore"):
        err_seeded = np.abs(clock.times / t_real - 1)
        err_nqf = np.abs(clock.times_nqf / t_real - 1)
    ok = np.isfinite(err_seeded) & np.isfinite(err_nqf)
    out = []
    if ok.any():
        out.append(
            f"Real network's clock (seeded NQF: the next orders' seeds in the unlearned directions): drops within "
            f"{100 * float(err_seeded[ok].max()):.1f} % of the real network in time (the NQF's own times: "
            f"{100 * float(err_nqf[ok].max()):.1f} %)."
        )
    out.extend(_trust_sentences(clock))
    seeded = [k + 1 for k in range(clock.times.size) if clock.seeded[k]]
    if seeded:
        floors = ", ".join(f"drop {k}: ε* = {clock.floor[k - 1]:.1e}" for k in seeded)
        out.append(
            f"ε = {clock.eps:g} is below the seeding floor of drop(s) {seeded} ({floors}): there the real network's "
            "drops follow the seeds made when the first mode switched on, not τ_k ln(1/ε); use the seeded times."
        )
    else:
        finite = [(k + 1, f) for k, f in enumerate(clock.floor) if math.isfinite(f)]
        if finite:
            k, f = max(finite, key=lambda kf: kf[1])
            out.append(f"No drop is seeded at ε = {clock.eps:g}; the highest seeding floor is ε* = {f:.1e} (drop {k}).")
    return out


def _trust_sentences(clock: RealClock) -> list[str]:
    """Which of the clock's drop times to trust: the bound of :func:`nqf.curves.level_time_bounds`, fixed before
    any comparison, against :data:`nqf.curves.TRUSTED_TIME_ERROR`; and the module's final level beside the NQF's."""
    st = clock.staircase
    if st.time_uncertainty is None or st.levels_module is None:
        return []
    flagged = [k + 1 for k in range(st.n_drops) if not st.trusted(TRUSTED_TIME_ERROR)[k]]
    rule = (
        f"a drop is trusted when the module's own level on the plateau before it, reached by the same steps as the "
        f"NQF's over the learned directions, moves its escape rate by at most {100 * TRUSTED_TIME_ERROR:g} % "
        "(fixed before the comparison)"
    )
    if flagged:
        bounds = ", ".join(f"drop {k}: {_bound_text(st.time_uncertainty[k - 1])}" for k in flagged)
        head = f"Trust per drop of the real network's clock: drop(s) {flagged} flagged ({bounds}); {rule}."
    else:
        head = f"Trust per drop of the real network's clock: every drop trusted; {rule}."
    if not np.isfinite(st.levels_module[-1]):
        tail = (
            " The module's level after the last drop: not computed (the flow over the learned directions became "
            "stiffer than GD at η can follow: the chained state left the region the run reaches)."
        )
    else:
        tail = (
            f" The module's level after the last drop: {st.levels_module[-1]:.4g} (the NQF's: {st.levels[-1]:.4g}; "
            "the real module's own flow over the learned directions, AGF's cost step)."
        )
    return [head + tail]


def _bound_text(bound: float) -> str:
    """One drop's time bound in percent, or why there is none."""
    if not math.isfinite(bound):
        return "no bound (its plateau's level was not computed)"
    return f"{100 * bound:.3g} %"
