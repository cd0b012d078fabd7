r"""Per-sample losses and their residuals ``r = ∂ℓ/∂f`` (docs/theory.md §0).

The training loss is always the sample mean ``L = (1/N) Σ_n ℓ(f_n, y_n)``.
Predictions and targets are handled internally as ``(N, C)`` arrays.

* ``"mse"``: ``ℓ = ½ Σ_c (f_c − y_c)²``, ``r = f − y``; any ``C``.
* ``"logistic"``: binary, ``C = 1``; labels ``y ∈ {0, 1}`` (labels in
  ``{−1, +1}`` are accepted and mapped to ``(y + 1)/2``);
  ``ℓ = log(1 + e^f) − y f``, ``r = σ(f) − y``.
* ``"cross_entropy"``: softmax cross-entropy, ``C ≥ 2``; ``y`` integer class
  labels of shape ``(N,)`` or rows of class probabilities ``(N, C)``;
  ``ℓ = logsumexp(f) − Σ_c y_c f_c``, ``r = softmax(f) − y``.
"""

from __future__ import annotations

import torch

from .._validation import as_tensor, check_shape
from ..errors import InvalidParameterError, ShapeError

__all__ = ["LOSSES", "prepare_targets", "loss_value", "residual"]

LOSSES = ("mse", "logistic", "cross_entropy")


def check_loss(loss: str) -> str:
    if loss not in LOSSES:
        raise InvalidParameterError(f"`loss` must be one of {LOSSES}; found {loss!r}")
    return loss


def prepare_targets(y, loss: str, n_samples: int, n_outputs: int, dtype, device) -> torch.Tensor:
    """Validate targets and return them as a ``(N, C)`` tensor.

    Raises
    ------
    ShapeError, NonFiniteError, ValueError
        Wrong shape, NaN/inf entries, labels outside the loss's label set.
    """
    check_loss(loss)
    N, C = n_samples, n_outputs
    if loss == "cross_entropy":
        if C < 2:
            raise InvalidParameterError(
                f"`loss`='cross_entropy' needs an operator with ≥ 2 outputs; "
                f"found n_outputs={C} (use 'logistic' for one output)"
            )
        t = as_tensor("y", y, ndim=(1, 2), dtype=dtype, device=device)
        if t.ndim == 1:
            check_shape("y", t, (N,))
            if bool((t != t.round()).any()) or bool((t < 0).any()) or bool((t >= C).any()):
                raise InvalidParameterError(
                    f"`y` of shape (N,) must hold integer class labels in [0, {C}); "
                    f"found values in [{float(t.min()):g}, {float(t.max()):g}]"
                )
            return torch.nn.functional.one_hot(t.long(), C).to(dtype)
        check_shape("y", t, (N, C))
        if bool((t < 0).any()) or not torch.allclose(t.sum(1), torch.ones_like(t[:, 0])):
            raise InvalidParameterError(
                "`y` of shape (N, C) must hold class probabilities (non-negative rows summing to 1)"
            )
        return t
    t = as_tensor("y", y, ndim=(1, 2), dtype=dtype, device=device)
    if t.ndim == 1:
        if C != 1:
            raise ShapeError(f"`y` must have shape ({N}, {C}) for an operator with {C} outputs; found {tuple(t.shape)}")
        t = t[:, None]
    check_shape("y", t, (N, C))
    if loss == "logistic":
        if C != 1:
            raise InvalidParameterError(
                f"`loss`='logistic' is binary and needs n_outputs=1; found {C} (use 'cross_entropy')"
            )
        vals = set(torch.unique(t).tolist())
        if vals <= {0.0, 1.0}:
            return t
        if vals <= {-1.0, 1.0}:
            return 0.5 * (t + 1.0)
        raise InvalidParameterError(
            f"`y` for `loss`='logistic' must be labels in {{0, 1}} or {{−1, +1}}; found values {sorted(vals)[:5]}"
        )
    return t


def loss_value(f: torch.Tensor, y: torch.Tensor, loss: str) -> torch.Tensor:
    """Mean loss ``(1/N) Σ_n ℓ(f_n, y_n)`` for ``(N, C)`` predictions and prepared targets."""
    if loss == "mse":
        return 0.5 * ((f - y) ** 2).sum(1).mean()
    if loss == "logistic":
        return (torch.nn.functional.softplus(f) - y * f).sum(1).mean()
    return (torch.logsumexp(f, 1) - (y * f).sum(1)).mean()


def residual(f: torch.Tensor, y: torch.Tensor, loss: str) -> torch.Tensor:
    """``r_{n,c} = ∂ℓ/∂f_c (f_n, y_n)``, shape ``(N, C)``."""
    if loss == "mse":
        return f - y
    if loss == "logistic":
        return torch.sigmoid(f) - y
    return torch.softmax(f, 1) - y
