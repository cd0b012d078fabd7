r"""Discrete training dynamics in weight form and in closed order-parameter form (docs/theory.md §3).

Conventions: ``L = (1/N) Σ_n ℓ(f_n, y_n)`` (a minibatch uses its own mean),
``r = ∂ℓ/∂f``, ``G = (1/N) 𝒜*(r)``; a step is ``W ← W − η ∇_W L``; training
time ``t = η · step``.

Zero-gradient condition (ZGZ): ``∇_{w_i} L = 2 G w_i``.  Weight decay λ adds
``(λ/2) ‖W‖_F² = (λ/2) Tr M`` to the loss (coupled L2, as ``torch.optim.SGD``'s
``weight_decay``), whose gradient ``λ W`` turns ``2G`` into ``S = 2G + λI``,
i.e. ``G → G + (λ/2) I``.  One step is then

* weights: ``W ← T W`` with ``T = I − ηS``;
* order parameter, exactly: ``M ← T M Tᵀ``.

Without ZGZ (``op.linear``/``op.cross`` present) ``∂f/∂w_i = b + 2Bμ + 2(A − B)w_i``,
so ``∇_{w_i} L = S w_i + h`` with ``G`` built from ``A − B`` and
``h = (1/N) Σ_{n,c} r_{n,c} (b_{n,c} + 2 B_{n,c} μ)``; the step
``w_i ← T w_i − ηh`` closes on ``(M, μ)``:
``M ← T M Tᵀ − η (Tμ hᵀ + h μᵀTᵀ) + η² m h hᵀ``, ``μ ← Tμ − η m h`` — the
width ``m`` enters.

Heavy-ball momentum β (``torch.optim.SGD`` convention): ``V ← βV + ∇_W L``,
``W ← W − ηV``.  With ``P = W Vᵀ``, ``Q = V Vᵀ``, ``ν = V 1`` it closes on
``(M, P, Q, μ, ν)``:

    w_i' = T w_i + c_i,   c_i = −ηβ v_i − ηh,   T = I − ηS
    M' = TMTᵀ − ηβ(TP + PᵀTᵀ) − η(Tμhᵀ + hμᵀTᵀ) + η²β²Q + η²β(νhᵀ + hνᵀ) + η²m hhᵀ
    P' = βTP + TMS − ηβ²Q − ηβPᵀS + (Tμ − ηβν)hᵀ − ηh(βν + Sμ + mh)ᵀ
    Q' = β²Q + β(SP + PᵀS) + SMS + β(νhᵀ + hνᵀ) + (Sμhᵀ + hμᵀS) + m hhᵀ
    μ' = Tμ − ηβν − ηmh,   ν' = βν + Sμ + mh

(with ZGZ ``h = 0`` and ``μ, ν`` are not needed).  The products are kept in
this factored form — expanding ``M' = M − η(…) + η²Q'`` loses accuracy in the
directions where ``M`` is small.

Implementation and accuracy: the order-parameter form propagates a factor
``M = L Lᵀ`` (``L`` of shape ``p × r``, ``r ≤ p``; ``p + 1`` without ZGZ) by the
same linear maps, ``L ← T L − η h cᵀ`` (:mod:`nqf.dynamics._factored`), and the
saved states are ``L Lᵀ``.  ``M`` is positive semidefinite by construction and
its rank cannot grow.  For ``r ≤ 256`` the columns of ``L`` are rotated
(``L ← L O``, one-sided Jacobi) onto the eigenvectors of ``M`` whenever a column
norm has changed by a factor 100 since the last rotation (checked every 8 steps), so a direction in which
``M`` is ``10⁻³⁰⁰`` small keeps relative round-off ``~1e-16`` even when other
directions are ``O(1)``.  (The weight form does not: round-off relative to the
largest mode in each unit seeds the small modes once ``ε ≲ 1e-30``.)  The
operator enters only through ``op.forward_factor(L)`` and
``op.adjoint_apply(R, L)``, so a two-layer structure never forms a ``p × p``
product: a step costs two passes over the data plus ``O((C + D) r)``.

Adam rescales each coordinate of ``W`` by its own running second moment; that
map is not a function of ``M`` (it is not even rotation-equivariant), so it
runs only in weight form.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from .._memory import check_saved_memory
from .._validation import divergence_curvature, divergence_threshold_value, one_of, steps_value
from ..errors import InvalidParameterError, InvalidTypeError, NotClosedError
from ..structure import StructureOperator
from ._factored import (
    factor_from_matrix,
    factor_from_weights,
    gradient_terms,
    orthogonalize_columns,
    predictions,
)
from ._fast import block_loop, block_split
from ._initial import check_psd, initial_state
from ._loop import OPTIMIZERS, minibatch_indices, training_loop
from ._loss import Loss, as_loss
from ._optim import Optimizer, optimizer_object
from ._polish import POLISH_EVERY, POLISH_MAX_RANK, _loop_state, _polished, _polished_or_none, _transfer_step
from ._save import Recorder, Save, as_save
from ._trajectory import Trajectory

__all__ = ["simulate", "minibatch_indices", "FORMS", "OPTIMIZERS", "check_psd"]

FORMS = ("order_parameter", "weights")


@dataclass(frozen=True)
class RunSpec:
    """The validated settings of one :func:`simulate` run (typed; :meth:`to_dict` is the trajectory's ``info``)."""

    form: str
    optimizer: Optimizer
    loss: Loss
    save: Save  # ``every`` resolved
    steps: int
    seed: int
    width: int | None
    compressed: bool
    divergence_threshold: float

    def to_dict(self) -> dict:
        return {
            "form": self.form,
            **self.optimizer.to_dict(),
            "steps": self.steps,
            **self.loss.to_dict(),
            "seed": self.seed,
            **self.save.to_dict(),
            "width": self.width,
            "compressed": self.compressed,
            "divergence_threshold": self.divergence_threshold,
        }


# --------------------------------------------------------------------------- entry point
def simulate(
    op: StructureOperator,
    y,
    *,
    M0=None,
    W0=None,
    optimizer: Optimizer,
    steps: int,
    form: str = "order_parameter",
    loss: str | Loss = "mse",
    seed: int = 0,
    save: Save | None = None,
    compress: bool = False,
    divergence_threshold: float = 1e8,
    on_divergence: str = "stop",
) -> Trajectory:
    r"""Simulate training of the NQF model ``f = f(0) + Tr[M A]`` (normal form) by GD/SGD/momentum/Adam.

    Conventions: ``L = (1/N) Σ_n ℓ(f_n, y_n)``, ``ℓ = ½ Σ_c (f_c − y_c)²`` for
    MSE, ``r = ∂ℓ/∂f``, ``W ← W − η ∇_W L``, time ``t = η · step``; the update
    equations are in the module docstring (``G = (1/N) 𝒜*(r)``,
    ``W ← (I − 2ηG)W``, ``M ← (I − 2ηG) M (I − 2ηG)ᵀ``).

    Parameters
    ----------
    op : StructureOperator
        The structure operator (``p``, ``N`` samples, ``C`` outputs).
    y : array_like, shape (N,) or (N, C)
        Targets (see :class:`nqf.dynamics.Loss` for the label conventions).
    M0 : array_like, shape (p, p), optional
        Initial order parameter (symmetric PSD).  Order-parameter form only,
        and only with ZGZ (otherwise ``μ`` and the width are needed: pass ``W0``).
    W0 : array_like, shape (p, m), optional
        Initial unit weights of any width ``m``; ``M(0) = W0 W0ᵀ``.  Exactly one
        of ``M0``/``W0`` must be given: a ``p × p`` array is never guessed to be one or the other.
    optimizer : Optimizer
        :class:`~nqf.dynamics.GD` (full batch; ``momentum``, ``weight_decay``), :class:`~nqf.dynamics.SGD`
        (minibatches of ``batch_size``: the same batches in both forms for a given ``seed``, see
        :func:`minibatch_indices`) or :class:`~nqf.dynamics.Adam` (weight form only); each holds its step size
        ``η`` and settings (:func:`~nqf.dynamics.as_optimizer` builds one from a name).  Weight decay λ adds
        ``(λ/2)‖W‖²`` to the loss (``G → G + λ/2 I``).
    steps : int
        Number of steps.
    form : {"order_parameter", "weights"}
    loss : Loss or {"mse", "logistic", "cross_entropy"}
    seed : int
        Seed of the minibatch sampler.
    compress : bool
        Simulate on the ``r × r`` data-subspace block (ZGZ only; see
        :meth:`nqf.structure.StructureOperator.compress`); the saved ``M``/``W`` are mapped back
        exactly to the full ``p``-dimensional space.
    divergence_threshold : float
        The run stops when the loss is not finite or exceeds this multiple of the initial loss.
    on_divergence : {"stop", "raise"}
        ``"stop"``: return the trajectory so far with ``status = -1`` and a
        message; ``"raise"``: raise :class:`~nqf.errors.DivergenceError`, whose
        ``.trajectory`` holds the states so far.
    save : Save, optional
        The save policy (default ``Save()``: about a thousand states, step 0 and the last step always, ``M`` and,
        in weight form, ``W``; :meth:`~nqf.dynamics.Save.resolve`).

    Returns
    -------
    Trajectory
        ``t`` (K,), ``step`` (K,), ``loss`` (K,), ``M`` (K, p, p), ``W`` (K, p, m)
        in weight form, ``mu`` (K, p) without ZGZ.

    Raises
    ------
    NotClosedError
        Adam in order-parameter form.
    ShapeError, NonFiniteError, ValueError
        Bad shapes, NaN targets/initial states, a non-PSD ``M0``, both or neither of ``M0``/``W0``.
    DivergenceError
        Only with ``on_divergence="raise"``.
    """
    if not isinstance(op, StructureOperator):
        raise InvalidTypeError(f"`op` must be a StructureOperator; found {type(op).__name__}")
    one_of("form", form, FORMS)
    one_of("on_divergence", on_divergence, ("stop", "raise"))
    loss = as_loss(loss)
    steps = steps_value(steps)
    policy = as_save(save)
    opt = optimizer_object(optimizer)
    opt.check_samples(op.n_samples)
    if form == "order_parameter" and not opt.closes_on_M:
        raise NotClosedError(opt.not_closed or f"{opt!r} does not close on the order parameter M = W Wᵀ")
    if M0 is not None and W0 is None and form == "weights":
        raise InvalidParameterError("`form`='weights' needs `W0` (p×m weights); `M0` only fixes W up to a rotation")
    init = initial_state(op.p, M0=M0, W0=W0, dtype=op.dtype, device=op.device, zgz=op.satisfies_zgz)
    M0, W0, width = init.M0, init.W0, init.width
    y = loss.prepare(y, op.n_samples, op.n_outputs, op.dtype, op.device)
    p = op.p
    divergence_threshold = divergence_threshold_value(divergence_threshold)
    save = _resolved_save(policy, op, steps, form, width)
    itemsize = torch.empty((), dtype=op.dtype).element_size()
    check_saved_memory(
        steps,
        save.every,  # type: ignore[arg-type]  # resolved
        itemsize * _state_numbers(save, p, form, width, op.satisfies_zgz) + 16,
        device=op.device,
    )
    settings = RunSpec(
        form=form,
        optimizer=opt,
        loss=loss,
        save=save,
        steps=steps,
        seed=seed,
        width=width,
        compressed=bool(compress),
        divergence_threshold=float(divergence_threshold),
    )
    if compress:
        traj = _simulate_compressed(op, y, M0, W0, settings)
    else:
        traj = _run(op, y, M0, W0, settings)
    if on_divergence == "raise":
        traj.raise_for_status()
    return traj


def _state_numbers(save: Save, p: int, form: str, width: int | None, zgz: bool) -> int:
    """Numbers kept per saved state: ``M`` (``p²``), ``μ`` without ZGZ, ``W`` (``p × m``) in weight form."""
    return (p * p if save.M else 0) + (0 if zgz else p) + (p * (width or 0) if form == "weights" and save.W else 0)


def _resolved_save(policy: Save, op: StructureOperator, steps: int, form: str, width: int | None) -> Save:
    """The save policy with ``every`` fixed (:meth:`Save.resolve`): the default spaces large or costly states.

    A saved ``M`` is formed from the factor (``L Lᵀ``: ``p² r`` operations, ``r ≤ p``; ``W Wᵀ`` in weight form:
    ``p² m``); a step costs about two passes over the data (``2 N C p``) plus ``O(p r)``.
    """
    p, r = op.p, (op.p + (0 if op.satisfies_zgz else 1))
    cols = (width or r) if form == "weights" else r
    itemsize = torch.empty((), dtype=op.dtype).element_size()
    return policy.resolve(
        steps,
        state_bytes=itemsize * _state_numbers(policy, p, form, width, op.satisfies_zgz),
        save_flops=float(p * p * cols) if policy.M else 0.0,
        step_flops=float(2 * op.n_samples * op.n_outputs * p + 2 * p * cols),
    )


# --------------------------------------------------------------------------- the run
def _run(op, y, M0, W0, s: RunSpec, track_transfer: bool = False) -> Trajectory:
    """Run :func:`~nqf.dynamics._loop.training_loop`; with ``track_transfer`` also propagate the linear transfer
    map ``Φ`` (Φ(0) = I) and the scalar factor ``a`` of directions with ``S = λ I`` (used by compression).

    Both forms propagate a left factor of the units (:mod:`nqf.dynamics._factored`): the weight
    form ``W`` itself (``c = 1``), the order-parameter form ``L`` with ``M = L Lᵀ`` (``r ≤ p``
    columns, ``p + 1`` without ZGZ), the momentum buffer ``K`` with ``V = K Qᵀ``; the gradient
    of the units is ``S L + h cᵀ`` (module docstring)."""
    opt, loss, keep = s.optimizer, s.loss, s.save
    lr, lam, beta = opt.lr, opt.weight_decay, opt.momentum
    p, N, dt, dev = op.p, op.n_samples, op.dtype, op.device
    zgz = op.satisfies_zgz
    weights = s.form == "weights"
    L, c = _initial_factor(M0, W0, weights=weights, zgz=zgz, dtype=dt, device=dev)
    # keep the columns of the factor along eigenvectors of M (relative accuracy of small directions)
    polish = not weights and zgz and L.shape[1] <= POLISH_MAX_RANK
    if polish:
        L = orthogonalize_columns(L)
    st = _loop_state(L, p, dt, dev, track_transfer)
    rec, transfer = Recorder(keep.count(s.steps)), dict(Phi=[], a=[])

    def mu_of(L):
        return None if c is None else L @ c

    def evaluate(params, idx):
        (L,) = params
        if idx is None:
            ob, yb, nb = op, y, N
        else:
            idx = idx.to(dev)
            ob, yb, nb = op.take(idx), y[idx], idx.numel()
        mu = mu_of(L)
        f = predictions(ob, L, mu)
        Lb, r = loss.value_and_residual(f, yb)
        return Lb, dict(ob=ob, yb=yb, nb=nb, f=f, mu=mu, r=r)

    def gradient(params, ctx, idx):
        GL, h = gradient_terms(ctx["ob"], ctx["r"], params[0], ctx["mu"], ctx["nb"])
        g = 2.0 * GL  # S L = 2 G L + λ L (λ added by the loop); the gradient of the units is S L + h cᵀ
        return [g if h is None or c is None else g + torch.outer(h, c)]

    def after_step(k, params, descent, ctx):
        (L,) = params
        if polish and k % POLISH_EVERY == 0:
            L = _polished(L, descent, st, p)
        if track_transfer:
            _transfer_step(st, ctx, lr, lam, beta)
        return [L]

    def save(k, params, loss):
        (L,) = params
        by_factor = keep.M and L.shape[1] <= p + 1  # M = L Lᵀ formed for all saves at once by the Recorder
        M = L @ L.T if keep.M and not by_factor else None
        rec.add(
            k,
            loss,
            M=None if M is None else 0.5 * (M + M.T),
            M_factor=L if by_factor else None,
            W=L.clone() if weights and keep.W else None,
            mu=mu_of(L),
        )
        if track_transfer:
            transfer["Phi"].append(st["Phi"].clone())
            transfer["a"].append(st["a"])

    if (p1 := block_split(op, opt, weights, zgz, track_transfer)) is not None:  # the hot path (nqf.dynamics._fast)
        out = _run_blocks(op, y, L, p1, s, save, (lambda L: _polished_or_none(L, st, p)) if polish else None)
        return _trajectory_of(rec, out, s, transfer if track_transfer else None, lr, dt, dev)
    out = training_loop(
        [L],
        opt,
        steps=s.steps,
        n_samples=N,
        batch_size=opt.batch_size,
        seed=s.seed,
        save_every=keep.every,  # type: ignore[arg-type]  # resolved
        divergence_threshold=s.divergence_threshold,
        evaluate=evaluate,
        gradient=gradient,
        save=save,
        after_step=after_step,
        full_loss=lambda params: loss.value(predictions(op, params[0], mu_of(params[0])), y),
        curvature=lambda prev, ctx: (
            None if prev is None else divergence_curvature(op, prev[0], ctx["r"], lam, N, loss=loss.name)
        ),
    )
    return _trajectory_of(rec, out, s, transfer if track_transfer else None, lr, dt, dev)


def _run_blocks(op, y, L, p1: int, s: RunSpec, save, polish):
    """:func:`~nqf.dynamics._fast.block_loop` with the run's settings (the hot path of :func:`_run`)."""
    return block_loop(
        op,
        y,
        L,
        p1,
        opt=s.optimizer,
        loss=s.loss,
        steps=s.steps,
        save_every=s.save.every,  # type: ignore[arg-type]  # resolved
        divergence_threshold=s.divergence_threshold,
        save=save,
        polish=polish,
        polish_every=POLISH_EVERY,
    )


def _trajectory_of(rec: Recorder, out, s: RunSpec, transfer: dict | None, lr: float, dt, dev) -> Trajectory:
    """The recorded trajectory of a finished loop (``info`` from the final factor)."""
    info = _run_info(s, out.params[0], transfer, dt)
    return rec.trajectory(lr=lr, dtype=dt, device=dev, status=out.status, message=out.message, info=info)


def _run_info(s: RunSpec, L, transfer: dict | None, dtype) -> dict[str, Any]:
    """The trajectory's ``info``: the run spec, the factor rank (order-parameter form), ``Φ(t)`` and ``a(t)``."""
    info = s.to_dict()
    if s.form != "weights":
        info["factor_rank"] = int(L.shape[1])
    if transfer is not None:
        info["Phi"] = torch.stack(transfer["Phi"]) if transfer["Phi"] else None
        info["a"] = torch.tensor(transfer["a"], dtype=dtype)
    return info


def _initial_factor(M0, W0, *, weights: bool, zgz: bool, dtype, device):
    """The propagated left factor ``L`` and the unit vector ``c`` (None under ZGZ) from ``W0``, else from ``M0``."""
    if W0 is None:
        return factor_from_matrix(M0), None
    if weights:
        return W0.clone(), (None if zgz else torch.ones(W0.shape[1], dtype=dtype, device=device))
    return factor_from_weights(W0, with_ones=not zgz)


def _simulate_compressed(op, y, M0, W0, s: RunSpec) -> Trajectory:
    """Run on the data-subspace block and map the states back exactly (ZGZ only)."""
    if not op.satisfies_zgz:
        raise InvalidParameterError(
            "`compress`=True needs the zero-gradient condition (op.linear and op.cross None): "
            "with a linear term the complement of the data subspace is driven through μ"
        )
    if not s.optimizer.rotation_equivariant:
        raise InvalidParameterError(
            f"`compress`=True cannot be combined with {type(s.optimizer).__name__}: it is not rotation-equivariant, "
            "so the data-subspace basis change does not commute with its update"
        )
    U = op.data_subspace()
    p, r = op.p, U.shape[1]
    Qb = torch.linalg.qr(torch.cat([U, torch.eye(p, dtype=op.dtype, device=op.device)], 1))[0][:, :p]
    Qb = torch.cat([U, Qb[:, r:]], 1)  # orthonormal basis [U, U⊥]
    Uc = Qb[:, r:]
    op_r = op.compress(U)
    if W0 is not None:
        Wr0, Wc0 = U.T @ W0, Uc.T @ W0
        if s.form == "weights":
            traj = _run(op_r, y, None, Wr0, dataclasses.replace(s, save=dataclasses.replace(s.save, W=True)))
            a = _scalar_factors(traj, s)
            Wfull = torch.einsum("pr,krm->kpm", U, traj.W) + a[:, None, None] * (Uc @ Wc0)[None]
            traj = dataclasses.replace(
                traj, M=Wfull @ Wfull.transpose(1, 2) if s.save.M else None, W=Wfull if s.save.W else None
            )
        else:
            traj = _run(op_r, y, None, Wr0, s, track_transfer=True)
            traj = dataclasses.replace(
                traj, M=_lift(traj.M, traj.info["Phi"], Wr0 @ Wc0.T, Wc0 @ Wc0.T, traj.info["a"], Qb)
            )
    else:
        M0t = Qb.T @ M0 @ Qb
        traj = _run(op_r, y, M0t[:r, :r], None, s, track_transfer=True)
        traj = dataclasses.replace(
            traj, M=_lift(traj.M, traj.info["Phi"], M0t[:r, r:], M0t[r:, r:], traj.info["a"], Qb)
        )
    traj.info.update(basis=U, rank=r, Phi=None)
    return traj


def _scalar_factors(traj, s: RunSpec) -> torch.Tensor:
    """The factor ``a_k`` of a unit's component outside the data subspace (``S = λI`` there)."""
    lr, lam, beta = s.optimizer.lr, s.optimizer.weight_decay, s.optimizer.momentum
    steps = traj.step.tolist()
    out, a, b, k = [], 1.0, 0.0, 0
    for target in steps:
        while k < target:
            b = beta * b + lam * a
            a = a - lr * b
            k += 1
        out.append(a)
    return torch.tensor(out, dtype=traj.loss.dtype, device=traj.t.device)


def _lift(Mr, Phi, Mrc0, Mcc0, a, Qb):
    """Full ``M = Q [[M_rr, a Φ M_r⊥(0)], [·ᵀ, a² M_⊥⊥(0)]] Qᵀ`` from the block, the transfer ``Φ``
    and the complement factor ``a``."""
    if Mr is None:
        return None
    a = a.to(Mr.device)
    Mrc = a[:, None, None] * (Phi @ Mrc0)
    Mcc = (a * a)[:, None, None] * Mcc0
    top = torch.cat([Mr, Mrc], 2)
    bot = torch.cat([Mrc.transpose(1, 2), Mcc.expand(Mr.shape[0], -1, -1)], 2)
    Mt = torch.cat([top, bot], 1)
    return Qb @ Mt @ Qb.T
