"""The long runs of ``nqf.analyze`` and their estimates: the NQF simulation, the real network's full-batch GD
(at two larger steps, read on the clock of ``η`` by extrapolating in the step: :func:`nqf.curves.step_clock`),
the time and memory of each estimated before it starts from timed short runs and the array sizes, and the
process's peak memory measured."""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from dataclasses import dataclass, replace

import numpy as np
import torch

from ..._memory import process_memory, release_free_memory
from ...curves import StepClock, step_clock
from ...dynamics import GD, Save, Trajectory
from ...reductions import LV_MAX_ENTRIES
from ...reductions.saddles import search_cost
from ...structure import channel_split
from ._checks import estimate_row
from ._plan import Problem, RunPlan
from ._result import CheckRow

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
    data :data:`PREDICT_EVALUATIONS` timed operator evaluations; both on the units' channels where
    :func:`nqf.predict` works on them (:func:`nqf.structure.channel_split`)."""
    split = channel_split(op)
    op = op if split is None else split.op
    if not commuting or op.n_samples * op.n_outputs * op.p**2 > LV_MAX_ENTRIES:  # as nqf.predict decides
        seconds, per = search_cost(op, Y)
        return seconds, (
            f"prediction (saddle sequence, p = {op.p}, at most {min(op.p, n_outputs)} drops): saddle search and "
            f"first drop ~{secs(seconds)} s ({seconds / per:.0f} right-hand sides of {per * 1e3:.2f} ms)"
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
    its trajectory, the step clock that carried them (None: trained at ``η``) and a note when the run fell back
    to ``η``."""

    t: np.ndarray
    traj: Trajectory
    clock: StepClock | None = None
    note: str = ""

    @property
    def loss(self) -> np.ndarray:
        return self.traj.loss.numpy()


@dataclass(frozen=True)
class Runs:
    """What :func:`_estimate_and_run` made: the NQF trajectory ``sim``, the real run, the estimate's row of the
    checks, the process's peak memory estimated before the long runs (MiB) and the seconds of each part."""

    sim: Trajectory
    real: _RealRun
    estimate: CheckRow
    estimate_peak_mib: float
    timings: dict[str, float]


def _estimate_and_run(problem: Problem, plan: RunPlan, say) -> Runs:
    """Memory and time before the long runs (the sizes, the process's memory now, and timed runs of 3 and 13 steps
    of each run: :func:`_cost`; a row of the checks), then :func:`_runs`."""
    lr, steps, save_every, factor = plan.lr, plan.steps, plan.save_every, plan.real_step_factor
    (c_real, c_nqf), nbytes = _cost(problem, plan)
    n_real, sb = (two_step_counts(steps, factor)[0] if factor > 2 else steps), _state_bytes(problem.found)
    real = _real_seconds(c_real, n_real, save_every, sb)
    if factor > 2:
        real += _real_seconds(c_real, two_step_counts(steps, factor)[1], 1)
    nbytes += (n_real // _real_save_every(n_real, save_every, sb) + 2) * sb  # the real run's saved states
    total = real + c_nqf * steps
    now, peak = process_memory()
    peak_mib = round(max(peak or 0, (now or peak or 0) + nbytes) / 2**20, 1)
    where = f"; real network at {factor:g} η and {factor / 2:g} η" if factor > 2 else ""
    say(
        f"estimate: {steps} steps (η = {lr:.4g}{where}), ~{secs(total)} s, "
        f"{nbytes / 2**20:.0f} MiB of saved states: process peak ~{peak_mib:.0f} MiB"
    )
    release_free_memory()  # the timed runs' transient arrays: not resident during the long runs
    sim, real_run, timings = _runs(problem, plan, (c_nqf, c_real), say)
    return Runs(sim, real_run, estimate_row(total, nbytes), peak_mib, timings)


def _runs(problem: Problem, plan: RunPlan, costs: tuple, say) -> tuple[Trajectory, _RealRun, dict[str, float]]:
    """The NQF simulation and the real training, each announced with its estimate (timed steps × steps), with the
    seconds of each (estimated and taken).

    With ``factor > 2`` the real network trains at ``factor × lr`` and at half that step (about ``3.4/factor`` of
    the steps at ``lr`` together), and the second run's times are carried onto the clock of ``lr`` by the two runs'
    own delays (:func:`nqf.curves.step_clock`); if either diverges, the real network is trained at ``lr`` itself.
    """
    from ...dynamics import simulate

    lr, steps, form, save_every, factor = plan.lr, plan.steps, plan.form, plan.save_every, plan.real_step_factor
    nqf, found = problem.nqf, problem.found
    c_nqf, c_real = costs
    timings = {"estimate_nqf_simulation": c_nqf * steps}
    say(f"NQF simulation: {steps} steps ({form} form), estimated ~{secs(c_nqf * steps)} s")
    t0 = time.perf_counter()
    keep = _saved_state(found)
    sim = simulate(
        nqf.op, nqf.Y, W0=problem.W0, optimizer=GD(lr), save=replace(keep, every=save_every), steps=steps, form=form
    )
    sim = _shifted(sim, nqf.shift)
    timings["nqf_simulation"] = time.perf_counter() - t0
    timings["nqf_step"] = timings["nqf_simulation"] / max(steps, 1)
    say(f"NQF simulation: {secs(timings['nqf_simulation'])} s")
    W0_real = plan.init_factor * problem.W0

    def train(h: float, k: int, saving: Save, every: int, stage: str) -> Trajectory:
        traj, seconds = _train(problem, h, k, saving, every, W0=W0_real, c_real=c_real, say=say, stage=stage)
        timings.update(seconds)  # this function's own record: a later run of a stage replaces the earlier
        return traj

    if factor > 2:
        (n_half, n_big), h_half = two_step_counts(steps, factor), lr * factor / 2
        big = train(lr * factor, n_big, Save(M=False, W=False), 1, stage="real_training_large")
        half = train(h_half, n_half, keep, save_every, stage="real_training") if big.status == 0 else big
        if half.status == 0:
            clock = step_clock(_curve(half), _curve(big), steps=(h_half, lr * factor), h=lr)
            say(f"clock: the real network at {factor / 2:g} η reaches its loss levels {_delay_text(clock)} later")
            t = clock(half.t.numpy())
            n = max(2, int(np.searchsorted(t, lr * steps * (1 + 1e-9), side="right")))  # up to the horizon
            return sim, _RealRun(t[:n], half.head(n), clock), timings
        bad = f"{factor / 2 if big.status == 0 else factor:g}"
        say(f"real network diverged at {bad} η ({half.message}); repeated at η")
        real = train(lr, steps, keep, save_every, stage="real_training")
        note = f"The real network diverged at {bad}× the step η and was trained at η."
        return sim, _RealRun(real.t.numpy(), real, note=note), timings
    real = train(lr, steps, keep, save_every, stage="real_training")
    return sim, _RealRun(real.t.numpy(), real), timings


def two_step_counts(steps: int, factor: float) -> tuple[int, int]:
    """Steps of the two real runs at ``factor/2 × η`` and ``factor × η`` for ``steps`` steps at ``η``: 10 % and
    20 % past the horizon, so that after GD's delay (up to about 5 % and 9 % at 10 η and 20 η with η·r = 0.02;
    docs/analyze.md) the first reaches the horizon on the clock of ``η`` and the second every level of the first."""
    return int(math.ceil(steps * 2.2 / factor)) + 2, int(math.ceil(steps * 1.2 / factor)) + 2


def _curve(traj) -> tuple:
    return traj.t.numpy(), traj.loss.numpy()


def _delay_text(clock) -> str:
    d = clock.delay
    return f"{100 * d.min():.1f}–{100 * d.max():.1f} %" if d.size else "(no common loss level)"


def _train(problem: Problem, lr, steps, keep: Save, save_every, *, W0, c_real, say, stage):
    """Full-batch GD of the real network's units (a copy of the module) from ``W0``, announced and timed:
    ``(trajectory, {"estimate_<stage>": s, "<stage>": s, "real_step": s per step})``."""
    from ...dynamics import train_network

    found = problem.found
    sb = _state_bytes(found) if keep.W or keep.M else 0
    every = _real_save_every(steps, save_every, sb)
    estimate = _real_seconds(c_real, steps, save_every, sb)
    say(f"real network: {steps} steps of full-batch GD (η = {lr:.4g}), estimated ~{secs(estimate)} s")
    t0 = time.perf_counter()
    net = copy.deepcopy(problem.module)
    real = train_network(
        net, found.layout, problem.X, problem.Y, W0=W0, optimizer=GD(lr), save=replace(keep, every=every), steps=steps
    )
    seconds = time.perf_counter() - t0
    say(f"real network: {secs(seconds)} s")
    return real, {f"estimate_{stage}": estimate, stage: seconds, "real_step": seconds / max(steps, 1)}


#: The real run saves its states as densely as this many bytes allow (at least 300 states): its drop times are
#: crossings interpolated between saved points (the rank-4 teacher, ε = 1e-12: drop 1 came 1 % late from a save
#: every 18 steps at 10 η, the drop lasting a few saves).
DENSE_SAVE_BYTES = 64 * 2**20


def _real_save_every(steps: int, save_every: int, state_bytes: int = 0) -> int:
    """The real run saves every this many steps: every step where :data:`DENSE_SAVE_BYTES` allow, and never fewer
    than 300 saved states nor more sparsely than the NQF's cadence."""
    sparse = max(1, min(save_every, steps // 300))
    return min(sparse, max(1, math.ceil(steps * state_bytes / DENSE_SAVE_BYTES)))


def _real_seconds(c_real: tuple, steps: int, save_every: int, state_bytes: int = 0) -> float:
    """Estimated seconds of the real run: ``c_real = (per step, per step saving every step)``."""
    plain, each = c_real
    return (plain + max(each - plain, 0.0) / _real_save_every(steps, save_every, state_bytes)) * steps


def _shifted(traj, shift: float):
    """``traj`` with ``shift`` added to its losses (the NQF on moment rows: :mod:`nqf.app._study._moments`)."""
    return dataclasses.replace(traj, loss=traj.loss + shift) if shift else traj


def _cost(problem: Problem, plan: RunPlan):
    """``((real run's seconds per step without saves and saving every step), NQF run's seconds per step), bytes``:
    seconds per step of the real run, of the NQF run with its saves and without, and bytes of both runs.

    Each from timed runs of 3 and 13 steps (:func:`timed_step_cost`); a run's saves cost what a run that saves
    every step spends beyond one that saves nothing, divided by ``save_every`` (iris: the NQF simulation's
    estimate was a third of its time when the saves were left out).
    """
    from ...dynamics import simulate, train_network

    module, found, W0, op, Ynqf = problem.module, problem.found, problem.W0, problem.nqf.op, problem.nqf.Y
    lr, steps, form, save_every = plan.lr, plan.steps, plan.form, plan.save_every
    keep = _saved_state(found)

    def real(k: int, saving: Save):
        net = copy.deepcopy(module)
        return train_network(net, found.layout, problem.X, problem.Y, W0=W0, optimizer=GD(lr), steps=k, save=saving)

    c_real = (
        timed_step_cost(lambda k: real(k, Save(M=False, W=False)), steps),
        timed_step_cost(lambda k: real(k, replace(keep, every=1)), steps),
    )
    c_plain = timed_step_cost(
        lambda k: simulate(op, Ynqf, W0=W0, optimizer=GD(lr), save=Save(M=False, W=False), steps=k, form=form), steps
    )
    c_each = timed_step_cost(
        lambda k: simulate(op, Ynqf, W0=W0, optimizer=GD(lr), save=replace(keep, every=1), steps=k, form=form), steps
    )
    c_nqf = c_plain + max(c_each - c_plain, 0.0) / max(save_every, 1)
    n_saved = steps // save_every + 2  # the NQF's saved states (the real run's: _estimate_and_run)
    nbytes = n_saved * _state_bytes(found) + sum(v.numel() * 8 for v in module.parameters()) * 3
    return (c_real, c_nqf), nbytes


def _state_bytes(found) -> int:
    """Bytes of one saved state: the smaller of ``M`` (p × p) and ``W`` (p × m), float64 (:func:`_saved_state`)."""
    return 8 * found.p * min(found.p, found.n_units)


def _saved_state(found) -> Save:
    """Save the smaller of ``M`` (``p × p``) and ``W`` (``p × m``) at each saved step: the mode strengths
    ``qᵀ M q = ‖Wᵀ q‖²`` need only one (a CNN on digits, p = 650, m = 16: 50 MB of ``W`` instead of 4 GB of ``M``)."""
    small_w = found.n_units < found.p
    return Save(M=not small_w, W=small_w)
