r"""``nqf.analyze``: predict how a real network learns on real data, train it, compare, and judge.

Pipeline (docs/analyze.md):

1. data and model are validated; non-smooth layers are refused before any work;
2. the units are found (or named) and rescaled to ``M(0) = εI`` (``W(0) = √ε Qᵀ``;
   rank-deficient ``M(0) = εΠ`` when the width is below ``p``, see
   :mod:`nqf.curves._schedule`); every other parameter stays as the user built it;
3. structure operator (analytic where the family is recognised and agrees with the
   module's own, dense or matrix-free autodiff otherwise: :mod:`nqf.app._study._operators`) and
   assumption checks: symmetry, zero-gradient condition, commutation (two random
   adjoints; nothing dense), memory/time estimate;
4. prediction (:func:`nqf.predict`, a :class:`nqf.Staircase`): Lotka–Volterra
   reduction (commuting data) or greedy saddle sequence;
5. learning rate ``0.02 / largest escape rate`` and steps to ``1.5 t_K + 5``;
6. the NQF simulation (:func:`nqf.simulate`; weight form for ``ε ≤ 1e-13`` or
   width ``< p``) and the real module trained with full-batch GD from the same
   ``W(0)`` (:func:`nqf.train_network`);
7. comparison per plateau (:func:`nqf.curves.compare_staircase`), the
   validity of the quadratic regime, and a verdict.

Loss and time conventions: ``L = (1/N) Σ_n ½‖f_n − y_n‖²``, ``t = η · steps``.
"""

from __future__ import annotations

import copy
import dataclasses
import time

import numpy as np
import torch

from ..._memory import process_memory, release_free_memory
from ..._validation import eps_value
from ...curves import FLAT_THRESHOLD, compare_staircase, stable_learning_rate, step_count
from ...dynamics import initial_weights
from ...errors import InvalidParameterError
from .._data import Dataset, prepare
from ._checks import (
    check_activation_at_zero,
    check_commutation,
    check_error_order,
    check_smooth,
    check_symmetry,
    check_training_only,
    check_width,
    check_zgz,
    freeze_training_only,
    training_only_layers,
)
from ._clock import clock_sentences, seeded_clock
from ._crowded import with_crowded
from ._discover import analysed_module, choose_units
from ._models import build_model, check_users_forward
from ._notes import data_line, target_scale, trained_notes, training_only_notes
from ._operators import is_analytic, structure_of
from ._parts import Curves, Memory, Timings
from ._plan import Comparison, NQFData, Prepared, Problem, RunPlan
from ._predicted import ordered_prediction
from ._result import Analysis
from ._runs import _estimate_and_run, _prediction_estimate, _RealRun
from ._strengths import strength_reader
from ._verdict import judge, validity

__all__ = ["analyze", "prepare_analysis"]

#: Default run length ``t_end = HORIZON_MARGIN · t_K + HORIZON_EXTRA`` (``t_K`` the last predicted drop).
HORIZON_MARGIN, HORIZON_EXTRA = 1.5, 5.0
#: Below this ε the NQF is simulated in weight form (the order-parameter form is exact at larger ε).
WEIGHT_FORM_BELOW = 1e-13
#: The real network trains at this multiple of the table's step ``η`` (the default ``lr_fraction``'s) and at
#: half of it; its times are carried onto the clock of ``η`` by extrapolating in the step
#: (:func:`nqf.curves.step_clock`; the runs cost about 3.4/20 of one at ``η``).
REAL_STEP_FACTOR = 20.0


def _as_data(X, Y, name: str | None) -> Dataset:
    """A :class:`nqf.app.Dataset` as given; arrays prepared as ``nqf analyze --data`` prepares a file (the
    defaults of :func:`prepare`), what was assumed appended to ``preprocessing["task_rule"]`` (printed first)."""
    if isinstance(X, Dataset):
        return X
    if Y is None:
        from ...errors import ShapeError

        raise ShapeError("`Y` is required when `X` is an array (or pass a nqf.app.Dataset as `X`)")
    Xa = X.detach().cpu().numpy() if hasattr(X, "detach") else X
    Ya = Y.detach().cpu().numpy() if hasattr(Y, "detach") else Y
    data = prepare(Xa, Ya, name=name or "arrays")
    targets = "one-hot and centred" if data.preprocessing["one_hot"] else "centred"
    data.preprocessing["task_rule"] = (
        f"{data.preprocessing['task_rule']}; arrays prepared as `nqf analyze --data` prepares a file: inputs "
        f"standardised, targets {targets}; pass nqf.app.prepare(X, Y, task=..., standardize=False) to use them "
        "as given"
    )
    return data


def _check_builtin_shape(model, data: Dataset) -> None:
    """The built-in ``mlp:`` spec takes inputs of shape ``(N, D)``; other shapes need a model file."""
    from ...errors import ModelSpecError

    if isinstance(model, str) and ".py:" not in model and data.X.ndim != 2:
        raise ModelSpecError(
            f"`model`: the built-in spec {model!r} takes inputs of shape (N, D); found X of shape "
            f"{tuple(data.X.shape)}; pass a model file (--model FILE.py:FACTORY) for inputs of this shape"
        )


def prepare_analysis(
    model, X, Y=None, *, units: str | None = None, seed: int = 0, data_name: str | None = None
) -> Prepared:
    """The cheap, failing-early part: data, model, smoothness, units, as a :class:`~nqf.app._study.Prepared` record
    (``data``, ``module``, ``found``, ``desc``).

    The module is in eval mode: dropout and batch statistics (training-only layers, see
    :func:`nqf.app._study._checks.freeze_training_only`) are switched off for the whole analysis.

    Raises
    ------
    NQFError
        Bad data (NaN, mismatched lengths), a built-in spec on inputs that are not ``(N, D)``, a forward that
        fails or misbehaves (:func:`nqf.app._study._models.check_users_forward`: a ``ModelCodeError``), a non-smooth
        layer, no interchangeable units, an activation with ``σ(0) ≠ 0``.
    """
    data = _as_data(X, Y, data_name)
    desc = model if isinstance(model, str) else type(model).__name__
    _check_builtin_shape(model, data)
    module = build_model(model, data.n_features, data.n_outputs, seed=seed, n_samples=data.n_samples)
    if not isinstance(model, str):
        module = copy.deepcopy(module)
    freeze_training_only(module)
    check_users_forward(model, module, data.X, data.n_outputs)  # exits, hangs, in-place, random, NaN, detached
    check_smooth(module)
    found = choose_units(module, units)
    check_activation_at_zero(found)
    return Prepared(data, analysed_module(module, found), found, desc)


def analyze(
    model,
    X,
    Y=None,
    *,
    eps: float = 1e-6,
    units: str | None = None,
    lr: float | None = None,
    steps: int | None = None,
    max_steps: int | None = None,
    loss: str = "mse",
    seed: int = 0,
    lr_fraction: float = 0.02,
    save_points: int = 600,
    flat_threshold: float = FLAT_THRESHOLD,
    gap_tolerance: float = 0.05,
    data_name: str | None = None,
    init_factor: float = 1.0,
    real_step_factor: float | None = None,
    clock: bool = True,
    log=None,
) -> Analysis:
    r"""Predict, simulate, train and compare: how a real network learns on real data, and how far to trust it.

    Parameters
    ----------
    model : torch.nn.Module or str
        A module (copied, converted to float64; parameters outside the units are
        kept), a built-in spec (``"mlp:width=256,act=tanh"``) or ``"FILE.py:FACTORY"``.
    X : array_like, shape (N, D), or nqf.app.Dataset
        Inputs: arrays are prepared as ``nqf analyze --data`` prepares a file (:func:`nqf.app.prepare`'s
        defaults, said in the first progress line); a Dataset is used as given.
    Y : array_like, shape (N,) or (N, C)
        Targets (not needed with a Dataset).
    eps : float
        Initial scale: ``M(0) = εI`` (``W(0) = √ε Qᵀ``).
    units : str, optional
        Name of the layer of units (default: the first found).
    lr, steps : optional
        GD step and number of steps (default: ``0.02 / largest escape rate``, and
        steps to ``t = 1.5 t_K + 5``, ``t_K`` the last predicted drop).
    max_steps : int, optional
        Refuse (``InvalidParameterError``, before the timed runs) more steps than this, given or derived
        from ``lr`` (``nqf analyze`` passes ``--max-steps``, default 10⁷).
    loss : {"mse"}
        Only the mean-squared error has a staircase prediction.
    seed : int
        Seed of the model factory and of the initial frame ``Q``.
    lr_fraction : float
        ``η ×`` largest escape rate.
    save_points : int
        Saved points of each curve.
    flat_threshold : float
        Largest (loss change across the middle of a plateau) / (adjacent drop) of a flat plateau.
    gap_tolerance : float
        Relative gap ``|L_real − L_NQF| / L_NQF`` beyond which the network has left the NQF.
    init_factor : float
        Multiplies the real network's ``W(0)`` only (1: the same start as the NQF).
        A value ≠ 1 plants a wrong initial scale, for testing that the comparison notices.
    real_step_factor : float, optional
        The real network trains with GD at ``real_step_factor × η`` and at half that step (default
        :data:`REAL_STEP_FACTOR` when ``lr`` is not given, else 1); its times are carried onto the clock of
        ``η`` (the table's) by the two runs' own delays, extrapolated in the step
        (:func:`nqf.curves.step_clock`; within 0.11 % of GD at ``η`` on iris and digits).  At most 2: the
        real network at ``η`` itself.
    clock : bool
        Also run the seeded NQF (:func:`nqf.dynamics.seeded_nqf`, at the real network's two steps and
        carried onto the clock of ``η`` the same way) for the real network's clock and the seeding floors
        (:attr:`Analysis.clock`) when two or more drops are predicted.
    log : callable, optional
        Called with progress lines (the CLI prints them).

    Returns
    -------
    Analysis

    Raises
    ------
    NQFError
        Bad data or model (see :func:`prepare_analysis`), the zero-gradient condition failing,
        or a non-MSE loss.
    """
    say = log or (lambda s: None)
    steps, max_steps = _checked_steps(steps, max_steps)
    save_points, lr_fraction, seed = _checked_counts(save_points, lr_fraction, seed)
    eps = _checked_options(eps, loss, steps, max_steps, lr)  # before anything is computed
    t0 = time.perf_counter()
    prepared = prepare_analysis(model, X, Y, units=units, seed=seed, data_name=data_name)
    data, module, found = prepared.data, prepared.module, prepared.found
    say(data_line(data))
    say(f"units: {found.describe()}")
    trained = trained_notes(module, found, say)  # first in the verdict: what the analysis is about
    notes = training_only_notes(module, say)
    Xt = torch.as_tensor(data.X, dtype=torch.float64)
    Yt = torch.as_tensor(data.Y, dtype=torch.float64)
    op, f0, how = _operator(module, found, Xt, say)
    nqf_data = _moments(module, found, Xt, NQFData(op, Yt - f0 if is_analytic(how) else Yt), how, say)
    rows, commuting = _assumption_checks(module, found, Xt, nqf_data.op, f0, how, seed=seed)
    p, m = found.p, found.n_units
    setup = time.perf_counter() - t0

    estimate, line = _prediction_estimate(nqf_data.op, nqf_data.Y, data.n_outputs, commuting)
    say(line)
    W0 = initial_weights(p, m, eps, seed=seed)
    problem = Problem(module, found, Xt, Yt, op, f0, how, W0, nqf_data)
    ordered = ordered_prediction(problem, eps, commuting, lr_fraction, say, seed=seed)
    pred = ordered.staircase
    trained = [*trained, ordered.sentence] if ordered.sentence else trained
    if ordered.lr is not None:  # the quadratic form is silent: the first order with signal set the clock and step
        real_step_factor, clock, lr = 1.0, False, ordered.lr if lr is None else lr
    if real_step_factor is None:
        real_step_factor = REAL_STEP_FACTOR if lr is None else 1.0
    if lr is None:
        lr = stable_learning_rate(pred.rates, lr_fraction)
    # default: past the last drop far enough to see a network leave the NQF (width 64 on digits: t = 46)
    steps = _derived_steps(pred, lr, max_steps, ordered.later) if steps is None else steps
    form = "weights" if (eps <= WEIGHT_FORM_BELOW or m < p) else "order_parameter"
    plan = RunPlan(float(lr), int(steps), form, max(1, steps // save_points), float(real_step_factor), init_factor)

    runs = _estimate_and_run(problem, plan, say)
    sim, real = runs.sim, runs.real
    _check_curves(sim, real, lr, steps)
    notes = [*notes, real.note] if real.note else notes

    cmp = _compare(pred, nqf_data.op, sim, real, eps, found, flat_threshold=flat_threshold, gap_tolerance=gap_tolerance)
    seeded_plan = plan if real.clock is not None else dataclasses.replace(plan, real_step_factor=1.0)
    seeded, seeded_timings = seeded_clock(clock, problem, seeded_plan, pred, sim, say)
    release_free_memory()  # the runs' transient arrays: not resident while the report is drawn
    warnings = [n for n in pred.notes if n.startswith("warning:")] + target_scale(data, cmp.validity)
    closing = (*clock_sentences(seeded, cmp.real.times_measured), *notes, *warnings)
    verdict = dataclasses.replace(cmp.verdict, text=(*trained, *cmp.verdict.text, *closing))
    timings = {"setup": setup, "estimate_prediction": estimate, **ordered.timings, **runs.timings, **seeded_timings}
    return Analysis(
        model=prepared.desc,
        data=data.name,
        units=found.describe(),
        operator=how,
        p=p,
        width=m,
        n_samples=data.n_samples,
        n_outputs=data.n_outputs,
        eps=eps,
        lr=float(lr),
        steps=int(steps),
        checks=(*rows, runs.estimate),
        prediction=pred,
        nqf=cmp.nqf,
        real=cmp.real,
        validity=cmp.validity,
        verdict=verdict,
        curves=cmp.curves,
        timings=Timings.of(timings),
        task=data.task,
        classes=tuple(data.classes),
        notes=(*trained, *notes),
        clock=seeded,
        memory=Memory(runs.estimate_peak_mib, _peak_mib()),
    )


def _peak_mib() -> float | None:
    """The process's peak resident memory so far, MiB (None where the platform does not tell)."""
    peak = process_memory()[1]
    return None if peak is None else round(peak / 2**20, 1)


def check_step_budget(steps: int | None, max_steps: int | None, lr: float | None = None) -> None:
    """Refuse (``InvalidParameterError``) a run past ``max_steps`` before anything is computed: ``steps`` when
    given; else, with ``lr`` given, when even the fixed part of the horizon (``t = HORIZON_EXTRA``, reached by
    every run: ``t_end = 1.5 t_K + 5``) needs more steps.  ``--lr 1e-300`` is refused here, before the prediction;
    an ``lr`` that passes may still be refused from the predicted drop times (:func:`_derived_steps`)."""
    if max_steps is None:
        return
    if steps is not None:
        if steps > max_steps:
            raise InvalidParameterError(f"`steps`: at most max_steps={max_steps} (--max-steps); found {steps}")
        return
    if lr is not None and HORIZON_EXTRA / float(lr) > max_steps:
        raise InvalidParameterError(
            f"`lr`: η = {float(lr):.4g} needs more than {HORIZON_EXTRA / float(lr):.4g} GD steps (every run goes "
            f"past t = {HORIZON_EXTRA:g}); at most max_steps={max_steps} (--max-steps) are run: choose a larger "
            "--lr, or --steps"
        )


def _derived_steps(pred, lr: float, max_steps: int | None, later: float | None = None) -> int:
    """Steps to ``1.5 t_K + 5`` at step ``lr``; refused (``InvalidParameterError``) above ``max_steps``.  ``later``:
    a higher order's escape time (:func:`relation_order`), covered too when that stays within ``max_steps``."""
    if later is not None:
        with_later = step_count([*pred.times, later], lr, margin=HORIZON_MARGIN, extra=HORIZON_EXTRA)
        if max_steps is None or with_later <= max_steps:
            return with_later
    try:
        steps = step_count(pred.times, lr, margin=HORIZON_MARGIN, extra=HORIZON_EXTRA)
    except (OverflowError, ValueError):  # lr so small that the count is not even a finite number
        steps = None
    if max_steps is not None and (steps is None or steps > max_steps):
        hint = "choose a larger --lr, or --steps"
        if pred.method == "dormant-flow":  # a power of 1/ε: a larger ε is what shortens it
            hint = f"{pred.notes[-1]}: a larger --eps brings the escapes earlier, or give --lr / --steps"
        raise InvalidParameterError(
            f"`lr`: η = {lr:.4g} needs {'more than ' + str(max_steps) if steps is None else steps} GD steps to "
            f"reach past the last predicted drop (t = {float(np.max(pred.times)):.4g}); at most max_steps="
            f"{max_steps} (--max-steps) are run: {hint}"
        )
    assert steps is not None
    return steps


def _check_curves(sim, real, lr: float, steps: int) -> None:
    """Both runs saved at least two states (a curve to compare), else ``InvalidParameterError`` naming ``lr``:
    a step so large that a run stopped (diverged) at its first step, or a run of one step."""
    n_sim, n_real = len(sim.t), len(real.t)
    if min(n_sim, n_real) < 2:
        raise InvalidParameterError(
            f"`lr`: η = {float(lr):.4g} over {steps} GD step(s) leaves {min(n_sim, n_real)} saved state(s) of the "
            f"{'NQF simulation' if n_sim < 2 else 'real network'} (it diverged at its first step, or the run is one "
            "step long): nothing to compare; choose a smaller --lr or more --steps"
        )


def _compare(pred, op, sim, real: _RealRun, eps: float, found, *, flat_threshold: float, gap_tolerance: float):
    """Both runs against the prediction, the validity of the quadratic regime, the verdict and the curves.

    The real run is judged on its own saved states at their times on the table's clock (``real.t``); the
    curves, the figure and the validity test put it on the NQF's saved times (linear interpolation where
    the two runs saved at different times)."""
    strengths = strength_reader(pred.directions, op)
    ts, Ln = sim.t.numpy(), sim.loss.numpy()
    same = len(real.t) == len(ts) and np.array_equal(real.t, ts)
    n = min(len(sim), len(real.t)) if same else int(np.searchsorted(ts, real.t[-1] * (1 + 1e-12), side="right"))
    t, Ln = ts[:n], Ln[:n]
    cmp_nqf = compare_staircase(t, Ln, pred, flat_threshold=flat_threshold)
    cmp_real = compare_staircase(real.t, real.loss, pred, flat_threshold=flat_threshold)
    s_real = strengths(real.traj, len(real.t))
    if same:
        Lr, s_real = real.loss[:n], s_real[:n]
    else:
        Lr = np.interp(t, real.t, real.loss)
        s_real = np.stack([np.interp(t, real.t, col) for col in s_real.T], 1) if s_real.shape[1] else s_real[:n]
    val = validity(t, Lr, Ln, torch.as_tensor(sim.step)[:n].numpy(), pred, gap_tolerance)
    verdict = with_crowded(judge(pred, cmp_nqf, cmp_real, val, eps, width=found.n_units, p=found.p), pred, t, Lr, Ln)
    curves = Curves(t, Lr, Ln, pred.loss_curve(t), strength_real=s_real, strength_nqf=strengths(sim, n))
    return Comparison(cmp_nqf, cmp_real, val, verdict, curves)


def _moments(module, found, Xt, data: NQFData, how: str, say) -> NQFData:
    """The NQF's operator and targets on ``D`` moment rows when that is exact (:mod:`nqf.app._study._moments`),
    with the loss offset and the rows ``X̃``; else ``data`` (the NQF on the data themselves)."""
    from ._moments import compressible, moment_rows

    if not compressible(found, how, Xt):
        return data
    Xc, Yc, shift = moment_rows(Xt, data.Y)
    op_c, _, how_c = structure_of(module, found, Xc)
    if how_c != how:  # the analytic operator did not check out on the moment rows: keep the full data
        return data
    say(f"NQF data: {Xt.shape[0]} samples → {Xc.shape[0]} moment rows (exact for this MLP; loss offset {shift:.4g})")
    return NQFData(op_c, Yc, shift, Xc)


def _checked_steps(steps, max_steps) -> tuple[int | None, int | None]:
    """``analyze``'s step counts as positive integers (or None), or an error naming the keyword."""
    from ..._validation import int_param

    steps = None if steps is None else int_param("steps", steps, minimum=1)
    return steps, None if max_steps is None else int_param("max_steps", max_steps, minimum=1)


def _checked_counts(save_points, lr_fraction, seed) -> tuple[int, float, int]:
    """``analyze``'s other counts and its step fraction as the types they must be, or an error naming the keyword."""
    from ..._validation import float_param, int_param

    return (
        int_param("save_points", save_points, minimum=1),
        float_param("lr_fraction", lr_fraction, positive=True),
        int_param("seed", seed, minimum=0),
    )


def _checked_options(eps, loss: str, steps: int | None = None, max_steps: int | None = None, lr=None) -> float:
    """``eps`` as a float in (0, 1); ``loss`` must be ``"mse"`` (the only loss with a predicted staircase);
    ``steps`` (or the steps ``lr`` needs at least) at most ``max_steps``."""
    from ..._validation import float_param

    if lr is not None:
        lr = float_param("lr", lr, positive=True)
    check_step_budget(steps, max_steps, lr)
    eps = eps_value(eps)
    if loss != "mse":
        raise InvalidParameterError(f"`loss` must be 'mse' (the staircase is predicted for MSE); found {loss!r}")
    return eps


def _operator(module, found, Xt, say):
    """:func:`structure_of`, with a progress line saying which operator it is and how long it took."""
    t0 = time.perf_counter()
    op, f0, how = structure_of(module, found, Xt)
    say(f"structure operator: {how} ({time.perf_counter() - t0:.1f} s)")
    return op, f0, how


def _assumption_checks(module, found, Xt, op, f0, how: str, *, seed: int):
    """The assumption rows (smoothness, symmetry, zero-gradient condition, commutation, width) and ``commuting``."""
    rows = [check_smooth(module, found=found, X=Xt)]
    rows.append(check_symmetry(module, found.layout, Xt, seed=seed))
    rows.append(check_zgz(op, f0, how, found.activation))
    rows.append(check_error_order(module, found, Xt, seed=seed))
    row, commuting = check_commutation(op)
    rows.append(row)
    rows.append(check_width(found.n_units, found.p))
    rows.append(check_training_only(training_only_layers(module)))
    return rows, commuting
