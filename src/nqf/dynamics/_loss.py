r"""The training losses as objects, written once for predictions of shape ``(…, N, C)`` (docs/theory.md §0).

The training loss is the sample mean ``L = (1/N) Σ_n ℓ(f_n, y_n)`` over the second-to-last axis;
leading axes are a batch of runs (:func:`~nqf.dynamics.simulate_batched`).  Each loss has a
``name`` (its string alias), :meth:`~Loss.value` ``L``, :meth:`~Loss.residual`
``r = ∂ℓ/∂f`` (so ``∂L/∂f_n = r_n / N``) and :meth:`~Loss.prepare` for the targets.

* :class:`MSE` (``"mse"``): ``ℓ = ½ Σ_c (f_c − y_c)²``, ``r = f − y``; any ``C``.
* :class:`Logistic` (``"logistic"``): binary, ``C = 1``; labels ``y ∈ {0, 1}`` (labels in
  ``{−1, +1}`` are accepted and mapped to ``(y + 1)/2``); ``ℓ = log(1 + e^f) − y f``, ``r = σ(f) − y``.
* :class:`CrossEntropy` (``"cross_entropy"``): softmax cross-entropy, ``C ≥ 2``; ``y`` integer class
  labels of shape ``(N,)`` or rows of class probabilities ``(N, C)``;
  ``ℓ = logsumexp(f) − Σ_c y_c f_c``, ``r = softmax(f) − y``.

Every loss depends on the weights only through ``f = f(0) + 𝒜(M)``, so each closes on the order
parameter (``closes_on_M``); only MSE is ``quadratic`` in ``f`` (the batched path then works with
the QR factor of the operator matrix, and a curvature estimate exists for the divergence message).

Adding a loss: subclass :class:`Loss` with a ``name``, :meth:`~Loss.value`, :meth:`~Loss.residual`
(and :meth:`~Loss.check_targets` for its label set), and add it to ``_BY_NAME``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import torch

from .._validation import as_tensor, check_shape, not_one_of
from ..errors import InvalidParameterError, ShapeError

__all__ = ["Loss", "MSE", "Logistic", "CrossEntropy", "LOSSES", "as_loss"]


@dataclass(frozen=True)
class Loss(ABC):
    """A per-sample loss ``ℓ(f, y)`` averaged over the samples (module docstring)."""

    name: ClassVar[str] = ""
    #: ``L`` depends on the weights only through ``f = f(0) + 𝒜(M)``.
    closes_on_M: ClassVar[bool] = True
    #: ``ℓ = ½ ‖f − y‖²`` (a sum of squares of the residual).
    quadratic: ClassVar[bool] = False

    @abstractmethod
    def value(self, f: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``L = (1/N) Σ_n ℓ(f_n, y_n)`` for ``f`` of shape ``(…, N, C)`` and prepared targets; shape ``(…)``."""

    @abstractmethod
    def residual(self, f: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``r_{…,n,c} = ∂ℓ/∂f_c (f_n, y_n)``, the shape of ``f``."""

    def value_and_residual(self, f: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(L, r)`` together (the loops need both at every step)."""
        return self.value(f, y), self.residual(f, y)

    def check_targets(self, t: torch.Tensor, n_samples: int, n_outputs: int) -> torch.Tensor:
        """Targets of shape ``(N, C)`` in this loss's label set (``ValueError`` subclasses otherwise)."""
        return t

    def prepare(self, y, n_samples: int, n_outputs: int, dtype, device) -> torch.Tensor:
        """Validate targets and return them as a ``(N, C)`` tensor.

        Raises
        ------
        ShapeError, NonFiniteError, InvalidParameterError
            Wrong shape, NaN/inf entries, labels outside the loss's label set.
        """
        N, C = n_samples, n_outputs
        t = as_tensor("y", y, ndim=(1, 2), dtype=dtype, device=device)
        if t.ndim == 1:
            if C != 1:
                raise ShapeError(
                    f"`y` must have shape ({N}, {C}) for an operator with {C} outputs; found {tuple(t.shape)}"
                )
            t = t[:, None]
        check_shape("y", t, (N, C))
        return self.check_targets(t, N, C)

    def to_dict(self) -> dict:
        """JSON-ready: ``{"loss": name}`` (the key of a trajectory's ``info``)."""
        return {"loss": self.name}


@dataclass(frozen=True)
class MSE(Loss):
    """``ℓ = ½ Σ_c (f_c − y_c)²``, ``r = f − y``."""

    name: ClassVar[str] = "mse"
    quadratic: ClassVar[bool] = True

    def value(self, f, y):
        return 0.5 * ((f - y) ** 2).sum(-1).mean(-1)

    def residual(self, f, y):
        return f - y

    def value_and_residual(self, f, y):
        """``½ ‖r‖² / N`` with one reduction per run; the residual is the same difference ``r = f − y``."""
        r = f - y
        n = f.shape[-2]
        rf = r.reshape(*r.shape[:-2], -1)
        if rf.ndim == 1:
            return 0.5 * torch.dot(rf, rf) / n, r
        return 0.5 * (rf * rf).sum(-1) / n, r


@dataclass(frozen=True)
class Logistic(Loss):
    """Binary logistic loss ``ℓ = log(1 + e^f) − y f`` on labels in ``{0, 1}``, ``r = σ(f) − y``."""

    name: ClassVar[str] = "logistic"

    def value(self, f, y):
        return (torch.nn.functional.softplus(f) - y * f).sum(-1).mean(-1)

    def residual(self, f, y):
        return torch.sigmoid(f) - y

    def check_targets(self, t, n_samples, n_outputs):
        if n_outputs != 1:
            raise InvalidParameterError(
                f"`loss`='logistic' is binary and needs n_outputs=1; found {n_outputs} (use 'cross_entropy')"
            )
        vals = set(torch.unique(t).tolist())
        if vals <= {0.0, 1.0}:
            return t
        if vals <= {-1.0, 1.0}:
            return 0.5 * (t + 1.0)
        raise InvalidParameterError(
            f"`y` for `loss`='logistic' must be labels in {{0, 1}} or {{−1, +1}}; found values {sorted(vals)[:5]}"
        )


@dataclass(frozen=True)
class CrossEntropy(Loss):
    """Softmax cross-entropy ``ℓ = logsumexp(f) − Σ_c y_c f_c``, ``r = softmax(f) − y``."""

    name: ClassVar[str] = "cross_entropy"

    def value(self, f, y):
        return (torch.logsumexp(f, -1) - (y * f).sum(-1)).mean(-1)

    def residual(self, f, y):
        return torch.softmax(f, -1) - y

    def prepare(self, y, n_samples, n_outputs, dtype, device):
        """Class labels ``(N,)`` (one-hot encoded) or class probabilities ``(N, C)``, as ``(N, C)``."""
        N, C = n_samples, n_outputs
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


_BY_NAME: dict[str, type[Loss]] = {cls.name: cls for cls in (MSE, Logistic, CrossEntropy)}
LOSSES = tuple(_BY_NAME)


def as_loss(loss) -> Loss:
    """The :class:`Loss` for a loss object or its string alias (``"mse"``, ``"logistic"``, ``"cross_entropy"``).

    Raises
    ------
    ParameterError
        An unknown name or a value that is neither a name nor a :class:`Loss` (an ``NQFError``,
        ``ValueError`` and ``TypeError``).
    """
    if isinstance(loss, Loss):
        return loss
    if isinstance(loss, str) and loss in _BY_NAME:
        return _BY_NAME[loss]()
    raise not_one_of("loss", loss, LOSSES, alternative="a nqf.dynamics.Loss")
