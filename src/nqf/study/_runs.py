"""The long runs of ``nqf.analyze`` and their estimates: the NQF simulation, the real network's full-batch GD
(at a larger step, read on the clock of ``η`` through the NQF run at both steps), the time and memory of each
estimated before it starts from timed short runs and the array sizes, and the process's peak memory measured."""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from .._memory import process_memory, release_free_memory
from ..dynamics import Trajectory
from ..reductions import LV_MAX_ENTRIES
from ..reductions.saddles import SEARCH_EVALUATIONS, search_cost
from ._checks import estimate_row

#: Operator evaluations (``forward_factor`` + ``adjoint_apply``) assumed for the Lotka–Volterra reduction of
#: commuting data (:func:`_prediction_estimate`; the saddle search's old count, not measured for this reduction:
#: no row of ``bench_analyze_models.py`` commutes; the saddle sequence prices itself, ``search_cost``).
PREDICT_EVALUATIONS = 12_000


def secs(x: float) -> str:
    """Seconds for a progress line: two significant digits below 10 s, whole seconds above."""
    return f"{x:.0f}" if x >= 10 else f"{x:.2g}"


#: A step whose one-step run takes longer than this (seconds) is timed from runs of 1 and 2 steps instead of 3 and 13.
SLOW_STEP = 0.2


def timed_step_cost(fn, steps: int) -> float:
    """Seconds per step of a run of ``steps`` steps: ``fn(k)`` timed at ``k = 3`` and ``k = 13``; the difference
    is the marginal cost of a step, the rest the run's fixed cost (set-up, saves), spread over ``steps``.
    (A 3-step run divided by 3 counted the fixed cost 3 times per step: wine's NQF estimated at 2 s, ran in
    0.1 s.)  A one-step run comes first; when it takes longer than :data:`SLOW_STEP` the step dominates any
    fixed cost and the runs are of 1 and 2 steps (the 10⁵-sample mixture's real network, 1.8 s a step: 16
    timed steps per estimate were 29 s of its analysis)."""
    t0 = time.perf_counter()
    fn(1)
    t1 = time.perf_counter() - t0
    lo, hi = (1, 2) if t1 > SLOW_STEP else (3, 13)
    if lo == 1:
        t_lo = t1
    else:
        t0 = time.perf_counter()
        fn(lo)
        t_lo = time.perf_counter() - t0
    t0 = time.perf_counter()
    fn(hi)
    t_hi = time.perf_counter() - t0
    per_step = max((t_hi - t_lo) / (hi - lo), t_hi / hi * 0.1)
    fixed = max(t_lo - lo * per_step, 0.0)
    return per_step + fixed / max(int(steps), 1)


def _prediction_estimate(op, Y, n_outputs: int, commuting: bool) -> tuple[float, str]:
    """The time of the prediction's first phase, before it runs: for the saddle sequence its search with the
    first orbit (:func:`nqf.reductions.saddles.search_cost`, right-hand sides timed on this problem; the O(1)
    clock of the later drops is estimated by :func:`nqf.predict` once the drops are known), for commuting
    data :data:`PREDICT_EVALUATIONS` timed operator evaluations."""
    if not commuting or op.n_samples * op.n_outputs * op.p**2 > LV_MAX_ENTRIES:  # as nqf.predict decides
        seconds, per = search_cost(op, Y)
        return seconds, (
            f"prediction (saddle sequence, p = {op.p}, at most {min(op.p, n_outputs)} drops): saddle search and "
            f"first drop ~{secs(seconds)} s ({SEARCH_EVALUATIONS} right-hand sides of {per * 1e3:.2f} ms)"
        )
    gen = torch.Generator().manual_seed(0)
    L = torch.randn(op.p, 2, generator=gen, dtype=op.dtype)
    R = torch.randn(op.n_samples, op.n_outputs, generator=gen, dtype=op.dtype)
    t0 = time.perf_counter()
    for _ in range(3):
        op.forward_factor(L)
        op.adjoint_apply(R, L)
    pair = (time.perf_counter() - t0) / 3
    seconds = PREDICT_EVALUATIONS * pair
    return seconds, (
        f"prediction (Lotka–Volterra, p = {op.p}, at most {min(op.p, n_outputs)} drops): "
        f"~{secs(seconds)} s ({PREDICT_EVALUATIONS} operator evaluations of {pair * 1e3:.2f} ms)"
    )


@dataclass(frozen=True)
class _RealRun:
    """The real network's run read on the table's clock: ``t`` (times of its saved states on the clock of ``η``),
    its trajectory, the clock's anchors and a note when the run fell back to ``η``."""

    t: np.ndarray
    traj: Trajectory
    anchors: tuple = ()
    note: str = ""

    @property
    def loss(self) -> np.ndarray:
        return self.traj.loss.numpy()


def _estimate_and_run(ctx, init_factor, lr, steps, form, save_every, factor, rows, timings, say, memory, **kw):
    """Memory and time before the long runs (the sizes, the process's memory now, and timed runs of 3 and 13 steps
    of each run: :func:`_cost`; a row of the checks), then :func:`_runs`."""
    module, found, Xt, Yt, op, Ynqf, W0 = ctx
    (c_real, c_nqf, c_plain), nbytes = _cost(
        module, found, Xt, Yt, op, Ynqf, W0, lr=lr, steps=steps, form=form, save_every=save_every
    )
    n_real = max(1, int(steps / factor))
    total = _real_seconds(c_real, n_real, save_every) + (c_nqf + c_plain / factor) * steps
    rows.append(estimate_row(total, nbytes))
    now, peak = process_memory()
    memory["estimate_peak_mib"] = round(max(peak or 0, (now or peak or 0) + nbytes) / 2**20, 1)
    say(
        f"estimate: {steps} steps (η = {lr:.4g}; real network at {factor:g} η), ~{secs(total)} s, "
        f"{nbytes / 2**20:.0f} MiB of saved states: process peak ~{memory['estimate_peak_mib']:.0f} MiB"
    )
    release_free_memory()  # the timed runs' transient arrays: not resident during the long runs
    args = (init_factor * W0, W0, lr, steps, form, save_every, (c_nqf, c_real, c_plain), timings, say)
    return _runs(module, found, Xt, Yt, op, Ynqf, *args, factor=factor, **kw)


def _runs(module, found, Xt, Yt, op, Ynqf, W0_real, W0, lr, steps, form, save_every, costs, timings, say, **kw):
    """The NQF simulation and the real training, each announced with its estimate (timed steps × steps).

    With ``factor > 1`` the real network trains at ``factor × lr`` (``factor`` times fewer steps) and its times
    are carried onto the clock of ``lr`` by :func:`_clock_map`; a run that diverges at the larger step is
    repeated at ``lr``.
    """
    from ..dynamics import simulate

    factor, shift = kw["factor"], kw["shift"]
    c_nqf, c_real, c_plain = costs
    timings["estimate_nqf_simulation"] = c_nqf * steps
    say(f"NQF simulation: {steps} steps ({form} form), estimated ~{secs(c_nqf * steps)} s")
    t0 = time.perf_counter()
    keep = _saved_state(found)
    sim = _shifted(simulate(op, Ynqf, W0=W0, lr=lr, steps=steps, form=form, save_every=save_every, **keep), shift)
    timings["nqf_simulation"] = time.perf_counter() - t0
    timings["nqf_step"] = timings["nqf_simulation"] / max(steps, 1)
    say(f"NQF simulation: {secs(timings['nqf_simulation'])} s")
    anchors, big_steps = ((0.0,), (0.0,)), steps
    if factor > 1:
        t0 = time.perf_counter()
        n_big = int(math.ceil(steps / factor * 1.1)) + 2  # GD's delay at the larger step: a few per cent
        timings["estimate_nqf_clock"] = c_plain * n_big
        say(f"clock: the NQF at {factor:g} η, {n_big} steps, estimated ~{secs(c_plain * n_big)} s")
        big = simulate(
            op, Ynqf, W0=W0, lr=lr * factor, steps=n_big, form=form, save_every=1, save_M=False, save_W=False
        )
        big = _shifted(big, shift)
        anchors = _clock_map(sim, big)
        t_end = steps * lr
        big_steps = max(1, int(math.ceil(_inverse_clock(t_end, anchors) / (lr * factor))))
        timings["nqf_clock"] = time.perf_counter() - t0
        say(
            f"clock: the NQF at {factor:g} η reaches its loss levels {_delay_text(anchors)} later; "
            f"real network: {big_steps} steps at {factor:g} η"
        )
    real = _train(module, found, Xt, Yt, W0_real, lr * factor, big_steps, keep, save_every, c_real, timings, say)
    if factor > 1 and real.status == 0:
        return sim, _RealRun(_clock(real.t.numpy(), anchors), real, anchors)
    if factor > 1:  # diverged at the larger step: the real network at η itself
        say(f"real network diverged at {factor:g} η ({real.message}); repeated at η")
        real = _train(module, found, Xt, Yt, W0_real, lr, steps, keep, save_every, c_real, timings, say)
        note = f"The real network diverged at {factor:g}× the step η and was trained at η."
        return sim, _RealRun(real.t.numpy(), real, note=note)
    return sim, _RealRun(real.t.numpy(), real)


def _train(module, found, Xt, Yt, W0, lr, steps, keep, save_every, c_real, timings, say):
    """Full-batch GD of the real network's units (a copy of ``module``), announced and timed."""
    from ..dynamics import train_network

    every = _real_save_every(steps, save_every)
    timings["estimate_real_training"] = _real_seconds(c_real, steps, save_every)
    say(
        f"real network: {steps} steps of full-batch GD (η = {lr:.4g}), "
        f"estimated ~{secs(timings['estimate_real_training'])} s"
    )
    t0 = time.perf_counter()
    net = copy.deepcopy(module)
    real = train_network(net, found.layout, Xt, Yt, W0=W0, lr=lr, steps=steps, save_every=every, **keep)
    timings["real_training"] = time.perf_counter() - t0
    timings["real_step"] = timings["real_training"] / max(steps, 1)
    say(f"real network: {secs(timings['real_training'])} s")
    return real


def _real_save_every(steps: int, save_every: int) -> int:
    """The real run saves every this many steps: at least 300 saved states, at most the NQF's cadence."""
    return max(1, min(save_every, steps // 300))


def _real_seconds(c_real: tuple, steps: int, save_every: int) -> float:
    """Estimated seconds of the real run: ``c_real = (per step, per step saving every step)``."""
    plain, each = c_real
    return (plain + max(each - plain, 0.0) / _real_save_every(steps, save_every)) * steps


def _seeded_steps(real: _RealRun, lr: float, steps: int) -> tuple:
    """``(step, steps, time map)`` of the seeded NQF: the real network's step and count, and the same clock map
    onto ``η`` (the seeded NQF follows the NQF's discrete dynamics, whose delay the map measures)."""
    if not real.anchors:
        return lr, steps, None
    assert real.traj.step is not None  # train_network saves its steps
    big_steps = int(real.traj.step[-1])
    big_lr = float(real.traj.t[-1]) / big_steps
    return big_lr, big_steps, (lambda t: _clock(t, real.anchors))


#: Loss levels at which the two NQF runs are matched (:func:`_clock_map`).
CLOCK_LEVELS = 200


def _clock_map(sim, big) -> tuple:
    """Anchors ``(times at the larger step, times at η)`` of the clock map: ``(0, 0)`` and the first downward
    crossings of :data:`CLOCK_LEVELS` loss levels, evenly spaced over the range both NQF runs cover, by each run.

    GD at step ``η`` reaches a drop later than the gradient flow (a mode grows by ``1 + η r/2`` per step instead
    of ``e^{η r/2}``); the NQF at both steps measures that delay along the whole staircase, and the real network,
    which follows the NQF, is delayed the same way up to the product of its gap to the NQF and the delay
    (digits, width 256: the same table to 0.05 %, with the real network at 10× and 12.5× the step).
    """
    tb, Lb, ts, Ls = big.t.numpy(), big.loss.numpy(), sim.t.numpy(), sim.loss.numpy()
    lo, hi = max(Lb.min(), Ls.min()), min(Lb[0], Ls[0])
    xs, ys = [0.0], [0.0]
    for level in np.linspace(hi, lo, CLOCK_LEVELS)[1:-1]:
        x, y = _first_crossing(tb, Lb, level), _first_crossing(ts, Ls, level)
        if np.isfinite(x) and np.isfinite(y) and x > xs[-1] and y > ys[-1]:
            xs.append(x)
            ys.append(y)
    return tuple(xs), tuple(ys)


def _first_crossing(t: np.ndarray, L: np.ndarray, level: float) -> float:
    """The first time ``L`` falls to ``level`` (linear between saved points); NaN if it never does."""
    below = np.flatnonzero(level >= L)
    i = int(below[0]) if below.size else 0
    if i == 0:
        return math.nan
    return float(t[i - 1] + (level - L[i - 1]) * (t[i] - t[i - 1]) / (L[i] - L[i - 1]))


def _clock(t: np.ndarray, anchors: tuple) -> np.ndarray:
    """Times of the larger-step run on the clock of ``η``: linear between anchors, shifted beyond the last."""
    xs, ys = (np.asarray(a) for a in anchors)
    out = np.interp(t, xs, ys)
    over = t > xs[-1]
    out[over] = t[over] - xs[-1] + ys[-1]
    return out


def _inverse_clock(t: float, anchors: tuple) -> float:
    xs, ys = anchors
    return float(np.interp(t, ys, xs)) if t <= ys[-1] else t - ys[-1] + xs[-1]


def _delay_text(anchors: tuple) -> str:
    xs, ys = (np.asarray(a[1:]) for a in anchors)
    if not xs.size:
        return "(no common loss level)"
    d = 100 * (xs / ys - 1)
    return f"{d.min():.1f}–{d.max():.1f} %"


def _shifted(traj, shift: float):
    """``traj`` with ``shift`` added to its losses (the NQF on moment rows: :mod:`nqf.study._moments`)."""
    return dataclasses.replace(traj, loss=traj.loss + shift) if shift else traj


def _cost(module, found, Xt, Yt, op, Ynqf, W0, *, lr: float, steps: int, form: str, save_every: int):
    """Seconds per step of the real run, of the NQF run with its saves and without, and bytes of both runs.

    Each from timed runs of 3 and 13 steps (:func:`timed_step_cost`); a run's saves cost what a run that saves
    every step spends beyond one that saves nothing, divided by ``save_every`` (iris: the NQF simulation's
    estimate was a third of its time when the saves were left out).
    """
    from ..dynamics import simulate, train_network

    keep = _saved_state(found)

    def real(k: int, saving: dict):
        return train_network(copy.deepcopy(module), found.layout, Xt, Yt, W0=W0, lr=lr, steps=k, **saving)

    c_real = (
        timed_step_cost(lambda k: real(k, {"save_W": False, "save_M": False}), steps),
        timed_step_cost(lambda k: real(k, {**keep, "save_every": 1}), steps),
    )
    c_plain = timed_step_cost(
        lambda k: simulate(op, Ynqf, W0=W0, lr=lr, steps=k, form=form, save_M=False, save_W=False), steps
    )
    c_each = timed_step_cost(
        lambda k: simulate(op, Ynqf, W0=W0, lr=lr, steps=k, form=form, save_every=1, **keep), steps
    )
    c_nqf = c_plain + max(c_each - c_plain, 0.0) / max(save_every, 1)
    n_saved = steps // save_every + 2
    per_state = found.p * min(found.p, found.n_units)  # the smaller of M (p × p) and W (p × m): _saved_state
    nbytes = 2 * n_saved * per_state * 8 + sum(v.numel() * 8 for v in module.parameters()) * 3
    return (c_real, c_nqf, c_plain), nbytes


def _saved_state(found) -> dict:
    """Save the smaller of ``M`` (``p × p``) and ``W`` (``p × m``) at each saved step: the mode strengths
    ``qᵀ M q = ‖Wᵀ q‖²`` need only one (a CNN on digits, p = 650, m = 16: 50 MB of ``W`` instead of 4 GB of ``M``)."""
    small_w = found.n_units < found.p
    return {"save_M": not small_w, "save_W": small_w}
