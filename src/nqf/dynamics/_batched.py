r"""Many closed order-parameter runs on the same data, simulated together as one batch.

Runs that share the structure operator ``𝒜`` and the targets ``y`` but differ
in the initial state ``M_b(0)`` (the initial scale ε or the seed of ``W0``),
the step ``η_b`` or the weight decay ``λ_b`` follow (docs/theory.md §0,
see :func:`nqf.dynamics.simulate`)

.. math::

    G_b = \tfrac1N 𝒜^*(r_b),\quad r_b = ∂ℓ/∂f\,(f_b, y),\quad f_b = f(0) + 𝒜(M_b),

    M_b ← T_b M_b T_bᵀ,\quad T_b = I − η_b (2 G_b + λ_b I),

full-batch gradient descent with the zero-gradient condition (``op.linear`` and
``op.cross`` absent).  Training time ``t_b = η_b · step``.

How it is batched.  ``𝒜`` is linear on symmetric matrices, so with the
coordinates ``c(M) = (M_ii, 2 M_ij)_{i<j}`` (``s = p(p+1)/2`` of them) it is a
fixed ``(N·C) × s`` matrix ``A`` whose columns are ``𝒜(E_ij)`` for the
symmetric unit matrices ``E_ij`` — built once through the public ``op(M)``; the
upper triangle of ``𝒜^*(r)`` is ``Aᵀ r``.  For MSE the data enter only through
the thin QR factorisation ``A = Q R`` (``R`` is ``s × s``): with
``d = f(0) − y`` and ``ρ_b = R c(M_b) + Qᵀd``,

.. math::

    L_b = \tfrac1{2N}\big(‖ρ_b‖² + ‖(I − QQᵀ) d‖²\big),\qquad Aᵀ r_b = Rᵀ ρ_b,

a sum of squares (no cancellation), so a step costs two ``(B, s) × (s, s)``
products and a few batched ``p × p`` products instead of ``B`` passes over the
data.  Other losses use ``f_b = f(0) + A c(M_b)`` directly.

As :func:`nqf.dynamics.simulate`, each run propagates a factor ``M_b = F_b F_bᵀ``
(``F ← T F``, see :mod:`nqf.dynamics._factored`) whose columns are re-rotated onto
eigenvectors of ``M_b`` whenever a column norm has changed by a factor 2, so a
direction in which ``M_b`` is ε-small keeps its relative accuracy — propagating
``T M Tᵀ`` instead puts an absolute round-off ``10⁻¹⁶ ‖M‖`` into it, which at
ε = 10⁻⁸ already shifts the switch-on times by a relative 10⁻¹¹.

Accuracy: the algebra is exact; in floating point the result agrees with
:func:`nqf.dynamics.simulate` run one at a time to round-off — in practice
``max|M_b − M_b^{ref}| ≤ 10⁻¹² max|M_b^{ref}|`` and
``|L_b − L_b^{ref}| ≤ 10⁻¹² L_b(0)`` (checked in the tests and by
``benchmarks/bench_sweep.py``).
"""

from __future__ import annotations

import torch

from .._validation import divergence_message, divergence_threshold_value, steps_value
from ..errors import InvalidParameterError, InvalidTypeError, NotClosedError, ShapeError
from ..structure import StructureOperator
from ._factored import factor_from_matrix, orthogonalize_columns
from ._initial import initial_state
from ._loop import DivergenceCheck
from ._loss import Loss, as_loss
from ._optim import GD
from ._polish import POLISH_MAX_RANK
from ._save import Recorder, Save, as_save
from ._trajectory import DIVERGED, FINISHED, Trajectory

__all__ = ["simulate_batched", "operator_matrix"]


def operator_matrix(op: StructureOperator) -> torch.Tensor:
    """The matrix of ``𝒜`` in the coordinates ``c(M) = (M_ii, 2 M_ij)_{i<j}``.

    Returns
    -------
    torch.Tensor, shape (N·C, p(p+1)/2)
        Column ``(i, j)`` (row-major upper triangle, ``i ≤ j``) is
        ``𝒜(E_ij)`` flattened, with ``E_ii = e_i e_iᵀ`` and
        ``E_ij = ½(e_i e_jᵀ + e_j e_iᵀ)``, so that ``𝒜(M) = A c(M)``.
    """
    p = op.p
    iu, ju = torch.triu_indices(p, p)
    cols = []
    for i, j in zip(iu.tolist(), ju.tolist(), strict=False):
        E = torch.zeros(p, p, dtype=op.dtype, device=op.device)
        E[i, j] += 0.5
        E[j, i] += 0.5
        cols.append(op(E).reshape(-1))
    return torch.stack(cols, 1)


def _batch_param(name: str, value, B: int, dtype, device) -> torch.Tensor:
    t = torch.as_tensor(value, dtype=dtype, device=device).reshape(-1)
    if t.numel() == 1:
        t = t.expand(B).clone()
    if t.numel() != B:
        raise ShapeError(f"`{name}` must be a number or have one entry per run ({B}); found {t.numel()} entries")
    if not bool(torch.isfinite(t).all()):
        raise InvalidParameterError(f"`{name}` must be finite; found {t.tolist()}")
    return t


def simulate_batched(
    op: StructureOperator,
    y,
    *,
    M0,
    lr=None,
    steps: int,
    weight_decay=0.0,
    loss: str | Loss = "mse",
    divergence_threshold: float = 1e8,
    optimizer: GD | None = None,
    save: Save | None = None,
) -> list[Trajectory]:
    r"""Simulate ``B`` full-batch GD runs of the NQF on shared data as one batched computation.

    The update is ``M_b ← T_b M_b T_bᵀ`` (propagated on a factor ``M_b = F_b F_bᵀ``), ``T_b = I − η_b (2 G_b + λ_b I)``,
    ``G_b = (1/N) 𝒜^*(r_b)`` (module docstring); each run is what
    ``simulate(op, y, M0=M0[b], optimizer=GD(lr[b], weight_decay=weight_decay[b]), steps=steps, ...)``
    returns, to round-off.

    Parameters
    ----------
    op : StructureOperator
        Shared structure operator (zero-gradient condition required).
    y : array_like, shape (N,) or (N, C)
        Shared targets.
    M0 : array_like, shape (B, p, p) or (p, p)
        Initial order parameters (symmetric PSD; a single ``(p, p)`` is shared by all runs).
    lr : float or array_like, shape (B,)
        Step sizes ``η_b`` (or ``optimizer``).
    steps : int
        Number of steps (shared).
    weight_decay : float or array_like, shape (B,)
        ``λ_b``: adds ``(λ_b/2)‖W‖²`` to the loss.
    loss : Loss or {"mse", "logistic", "cross_entropy"}
        The :class:`~nqf.dynamics.Loss` (its batched value and residual; MSE through the QR form above).
    divergence_threshold : float
        A run stops (``status = -1``) when its loss is not finite or exceeds this multiple of its initial
        loss; the other runs go on.
    optimizer : GD, optional
        One full-batch :class:`~nqf.dynamics.GD` (without momentum) shared by all runs, instead of
        ``lr``/``weight_decay``.
    save : Save, optional
        The save policy (default ``Save()``: about a thousand states; ``Save(M=False)`` keeps the losses only).

    Returns
    -------
    list of Trajectory
        One per run: ``t`` (K,) ``= η_b · step``, ``step`` (K,), ``loss`` (K,), ``M`` (K, p, p).

    Raises
    ------
    NotClosedError
        The operator has a linear or cross-unit term.
    ShapeError, InvalidParameterError
        Bad shapes, non-positive steps sizes, a non-symmetric or indefinite ``M0``.
    """
    if not isinstance(op, StructureOperator):
        raise InvalidTypeError(f"`op` must be a StructureOperator; found {type(op).__name__}")
    if not op.satisfies_zgz:
        raise NotClosedError(
            "`op` has a linear or cross-unit term: the dynamics close on (M, μ) and depend on "
            "the width; use `nqf.simulate` with `W0` for each run"
        )
    loss = as_loss(loss)
    steps = steps_value(steps)
    keep = as_save(save).resolve(steps)
    save_every, save_M = keep.every, keep.M
    assert save_every is not None  # resolved
    if optimizer is not None:
        lr, weight_decay = _shared_gd(optimizer, lr, weight_decay)
    if lr is None:
        raise InvalidParameterError("`lr` must be given (a number, or one per run), or `optimizer`=GD(lr)")
    divergence_threshold = divergence_threshold_value(divergence_threshold)
    dt, dev, p, N = op.dtype, op.device, op.p, op.n_samples
    M, B, eta, lam = _runs(M0, lr, weight_decay, p, dt, dev)

    y = loss.prepare(y, N, op.n_outputs, dt, dev)  # (N, C)
    A = operator_matrix(op)  # (N·C, s)
    d = (op.offset - y).reshape(-1)  # f(0) − y, (N·C,)
    fwd, back, d_par, d_perp2 = _linear_maps(A, d, p, dt, dev, quadratic=loss.quadratic)
    F, polish = _initial_factors(M, B, p, dt, dev)
    ref_norm = F.norm(dim=1)  # (B, r)
    active = torch.ones(B, dtype=torch.bool, device=dev)
    recs = [Recorder(keep.count(steps)) for _ in range(B)]
    check = DivergenceCheck(divergence_threshold, dt)
    status = [FINISHED] * B
    message = [f"finished {steps} steps"] * B
    for k in range(steps + 1):
        last = k == steps
        Mf = (F @ F.transpose(1, 2)).reshape(B, p * p)
        if loss.quadratic:
            z = Mf @ fwd + d_par  # (B, s): ρ_b = Qᵀ r_b
            L = ((z * z).sum(1) + d_perp2) / (2 * N)
        else:
            f = (Mf @ fwd + op.offset.reshape(-1)).reshape(B, N, -1)
            L, r = loss.value_and_residual(f, y)
            z = r.reshape(B, -1)  # (B, N·C): r_b
        if not check.armed:
            check.arm(L)
        bad = active & (check.exceeded(L) | ~torch.isfinite(Mf).all(1))
        _mark_diverged(bad, k, L, eta, check, recs, status, message)
        active &= ~bad
        if keep.saves(k, steps):
            Lc = L.tolist()
            for b in torch.nonzero(active).flatten().tolist():
                Mb = F[b] @ F[b].T if save_M else None
                recs[b].add(k, Lc[b], M=None if Mb is None else 0.5 * (Mb + Mb.T))
        if last or not bool(active.any()):
            break
        G = (z @ back).reshape(B, p, p) / N  # (1/N) 𝒜*(r_b) = (1/N) Aᵀ r_b, placed
        g = 2.0 * (G @ F)  # S F = 2 G F + λ F
        g = g + lam[:, None, None] * F
        Fn = F - eta[:, None, None] * g  # F ← T F,  T = I − η S
        F = torch.where(active[:, None, None], Fn, F)
        if polish:
            _polish(F, ref_norm, active)
    return _trajectories(recs, eta, lam, steps, loss, keep, divergence_threshold, status, message, dt, dev)


def _runs(M0, lr, weight_decay, p: int, dt, dev):
    """The batch: ``M(0)`` of shape (B, p, p) (one ``M0`` broadcast), ``B``, and the per-run ``η`` and ``λ``."""
    M = initial_state(p, M0=M0, dtype=dt, device=dev, batched=True).M
    if M.ndim == 2:
        M = M[None]
    B = max(M.shape[0], torch.as_tensor(lr).numel(), torch.as_tensor(weight_decay).numel())
    if M.shape[0] == 1:
        M = M.expand(B, p, p)
    elif M.shape[0] != B:
        raise ShapeError(f"`M0` holds {M.shape[0]} runs but `lr`/`weight_decay` hold {B}")
    eta = _batch_param("lr", lr, B, dt, dev)
    lam = _batch_param("weight_decay", weight_decay, B, dt, dev)
    if bool((eta <= 0).any()):
        raise InvalidParameterError(f"`lr` must be positive; found {eta.tolist()}")
    if bool((lam < 0).any()):
        raise InvalidParameterError(f"`weight_decay` must be non-negative; found {lam.tolist()}")
    return M, B, eta, lam


def _linear_maps(A, d, p: int, dt, dev, *, quadratic: bool):
    """Exact linear maps of the step: ``vec(M) ↦`` outputs (``R c(M)`` or ``𝒜(M)``), residual ``↦ vec(G)``.

    For the quadratic loss the data enter through ``A = Q R``: also ``Qᵀ(f(0) − y)`` and the
    squared norm of the part of ``f(0) − y`` outside the range of ``Q`` (else empty and 0).
    """
    iu, ju = torch.triu_indices(p, p, device=dev)
    s = iu.numel()
    # c(M) = vec(M) @ Cm (picks M_ij, i ≤ j, times 1 or 2, exactly); vec(G) = g @ Pm (places g_ij at ij and ji)
    Cm = torch.zeros(p * p, s, dtype=dt, device=dev)
    Cm[iu * p + ju, torch.arange(s)] = torch.where(iu == ju, 1.0, 2.0).to(dt)
    Pm = torch.zeros(s, p * p, dtype=dt, device=dev)
    Pm[torch.arange(s), iu * p + ju] = 1.0
    Pm[torch.arange(s), ju * p + iu] = 1.0
    if quadratic:  # L = ½‖f − y‖²/N: the data enter through A = Q R
        Q, R = torch.linalg.qr(A)  # A = Q R, R (s, s) or (N·C, s)
        d_par = Q.T @ d
        d_perp2 = float(((d - Q @ d_par) ** 2).sum())
        fwd = Cm @ R.T  # vec(M) ↦ R c(M), exact column scaling
        back = R @ Pm  # ρ ↦ vec(Rᵀρ) placed symmetrically
        return fwd, back, d_par, d_perp2
    fwd = Cm @ A.T  # vec(M) ↦ 𝒜(M)
    back = A @ Pm  # r ↦ vec(Aᵀ r) placed symmetrically
    return fwd, back, d.new_zeros(0), 0.0


def _initial_factors(M, B: int, p: int, dt, dev):
    """Factors ``F_b`` (B, p, r) with ``M_b = F_b F_bᵀ``, zero-padded to the widest rank, and whether to polish."""
    # the factor M_b = F_b F_bᵀ (as nqf.simulate): PSD by construction, small directions keep relative accuracy
    factors = [factor_from_matrix(M[b]) for b in range(B)]
    r_max = max(max(f.shape[1] for f in factors), 1)
    F = torch.zeros(B, p, r_max, dtype=dt, device=dev)
    for b, f in enumerate(factors):
        F[b, :, : f.shape[1]] = f
    if r_max <= POLISH_MAX_RANK:
        F = orthogonalize_columns(F)
    polish = r_max <= POLISH_MAX_RANK
    return F, polish


def _mark_diverged(bad, k: int, L, eta, check: DivergenceCheck, recs, status: list, message: list) -> None:
    """Record the runs ``bad`` as diverged at step ``k``, with the shared divergence message."""
    for b in torch.nonzero(bad).flatten().tolist() if bool(bad.any()) else ():
        status[b] = DIVERGED
        message[b] = divergence_message(
            step=k,
            t=k * float(eta[b]),
            loss=float(L[b]),
            limit=float(check.limit[b]),
            lr=float(eta[b]),
            saved=len(recs[b]),
        )


def _polish(F, ref_norm, active) -> None:
    """Re-orthogonalise, in place, the columns of the active factors ``F`` once a column norm drifted 2×."""
    # re-orthogonalise the columns (onto eigenvectors of M_b) when a column norm of some run has changed
    # 2× — then of every run at once: each run is polished at least as often as nqf.simulate does
    ratio = F.norm(dim=1) / torch.where(ref_norm > 0, ref_norm, 1.0)
    due = (((ratio > 2.0) | (ratio < 0.5)) & (ref_norm > 0)).any(1) & active
    if bool(due.any()):
        idx = torch.nonzero(active).flatten()
        F[idx] = orthogonalize_columns(F[idx])
        ref_norm[idx] = F[idx].norm(dim=1)


def _trajectories(recs, eta, lam, steps: int, loss: Loss, keep, divergence_threshold, status, message, dt, dev):
    """One :class:`Trajectory` per run from its recorder, with the ``info`` of a GD run of :func:`nqf.simulate`."""
    out = []
    for b in range(len(recs)):
        info = {"form": "order_parameter", **GD(float(eta[b]), weight_decay=float(lam[b])).to_dict(), "steps": steps}
        info.update(loss.to_dict(), **keep.to_dict(), divergence_threshold=float(divergence_threshold))
        info.update(batched=True, batch_index=b)
        traj = recs[b].trajectory(
            lr=float(eta[b]), dtype=dt, device=dev, status=status[b], message=message[b], info=info
        )
        out.append(traj)
    return out


def _shared_gd(optimizer: GD, lr, weight_decay):
    """``(lr, weight_decay)`` of one :class:`GD` shared by every run (plain full-batch GD only)."""
    if type(optimizer) is not GD or optimizer.momentum:
        raise InvalidParameterError(
            f"`optimizer` of simulate_batched must be a nqf.dynamics.GD without momentum; found {optimizer!r}"
        )
    if lr is not None or weight_decay != 0.0:
        raise InvalidParameterError(
            f"`lr`/`weight_decay` must not be given beside `optimizer` (set them on the object); found lr={lr!r}, "
            f"weight_decay={weight_decay!r} beside `optimizer`={optimizer!r}"
        )
    return optimizer.lr, optimizer.weight_decay
