r"""Per-sample losses and their residuals ``r = ∂ℓ/∂f`` by name (docs/theory.md §0).

The functions of this module are the string forms of the :class:`~nqf.dynamics.Loss` objects
(:mod:`nqf.dynamics._loss`, where the formulas and label conventions are written once): each
resolves ``loss`` (a name in :data:`LOSSES` or a :class:`~nqf.dynamics.Loss`) with
:func:`~nqf.dynamics.as_loss` and calls the object.  The training loss is always the sample mean
``L = (1/N) Σ_n ℓ(f_n, y_n)``; predictions and targets are ``(N, C)`` arrays.
"""

from __future__ import annotations

import torch

from ._loss import LOSSES, Loss, as_loss

__all__ = ["LOSSES", "prepare_targets", "loss_value", "residual", "check_loss"]


def check_loss(loss: str | Loss) -> str:
    """The name of ``loss`` (a name or a :class:`~nqf.dynamics.Loss`); ``ParameterError`` for an unknown one."""
    return as_loss(loss).name


def prepare_targets(y, loss: str | Loss, n_samples: int, n_outputs: int, dtype, device) -> torch.Tensor:
    """Validate targets and return them as a ``(N, C)`` tensor (:meth:`nqf.dynamics.Loss.prepare`)."""
    return as_loss(loss).prepare(y, n_samples, n_outputs, dtype, device)


def loss_value(f: torch.Tensor, y: torch.Tensor, loss: str | Loss) -> torch.Tensor:
    """Mean loss ``(1/N) Σ_n ℓ(f_n, y_n)`` for ``(N, C)`` predictions and prepared targets."""
    return as_loss(loss).value(f, y)


def residual(f: torch.Tensor, y: torch.Tensor, loss: str | Loss) -> torch.Tensor:
    """``r_{n,c} = ∂ℓ/∂f_c (f_n, y_n)``, shape ``(N, C)``."""
    return as_loss(loss).residual(f, y)
