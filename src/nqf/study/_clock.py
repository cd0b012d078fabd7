"""The real network's clock inside :func:`nqf.analyze`: the seeded NQF beside the NQF (docs/theory.md §7).

Run only when there is a later drop to seed (two or more predicted drops) and the operator
satisfies the zero-gradient condition; the module is evaluated along the seeded trajectory,
never trained.
"""

from __future__ import annotations

import copy
import math
import time

import numpy as np

from ..curves import RealClock, real_clock
from ._runs import secs, timed_step_cost

__all__ = ["seeded_clock", "clock_sentences"]


def seeded_clock(enabled: bool, problem: tuple, run: tuple, pred, sim, say, timings: dict) -> RealClock | None:
    """The seeded NQF's drop times (:func:`nqf.dynamics.seeded_nqf`) read against the NQF run ``sim``.

    ``problem`` is ``(module, found, X, Y, op, W0)`` with ``op`` the operator on the data themselves;
    ``run`` is ``(step, steps, time map)``: the seeded NQF runs at that step and its times are carried onto
    ``sim``'s clock by the map (None: the same step).  Returns the clock (None when not run); its time goes
    into ``timings["seeded_nqf"]``.
    """
    from ..dynamics import seeded_nqf

    module, found, Xt, Yt, op, W0 = problem
    lr, steps, time_map = run
    if not enabled or pred.n_drops < 2 or not op.satisfies_zgz:
        return None
    every = max(1, steps // 600)

    def go(k: int, save_every: int = every):
        return seeded_nqf(
            op, copy.deepcopy(module), found.layout, Xt, Yt, W0=W0, lr=lr, steps=k, save_every=save_every,
            save_W=False, save_M=False,
        )  # fmt: skip

    timings["estimate_seeded_nqf"] = timed_step_cost(lambda k: go(k, 1), steps) * steps
    say(
        f"seeded NQF (the real network's clock): {steps} steps (η = {lr:.4g}), "
        f"estimated ~{secs(timings['estimate_seeded_nqf'])} s"
    )
    t0 = time.perf_counter()
    traj = go(steps)
    timings["seeded_nqf"] = time.perf_counter() - t0
    say(f"seeded NQF: {secs(timings['seeded_nqf'])} s")
    t = traj.t.numpy() if time_map is None else time_map(traj.t.numpy())
    return real_clock(pred, t, traj.loss.numpy(), sim.t.numpy(), sim.loss.numpy())


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
