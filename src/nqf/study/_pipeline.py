r"""``nqf.analyze``: predict how a real network learns on real data, train it, compare, and judge.

Pipeline (docs/analyze.md):

1. data and model are validated; non-smooth layers are refused before any work;
2. the units are found (or named) and rescaled to ``M(0) = εI`` (``W(0) = √ε Qᵀ``;
   rank-deficient ``M(0) = εΠ`` when the width is below ``p``, see
   :mod:`nqf.curves._schedule`); every other parameter stays as the user built it;
3. structure operator (analytic where the family is recognised and agrees with the
   module's own, dense or matrix-free autodiff otherwise: :mod:`nqf.study._operators`) and
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
import time

import numpy as np
import torch

from ..curves import FLAT_THRESHOLD, compare_staircase, stable_learning_rate, step_count
from ..data import Dataset, prepare
from ..dynamics import initial_weights
from ..reductions import predict
from ._checks import (
    check_activation_at_zero,
    check_commutation,
    check_smooth,
    check_symmetry,
    check_training_only,
    check_width,
    check_zgz,
    estimate_row,
    freeze_training_only,
    training_only_layers,
)
from ._crowded import add_crowded
from ._discover import choose_units
from ._models import build_model
from ._operators import is_analytic, structure_of
from ._result import Analysis
from ._verdict import judge, validity

__all__ = ["analyze", "prepare_analysis"]

#: Default run length ``t_end = HORIZON_MARGIN · t_K + HORIZON_EXTRA`` (``t_K`` the last predicted drop).
HORIZON_MARGIN, HORIZON_EXTRA = 1.5, 5.0
#: Below this ε the NQF is simulated in weight form (the order-parameter form is exact at larger ε).
WEIGHT_FORM_BELOW = 1e-13
#: Operator evaluations (``forward_factor`` + ``adjoint_apply``) of the saddle search and its first orbit
#: (the cost model of :func:`_prediction_estimate`).
PREDICT_EVALUATIONS = 12_000


def _as_data(X, Y, name: str | None) -> Dataset:
    if isinstance(X, Dataset):
        return X
    if Y is None:
        from ..errors import ShapeError

        raise ShapeError("`Y` is required when `X` is an array (or pass a nqf.data.Dataset as `X`)")
    Xa = X.detach().cpu().numpy() if hasattr(X, "detach") else X
    Ya = Y.detach().cpu().numpy() if hasattr(Y, "detach") else Y
    return prepare(Xa, Ya, task="regression", standardize=False, one_hot=False, center=False, name=name or "arrays")


def _check_builtin_shape(model, data: Dataset) -> None:
    """The built-in ``mlp:`` spec takes inputs of shape ``(N, D)``; other shapes need a model file."""
    from ..errors import ModelSpecError

    if isinstance(model, str) and ".py:" not in model and data.X.ndim != 2:
        raise ModelSpecError(
            f"`model`: the built-in spec {model!r} takes inputs of shape (N, D); found X of shape "
            f"{tuple(data.X.shape)}; pass a model file (--model FILE.py:FACTORY) for inputs of this shape"
        )


def prepare_analysis(model, X, Y=None, *, units: str | None = None, seed: int = 0, data_name: str | None = None):
    """The cheap, failing-early part: data, model, smoothness, units.  Returns ``(data, module, found, desc)``.

    The module is in eval mode: dropout and batch statistics (training-only layers, see
    :func:`nqf.study._checks.freeze_training_only`) are switched off for the whole analysis.

    Raises
    ------
    NQFError
        Bad data (NaN, mismatched lengths), a built-in spec on inputs that are not ``(N, D)``, a non-smooth
        layer, no interchangeable units, an activation with ``σ(0) ≠ 0``.
    """
    data = _as_data(X, Y, data_name)
    desc = model if isinstance(model, str) else type(model).__name__
    _check_builtin_shape(model, data)
    module = build_model(model, data.n_features, data.n_outputs, seed=seed)
    if not isinstance(model, str):
        module = copy.deepcopy(module)
    freeze_training_only(module)
    check_smooth(module)
    found = choose_units(module, units)
    check_activation_at_zero(found)
    return data, module, found, desc


def _timed_step_cost(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) / 3.0


def analyze(
    model,
    X,
    Y=None,
    *,
    eps: float = 1e-6,
    units: str | None = None,
    lr: float | None = None,
    steps: int | None = None,
    loss: str = "mse",
    seed: int = 0,
    lr_fraction: float = 0.02,
    save_points: int = 600,
    flat_threshold: float = FLAT_THRESHOLD,
    gap_tolerance: float = 0.05,
    data_name: str | None = None,
    init_factor: float = 1.0,
    log=None,
) -> Analysis:
    r"""Predict, simulate, train and compare: how a real network learns on real data, and how far to trust it.

    Parameters
    ----------
    model : torch.nn.Module or str
        A module (copied, converted to float64; parameters outside the units are
        kept), a built-in spec (``"mlp:width=256,act=tanh"``) or ``"FILE.py:FACTORY"``.
    X : array_like, shape (N, D), or nqf.data.Dataset
        Inputs (used as given; :func:`nqf.data.load_dataset` prepares bundled data and files).
    Y : array_like, shape (N,) or (N, C)
        Targets (not needed with a Dataset).
    eps : float
        Initial scale: ``M(0) = εI`` (``W(0) = √ε Qᵀ``).
    units : str, optional
        Name of the layer of units (default: the first found).
    lr, steps : optional
        GD step and number of steps (default: ``0.02 / largest escape rate``, and
        steps to ``t = 1.5 t_K + 5``, ``t_K`` the last predicted drop).
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
    eps = _checked_options(eps, loss)
    timings = {}
    t0 = time.perf_counter()
    data, module, found, desc = prepare_analysis(model, X, Y, units=units, seed=seed, data_name=data_name)
    say(_data_line(data))
    say(f"units: {found.describe()}")
    notes = _training_only_notes(module, say)
    Xt = torch.as_tensor(data.X, dtype=torch.float64)
    Yt = torch.as_tensor(data.Y, dtype=torch.float64)
    op, f0, how = _operator(module, found, Xt, say)
    Ynqf = Yt - f0 if is_analytic(how) else Yt
    rows, commuting = _assumption_checks(module, found, Xt, op, f0, how, seed=seed)
    p, m = found.p, found.n_units
    timings["setup"] = time.perf_counter() - t0

    say(_prediction_estimate(op, data.n_outputs, commuting))
    t0 = time.perf_counter()
    W0 = initial_weights(p, m, eps, seed=seed)
    M0 = W0 @ W0.T if m < p else None
    pred = predict(op, Ynqf, eps, commuting=commuting, M0=M0, log=say)
    timings["prediction"] = time.perf_counter() - t0
    say(f"prediction: {pred.method}, {pred.n_drops} drops, levels {pred.levels[0]:.4g} → {pred.levels[-1]:.4g}")
    if lr is None:
        lr = stable_learning_rate(pred.rates, lr_fraction)
    if steps is None:  # past the last drop far enough to see a network leave the NQF (width 64 on digits: t = 46)
        steps = step_count(pred.times, lr, margin=HORIZON_MARGIN, extra=HORIZON_EXTRA)
    save_every = max(1, steps // save_points)
    form = "weights" if (eps <= WEIGHT_FORM_BELOW or m < p) else "order_parameter"

    # memory and time, before the long runs: sizes and three timed steps of each
    (c_real, c_nqf), nbytes = _cost(
        module, found, Xt, Yt, op, Ynqf, W0, lr=lr, steps=steps, form=form, save_every=save_every
    )
    rows.append(estimate_row((c_real + c_nqf) * steps, nbytes))
    say(f"estimate: {steps} steps (η = {lr:.4g}), ~{(c_real + c_nqf) * steps:.0f} s, {nbytes / 2**20:.0f} MiB")
    sim, real = _runs(
        module,
        found,
        Xt,
        Yt,
        op,
        Ynqf,
        init_factor * W0,
        W0,
        lr,
        steps,
        form,
        save_every,
        (c_nqf, c_real),
        timings,
        say,
    )

    cmp_nqf, cmp_real, val, verdict, curves = _compare(pred, sim, real, eps, found, flat_threshold, gap_tolerance)
    verdict["text"].extend([*notes, *(n for n in pred.notes if n.startswith("warning:"))])
    return Analysis(
        model=desc,
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
        checks=tuple(rows),
        prediction=pred,
        nqf=cmp_nqf,
        real=cmp_real,
        validity=val,
        verdict=verdict,
        curves=curves,
        timings={k: round(v, 3) for k, v in timings.items()},
        task=data.task,
        classes=tuple(data.classes),
        notes=tuple(notes),
    )


def _compare(pred, sim, real, eps: float, found, flat_threshold: float, gap_tolerance: float):
    """Both runs against the prediction, the validity of the quadratic regime, the verdict and the curves."""
    n = min(len(sim), len(real))
    t = real.t[:n].numpy()
    Lr, Ln = real.loss[:n].numpy(), sim.loss[:n].numpy()
    cmp_nqf = compare_staircase(t, Ln, pred, flat_threshold=flat_threshold)
    cmp_real = compare_staircase(t, Lr, pred, flat_threshold=flat_threshold)
    Q = torch.from_numpy(pred.directions.copy())
    strength = {key: _strengths(Q, tr, n) for key, tr in (("strength_real", real), ("strength_nqf", sim))}
    val = validity(t, Lr, Ln, torch.as_tensor(real.step)[:n].numpy(), pred, gap_tolerance)
    verdict = judge(pred, cmp_nqf, cmp_real, val, eps, found, found.n_units, found.p)
    add_crowded(verdict, pred, t, Lr, Ln)
    curves = {"t": t, "loss_real": Lr, "loss_nqf": Ln, "loss_predicted": pred.loss_curve(t), **strength}
    return cmp_nqf, cmp_real, val, verdict, curves


def _data_line(data: Dataset) -> str:
    """The progress line of the data: samples, input shape, outputs, task and how it was decided."""
    rule = data.preprocessing.get("task_rule")
    names = f"; classes {', '.join(str(c) for c in data.classes)}" if data.classes else ""
    return (
        f"data: {data.name}: N = {data.n_samples}, input shape {data.input_shape}, C = {data.n_outputs}, "
        f"{data.task}" + (f" ({rule})" if rule else "") + names
    )


def _training_only_notes(module, say) -> list[str]:
    """Sentences (verdict text) and log lines naming the training-only layers switched off."""
    names = training_only_layers(module)
    if not names:
        return []
    note = (
        f"Training-only layers {', '.join(names)} were switched off (eval mode: no dropout, batch norm on its "
        "running statistics) for the prediction, the NQF and the real training; a network trained with them "
        "on is not what was analysed."
    )
    say(f"note: {note}")
    return [note]


def _prediction_estimate(op, n_outputs: int, commuting: bool) -> str:
    """The time of the saddle search and its first orbit, from three timed operator evaluations.

    Cost model: the search with its first heteroclinic orbit takes about :data:`PREDICT_EVALUATIONS`
    pairs ``forward_factor`` + ``adjoint_apply`` (measured 6.7·10³–3.1·10⁴ on iris, wine, digits, a
    deep MLP, attention and a CNN; 1.9·10⁵ on breast_cancer with SiLU, whose first orbit is long);
    the O(1) clock of later drops is announced by :func:`nqf.predict` once their number is known.
    """
    gen = torch.Generator().manual_seed(0)
    L = torch.randn(op.p, 2, generator=gen, dtype=op.dtype)
    R = torch.randn(op.n_samples, op.n_outputs, generator=gen, dtype=op.dtype)
    t0 = time.perf_counter()
    for _ in range(3):
        op.forward_factor(L)
        op.adjoint_apply(R, L)
    pair = (time.perf_counter() - t0) / 3
    method = "Lotka–Volterra" if commuting else "saddle sequence"
    return (
        f"prediction ({method}, p = {op.p}, at most {min(op.p, n_outputs)} drops): saddle search and first drop "
        f"~{PREDICT_EVALUATIONS * pair:.0f} s ({PREDICT_EVALUATIONS} operator evaluations of {pair * 1e3:.2f} ms)"
    )


def _runs(module, found, Xt, Yt, op, Ynqf, W0_real, W0, lr, steps, form, save_every, costs, timings, say):
    """The NQF simulation and the real training, each announced with its estimate (timed steps × steps)."""
    from ..dynamics import simulate, train_network

    c_nqf, c_real = costs
    say(f"NQF simulation: {steps} steps ({form} form), estimated ~{c_nqf * steps:.0f} s")
    t0 = time.perf_counter()
    keep = _saved_state(found)
    sim = simulate(op, Ynqf, W0=W0, lr=lr, steps=steps, form=form, save_every=save_every, **keep)
    timings["nqf_simulation"] = time.perf_counter() - t0
    say(f"NQF simulation: {timings['nqf_simulation']:.1f} s")
    say(f"real network: {steps} steps of full-batch GD, estimated ~{c_real * steps:.0f} s")
    t0 = time.perf_counter()
    net = copy.deepcopy(module)
    real = train_network(net, found.layout, Xt, Yt, W0=W0_real, lr=lr, steps=steps, save_every=save_every, **keep)
    timings["real_training"] = time.perf_counter() - t0
    say(f"real network: {timings['real_training']:.1f} s")
    return sim, real


def _checked_options(eps, loss: str) -> float:
    """``eps`` as a float in (0, 1); ``loss`` must be ``"mse"`` (the only loss with a predicted staircase)."""
    from .._validation import float_param
    from ..errors import InvalidParameterError

    eps = float_param("eps", eps, positive=True)
    if not eps < 1:
        raise InvalidParameterError(f"`eps` must lie in (0, 1); found {eps}")
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
    rows = [check_smooth(module)]
    rows.append(check_symmetry(module, found.layout, Xt, seed=seed))
    rows.append(check_zgz(op, f0, how, found.activation))
    row, commuting = check_commutation(op)
    rows.append(row)
    rows.append(check_width(found.n_units, found.p))
    rows.append(check_training_only(training_only_layers(module)))
    return rows, commuting


def _cost(module, found, Xt, Yt, op, Ynqf, W0, *, lr: float, steps: int, form: str, save_every: int):
    """Seconds per step of the real and the NQF run (three timed steps of each), and bytes of both runs."""
    from ..dynamics import simulate, train_network

    c_real = _timed_step_cost(
        lambda: train_network(
            copy.deepcopy(module), found.layout, Xt, Yt, W0=W0, lr=lr, steps=3, save_W=False, save_M=False
        )
    )
    c_nqf = _timed_step_cost(lambda: simulate(op, Ynqf, W0=W0, lr=lr, steps=3, form=form, save_M=False, save_W=False))
    n_saved = steps // save_every + 2
    per_state = found.p * min(found.p, found.n_units)  # the smaller of M (p × p) and W (p × m): _saved_state
    nbytes = 2 * n_saved * per_state * 8 + sum(v.numel() * 8 for v in module.parameters()) * 3
    return (c_real, c_nqf), nbytes


def _saved_state(found) -> dict:
    """Save the smaller of ``M`` (``p × p``) and ``W`` (``p × m``) at each saved step: the mode strengths
    ``qᵀ M q = ‖Wᵀ q‖²`` need only one (a CNN on digits, p = 650, m = 16: 50 MB of ``W`` instead of 4 GB of ``M``)."""
    small_w = found.n_units < found.p
    return {"save_M": not small_w, "save_W": small_w}


def _strengths(Q: torch.Tensor, tr, n: int) -> np.ndarray:
    """Mode strengths ``qₖᵀ M(t) qₖ = ‖W(t)ᵀ qₖ‖²`` of the first ``n`` saved states of ``tr``, shape (n, K)
    (from ``M`` or ``W``, whichever was saved; K = 0 with neither)."""
    if not Q.numel():
        return np.zeros((n, 0))
    if tr.M is not None:
        return torch.einsum("pk,tpq,qk->tk", Q, tr.M[:n], Q).numpy()
    if tr.W is not None:
        return torch.einsum("pk,tpm->tkm", Q, tr.W[:n]).pow(2).sum(-1).numpy()
    return np.zeros((n, 0))
