r"""The one discrete training loop: GD / minibatch SGD / heavy-ball momentum / weight decay / Adam (docs/theory.md §3).

Conventions (docs/theory.md §0): ``L = (1/N) Σ_n ℓ(f_n, y_n)`` (a minibatch uses its own
mean), a step is ``x ← x − η ∇_x L`` for every trained tensor ``x``, training time
``t = η · step``.  The update rules are the :class:`~nqf.dynamics.Optimizer` objects
(:mod:`nqf.dynamics._optim`), each applied to every tensor of the list:

* weight decay λ adds ``(λ/2)‖x‖²`` to the loss (coupled L2, ``torch.optim.SGD``'s
  ``weight_decay``): ``g = ∇_x L + λ x``;
* plain GD/SGD: ``x ← x − η g``;
* heavy-ball momentum β (``torch.optim.SGD`` convention): ``v ← β v + g``, ``x ← x − η v``;
* Adam (``torch.optim.Adam`` conventions, bias-corrected): ``m₁ ← β₁ m₁ + (1 − β₁) g``,
  ``m₂ ← β₂ m₂ + (1 − β₂) g²``, ``x ← x − η m̂₁ / (√m̂₂ + ε)`` with
  ``m̂ᵢ = mᵢ / (1 − βᵢ^{k+1})``.

:func:`training_loop` runs these steps with the minibatches of :func:`minibatch_indices`,
saves every ``save_every`` steps (step 0 and the last step always), and stops when the
batch loss is not finite or exceeds ``divergence_threshold × L(0)`` (``L(0)`` the
full-data loss at step 0; :class:`DivergenceCheck`, shared with
:func:`~nqf.dynamics.simulate_batched`).  What is trained and how its loss and gradient are computed
is the caller's: the weight and order-parameter forms of :func:`~nqf.dynamics.simulate`
pass the factor of ``M`` and the closed gradient ``S L + h cᵀ``;
:func:`~nqf.dynamics.train_network` passes the unit weights of a real module and the
autograd gradient.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .._validation import divergence_message
from ..results import Result, summarize
from ._optim import OPTIMIZERS, Optimizer, as_optimizer
from ._trajectory import DIVERGED, FINISHED

__all__ = [
    "StepRule",
    "Descent",
    "DivergenceCheck",
    "LoopOutcome",
    "training_loop",
    "minibatch_indices",
    "OPTIMIZERS",
]


def minibatch_indices(n_samples: int, batch_size: int | None, steps: int, seed: int = 0) -> Iterator:
    """The minibatches of a run: a fresh random permutation per epoch, consecutive chunks of it.

    The same ``(n_samples, batch_size, steps, seed)`` gives the same batches in
    :func:`~nqf.dynamics.simulate` (either form) and in :func:`~nqf.dynamics.train_network`.
    An epoch's last incomplete chunk is dropped (each batch has exactly
    ``batch_size`` samples).

    Yields
    ------
    torch.Tensor of int64, shape (batch_size,) (CPU), or ``None`` for full batch.
    """
    if batch_size is None:
        for _ in range(steps):
            yield None
        return
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    perm, pos = torch.randperm(n_samples, generator=gen), 0
    for _ in range(steps):
        if pos + batch_size > n_samples:
            perm, pos = torch.randperm(n_samples, generator=gen), 0
        yield perm[pos : pos + batch_size]
        pos += batch_size


@dataclass(frozen=True)
class StepRule:
    """The update rule of a step by name (module docstring): ``optimizer`` ``"gd"``/``"sgd"`` (with ``momentum``
    β ∈ [0, 1)) or ``"adam"``; ``weight_decay`` λ ≥ 0; step size ``lr`` η.  The string form of the
    :class:`~nqf.dynamics.Optimizer` objects (:meth:`to_optimizer`); the minibatches are the loop's."""

    lr: float
    optimizer: str = "gd"
    momentum: float = 0.0
    weight_decay: float = 0.0
    adam_betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = 1e-8

    def to_optimizer(self) -> Optimizer:
        """The optimizer object with these settings (``"sgd"``: :class:`GD`'s update, the loop draws the batches)."""
        name = "gd" if self.optimizer == "sgd" else self.optimizer
        return as_optimizer(
            name,
            lr=self.lr,
            momentum=self.momentum,
            weight_decay=self.weight_decay,
            adam_betas=self.adam_betas,
            adam_eps=self.adam_eps,
        )


class Descent:
    """The optimizer state over a list of tensors: momentum buffers ``velocity`` (heavy ball) or the
    Adam ``moments`` (:meth:`nqf.dynamics.Optimizer.init_state`).  :meth:`step` returns new tensors
    (the inputs are not modified)."""

    def __init__(self, rule: Optimizer | StepRule, params: Sequence[torch.Tensor]):
        self.rule = rule.to_optimizer() if isinstance(rule, StepRule) else rule
        self.state = self.rule.init_state(params)

    @property
    def velocity(self) -> list | None:
        """The heavy-ball buffers (one per tensor; ``None`` without momentum); entries may be replaced."""
        return self.state.get("velocity")

    @property
    def moments(self) -> list | None:
        """Adam's ``(m₁, m₂)`` per tensor, else ``None``."""
        return self.state.get("moments")

    def step(self, params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor], k: int) -> list[torch.Tensor]:
        """One step ``k`` (0-based; Adam's bias correction uses ``k + 1``) from the loss gradients ``grads``."""
        return self.rule.update(params, grads, self.state, k)


class DivergenceCheck:
    """Divergence detection shared by :func:`training_loop` and :func:`~nqf.dynamics.simulate_batched`.

    :meth:`arm` fixes the limit ``divergence_threshold × max(L(0), tiny)`` from the full-data loss at step 0
    (``tiny`` of the run's dtype; a float, or a tensor of one limit per run); :meth:`exceeded` is true
    where a loss is not finite or exceeds the limit.
    """

    def __init__(self, threshold: float, dtype: torch.dtype):
        self.threshold = float(threshold)
        self.tiny = torch.finfo(dtype).tiny
        self.limit: Any = None  # a float, or a tensor of one limit per run

    @property
    def armed(self) -> bool:
        return self.limit is not None

    def arm(self, L0) -> None:
        if isinstance(L0, torch.Tensor) and L0.ndim:
            self.limit = self.threshold * torch.clamp(L0, min=self.tiny)
        else:
            self.limit = self.threshold * max(float(L0), self.tiny)

    def exceeded(self, L):
        """``bool`` for one run (``L`` a number), a boolean tensor for a batch of runs."""
        if isinstance(L, torch.Tensor) and L.ndim:
            return ~(torch.isfinite(L) & (L <= self.limit))
        value = float(L)
        return not math.isfinite(value) or value > self.limit


@dataclass(frozen=True)
class LoopOutcome(Result):
    """How :func:`training_loop` ended: the final tensors, ``status`` (``0`` finished, ``-1``
    diverged) and the message."""

    params: list
    status: int
    message: str

    def __repr__(self) -> str:
        return f"LoopOutcome(tensors={len(self.params)}, status={self.status}, message={summarize(self.message)})"

    def to_dict(self) -> dict:
        """JSON-ready: the shapes of the final tensors, ``status`` and ``message``."""
        return {"shapes": [list(x.shape) for x in self.params], "status": int(self.status), "message": self.message}


def training_loop(
    params: Sequence[torch.Tensor],
    rule: Optimizer | StepRule,
    *,
    steps: int,
    n_samples: int,
    batch_size: int | None,
    seed: int,
    save_every: int,
    divergence_threshold: float,
    evaluate: Callable,
    gradient: Callable,
    save: Callable,
    full_loss: Callable | None = None,
    after_step: Callable | None = None,
    curvature: Callable | None = None,
) -> LoopOutcome:
    r"""Run ``steps`` steps of ``rule`` on the tensors ``params`` (module docstring).

    At each step ``k = 0, …, steps``: the batch loss at the current tensors, the
    divergence check, the save (every ``save_every`` steps, and the last), then — except
    after the last step — the gradient and the update.

    Parameters
    ----------
    params : sequence of torch.Tensor
        The trained tensors at step 0.
    rule : Optimizer or StepRule
        The update (an :class:`~nqf.dynamics.Optimizer`, or its string form :class:`StepRule`).
    steps, n_samples, batch_size, seed
        Number of steps; samples and minibatch size (``None``: full batch) and seed of
        :func:`minibatch_indices`.
    save_every : int
        Save every this many steps (step 0 and the last step always).
    divergence_threshold : float
        Stop when the batch loss is not finite or exceeds this multiple of the full-data ``L(0)``,
        or (at a save) a tensor is not finite.
    evaluate : callable ``(params, idx) -> (loss, ctx)``
        The mean loss on the batch ``idx`` (int64 CPU tensor, ``None`` = all data) at ``params``
        and whatever the gradient needs (``ctx``: residuals, an autograd graph).
    gradient : callable ``(params, ctx, idx) -> list of torch.Tensor``
        ``∇_x L`` on that batch, one per tensor, without weight decay (tensors without an autograd graph:
        detached, as ``torch.autograd.grad`` returns them).
    save : callable ``(k, params, loss)``
        Store a state; ``loss`` is the full-data loss (float).
    full_loss : callable ``params -> float``, optional
        The full-data loss at a save or at step 0 of a minibatch run (default: ``evaluate(params, None)``).
    after_step : callable ``(k, params, descent, ctx) -> params or None``, optional
        Called after each update with the new tensors and the :class:`Descent` (whose buffers it may
        replace); a returned list replaces the tensors (e.g. a rotation of a factor).
    curvature : callable ``(previous_params, ctx) -> float or None``, optional
        Curvature estimate for the divergence message (asked only for full-batch GD/momentum).

    Returns
    -------
    LoopOutcome
    """
    params = list(params)
    descent = Descent(rule, params)
    opt = descent.rule
    check = DivergenceCheck(divergence_threshold, params[0].dtype)
    batches = minibatch_indices(n_samples, batch_size, steps, seed)
    status, message = FINISHED, f"finished {steps} steps"
    previous, saved = None, 0
    for k in range(steps + 1):
        last = k == steps
        idx = None if last else next(batches)
        Lb, ctx = evaluate(params, idx)
        saving = last or k % save_every == 0
        if idx is None:
            Lfull = Lb
        elif saving or not check.armed:
            Lfull = float(evaluate(params, None)[0]) if full_loss is None else full_loss(params)
        if not check.armed:
            check.arm(Lfull)
        if check.exceeded(Lb) or (saving and not all(bool(torch.isfinite(x).all()) for x in params)):
            status = DIVERGED
            curv = (
                curvature(previous, ctx)
                if curvature is not None and batch_size is None and opt.hessian_stability
                else None
            )
            message = divergence_message(
                step=k,
                t=k * opt.lr,
                loss=float(Lb),
                limit=float(check.limit),
                lr=opt.lr,
                saved=saved,
                curvature=curv,
                momentum=opt.momentum,
                optimizer=opt.name,
            )
            break
        if saving:
            save(k, params, float(Lfull))
            saved += 1
        if last:
            break
        grads = gradient(params, ctx, idx)
        previous = params
        params = descent.step(params, grads, k)  # the tensors and gradients carry no autograd graph
        if after_step is not None:
            params = after_step(k, params, descent, ctx) or params
    return LoopOutcome(params=params, status=status, message=message)
