r"""The hot path of :func:`~nqf.dynamics.simulate`: full-batch GD in order-parameter form on a two-block operator.

For a :class:`~nqf.structure.BilinearStructure` whose blocks tile the unit (``left = [0:p1]``,
``right = [p1:p]``: every two-layer MLP) the factor ``M = L Lᵀ`` is kept as its two blocks
``L = [L_l; L_r]`` and one step is

    f = f(0) + kernel.forward(L_l L_rᵀ),     (ℓ, r) = loss(f, y),     K̄ = kernel.adjoint(r),
    L_l ← (1 − ηλ) L_l − (η/N) K̄ L_r,        L_r ← (1 − ηλ) L_r − (η/N) K̄ᵀ L_l

— the closed update ``L ← (I − ηS) L`` with ``S = 2G + λI``, ``2G = (1/N)[[0, K̄], [K̄ᵀ, 0]]``
(:mod:`nqf.dynamics._factored`), whose ``𝒜*(r)`` has rank ``≤ 2 p1``.  The cost is the two
kernel passes over the data plus ``O(p1 · p2 · r)`` (``O(C D r)`` for an MLP with ``C`` outputs:
no ``p × p × r`` product, also at full rank ``r = p``), about ten tensor operations per step.
``L_r`` (``p2 × r``, the large block) is a :class:`~nqf.dynamics._lowrank.RightBlock`: its rank-``p1`` changes
are collected as ``Q Z`` and folded into its base in blocks (a diagonal start's base is never formed before
the first fold), or, for small blocks and re-orthogonalised factors, written in place (``addmm_``).  The
factor before the last step, needed only for the curvature estimate of a divergence message, is recovered
then by undoing the update from ``(L_l, K̄)`` (right away, and kept, when a re-orthogonalisation rotates
the columns).  The passes, ``L_r L_lᵀ``
and ``K̄ᵀ`` write into preallocated buffers (``f − y`` directly for MSE).  Saving, the
divergence check and the re-orthogonalisation of the columns are those of
:func:`~nqf.dynamics._loop.training_loop` and :func:`~nqf.dynamics.simulate` (same steps, same
messages); the states agree with the general loop to round-off.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .._validation import divergence_curvature, divergence_message
from ._loop import DivergenceCheck, LoopOutcome
from ._lowrank import RightBlock
from ._optim import GD, Optimizer
from ._trajectory import DIVERGED, FINISHED

__all__ = ["block_split", "block_loop", "all_finite"]


def block_split(op, opt: Optimizer, weights: bool, zgz: bool, track_transfer: bool) -> int | None:
    """``p1`` when :func:`block_loop` runs this case (full-batch GD without momentum, order-parameter form,
    ZGZ, an operator with :meth:`~nqf.structure.BilinearStructure.factor_blocks` and ``factor_passes``), else None."""
    if weights or not zgz or track_transfer or type(opt) is not GD or opt.momentum or opt.batch_size is not None:
        return None
    blocks = getattr(op, "factor_blocks", None)
    return None if blocks is None or not hasattr(op, "factor_passes") else blocks()


def block_loop(
    op,
    y: torch.Tensor,
    L: torch.Tensor,
    p1: int,
    *,
    opt: Optimizer,
    loss,
    steps: int,
    save_every: int,
    divergence_threshold: float,
    save: Callable,
    polish: Callable | None,
    polish_every: int,
) -> LoopOutcome:
    """Run ``steps`` GD steps on the blocks of ``L`` (module docstring); ``save(k, L, loss)`` as the loop's
    (``L`` is overwritten afterwards: copy what is kept), ``polish(L) -> L`` (or None) every ``polish_every``
    steps after the update, as ``simulate``'s.  ``L`` itself is updated in place (pass a tensor of your own)."""
    mse = loss.name == "mse"
    forward, adjoint, scale = op.factor_passes(op.offset - y if mse else None)  # MSE: the passes give f − y
    N = op.n_samples
    lr, lam = opt.lr, opt.weight_decay
    decay, alpha, half_over_n = 1.0 - lr * lam, -lr * scale / N, 0.5 / N
    # L is the caller's to give up: L_r = L[p1:] is its buffer; the block keeps its updates as low-rank terms
    # (nqf.dynamics._lowrank) except where the factor is re-orthogonalised (a rotation needs it dense)
    Lr = L[p1:]
    rb = RightBlock(Lr, p1, lowrank=polish is None)
    # preallocated: the small block in two buffers (the step's and the next), f (or f − y), L_r L_lᵀ, K̄ᵀ
    Ls = [L[:p1].clone(), torch.empty_like(L[:p1])]
    f, Bt, Kbt = L.new_empty(N, op.n_outputs), L.new_empty(L.shape[0] - p1, p1), L.new_empty(L.shape[0] - p1, p1)
    Kb, fv, i = Kbt.T, f.view(-1), 0
    check = DivergenceCheck(divergence_threshold, L.dtype)
    status, message, saved, last_step = FINISHED, f"finished {steps} steps", 0, None
    for k in range(steps + 1):
        Ll = Ls[i]
        forward(rb.times_T(Ll, Bt), f)
        if mse:  # ½‖f − y‖²/N with one reduction (as MSE.value_and_residual), read as a float for the check
            r, value = f, torch.dot(fv, fv).item() * half_over_n
        else:
            Lb, r = loss.value_and_residual(f, y)
            value = float(Lb)
        if not check.armed:
            check.arm(value)
        saving = k == steps or k % save_every == 0
        if saving:
            L[:p1] = Ll
            rb.sync()
        if check.exceeded(value) or (saving and not all_finite(L)):
            recover = last_step is not None and opt.hessian_stability
            prev = _previous(last_step, rb.sync(), decay, alpha) if recover else None
            curv = None if prev is None else divergence_curvature(op, prev, r, lam, N, loss=loss.name)
            status, message = DIVERGED, _diverged(k, value, check, opt, saved, curv)
            break
        if saving:
            save(k, [L], value)
            saved += 1
        if k == steps:
            break
        adjoint(r, Kbt)
        # L_r in place; the factor before the step is recovered from (L_l, K̄ᵀ) if a divergence needs it
        last_step = (Ll, None, Kbt)
        rb.stepped_left(Kb, Ll, decay, alpha, Ls[1 - i])
        rb.update(Kbt, Ll, decay, alpha)
        i = 1 - i
        if polish is not None and k % polish_every == 0:
            L[:p1] = Ls[i]
            Lp = polish(L)  # the block is dense (lowrank=False): L is the factor
            if Lp is not None:  # rotated (rarely): the factor before the step is recovered now, and kept
                last_step = (Ll, _previous(last_step, Lr, decay, alpha), None)
                L = Lp.contiguous()
                Lr, Ls, i = L[p1:], [L[:p1].clone(), torch.empty_like(Ll)], 0
                rb = RightBlock(Lr, p1, lowrank=False)
    L[:p1] = Ls[i]
    rb.sync()
    return LoopOutcome(params=[L], status=status, message=message)


def _diverged(k: int, value: float, check: DivergenceCheck, opt: Optimizer, saved: int, curv) -> str:
    """The divergence message of :func:`~nqf.dynamics._loop.training_loop` for step ``k`` of plain GD."""
    return divergence_message(
        step=k,
        t=k * opt.lr,
        loss=value,
        limit=float(check.limit),
        lr=opt.lr,
        saved=saved,
        curvature=curv,
        momentum=0.0,
        optimizer=opt.name,
    )


def all_finite(x: torch.Tensor) -> bool:
    """Whether every entry of ``x`` is finite: a finite sum proves it (one reduction, no boolean temporary);
    otherwise (non-finite entries, or a sum that overflowed) the entries are tested one by one."""
    return bool(torch.isfinite(x.sum())) or bool(torch.isfinite(x).all())


def _previous(last_step, Lr: torch.Tensor, decay: float, alpha: float) -> torch.Tensor | None:
    """The factor before the last step from ``(L_l, L, None)`` (kept whole) or ``(L_l, None, K̄ᵀ)``: the in-place
    update of ``L_r`` undone, ``L_r = (L_r' − α K̄ᵀ L_l) / (1 − ηλ)`` (None when ``ηλ = 1``)."""
    Ll, kept, Kbt = last_step
    if kept is not None or decay == 0.0:
        return kept
    return torch.cat([Ll, torch.addmm(Lr, Kbt, Ll, alpha=-alpha).div_(decay)], 0)
