r"""Optimizers as objects: each owns and validates its settings and its update rule (docs/theory.md §3).

Conventions (docs/theory.md §0): ``L = (1/N) Σ_n ℓ(f_n, y_n)`` (a minibatch uses its own mean),
a step is ``x ← x − η g`` for every trained tensor ``x``, training time ``t = η · step``.

* :class:`GD` — full-batch gradient descent; weight decay λ adds ``(λ/2)‖x‖²`` to the loss
  (coupled L2, ``torch.optim.SGD``'s ``weight_decay``): ``g = ∇_x L + λ x``; heavy-ball momentum β
  (``torch.optim.SGD`` convention): ``v ← β v + g``, ``x ← x − η v``.
* :class:`SGD` — the same update on minibatches of ``batch_size`` samples
  (``dynamics._loop.minibatch_indices``).
* :class:`Adam` — ``torch.optim.Adam`` conventions, bias-corrected: ``m₁ ← β₁ m₁ + (1 − β₁) g``,
  ``m₂ ← β₂ m₂ + (1 − β₂) g²``, ``x ← x − η m̂₁ / (√m̂₂ + ε)``, ``m̂ᵢ = mᵢ / (1 − βᵢ^{k+1})``;
  full batch unless ``batch_size`` is given.

Closure: GD and SGD act on ``W`` from the left by ``I − ηS`` (``S = 2G + λI``), so their runs close
on ``M = W Wᵀ`` and commute with a change of basis of the unit space (``closes_on_M``,
``rotation_equivariant``); Adam rescales each coordinate of ``W`` by its own running second
moment, which is neither, so it runs only in weight form.

Adding an optimizer: subclass :class:`Optimizer` (a frozen dataclass; validate the new fields in
``_check``), set ``name``, ``closes_on_M``, ``rotation_equivariant`` and
``hessian_stability``, implement :meth:`~Optimizer.init_state` and :meth:`~Optimizer.update`, and
add the class to ``_BY_NAME`` if it has a string alias.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Any, ClassVar

import torch

from .._validation import ParameterError, float_param, int_param, not_one_of, positive_float

__all__ = ["Optimizer", "GD", "SGD", "Adam", "OPTIMIZERS", "as_optimizer"]

OPTIMIZERS = ("gd", "sgd", "adam")
_ADAM_BETAS = (0.9, 0.999)
_ADAM_EPS = 1e-8


@dataclass(frozen=True)
class Optimizer(ABC):
    """The update rule of a training step and its validated settings (module docstring).

    ``lr`` η > 0; ``weight_decay`` λ ≥ 0; ``momentum`` heavy-ball β ∈ [0, 1) (GD/SGD only);
    ``batch_size`` the minibatch size (``None``: full batch).  Bad settings raise
    :class:`~nqf._validation.ParameterError` naming the parameter.
    """

    lr: float
    _: KW_ONLY
    weight_decay: float = 0.0
    momentum: float = 0.0
    batch_size: int | None = None

    name: ClassVar[str] = ""
    #: The update of ``W`` is a function of ``M = W Wᵀ`` (the order-parameter form is exact).
    closes_on_M: ClassVar[bool] = True
    #: The update commutes with an orthogonal change of basis of the unit space (compression applies).
    rotation_equivariant: ClassVar[bool] = True
    #: Stable while ``η · λ_max(Hessian) < 2 (1 + β)`` (a curvature estimate suggests a step size).
    hessian_stability: ClassVar[bool] = True
    #: Why the order-parameter form refuses it (the message of :class:`~nqf.errors.NotClosedError`).
    not_closed: ClassVar[str] = ""

    def __post_init__(self):
        object.__setattr__(self, "lr", positive_float("lr", self.lr))
        object.__setattr__(self, "weight_decay", float_param("weight_decay", self.weight_decay, nonnegative=True))
        momentum = float_param("momentum", self.momentum)
        if not 0.0 <= momentum < 1.0:
            raise ParameterError(f"`momentum` must lie in [0, 1); found {momentum!r}")
        object.__setattr__(self, "momentum", momentum)
        if self.batch_size is not None:
            object.__setattr__(self, "batch_size", int_param("batch_size", self.batch_size, minimum=1))
        self._check()

    @abstractmethod
    def _check(self) -> None:
        """Checks of a subclass's own settings and combinations (run after the common ones)."""

    def check_samples(self, n_samples: int) -> None:
        """Refuse a ``batch_size`` larger than the number of samples."""
        if self.batch_size is not None:
            int_param("batch_size", self.batch_size, minimum=1, maximum=n_samples)

    @abstractmethod
    def init_state(self, params: Sequence[torch.Tensor]) -> dict:
        """The optimizer's buffers for the tensors ``params`` (a dict of lists, one entry per tensor)."""

    @abstractmethod
    def update(
        self, params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor], state: dict, k: int
    ) -> list[torch.Tensor]:
        """Step ``k`` (0-based) from the loss gradients ``grads`` (without weight decay); new tensors, ``state``
        updated in place."""

    def to_dict(self) -> dict:
        """JSON-ready settings, with the keys of a trajectory's ``info`` (``optimizer`` is the name)."""
        return {
            "optimizer": self.name,
            "lr": self.lr,
            "batch_size": self.batch_size,
            "weight_decay": self.weight_decay,
            "momentum": self.momentum,
        }


@dataclass(frozen=True)
class GD(Optimizer):
    """Full-batch gradient descent with weight decay and heavy-ball momentum (module docstring)."""

    name: ClassVar[str] = "gd"

    def _check(self) -> None:
        if self.batch_size is not None:
            raise ParameterError(
                "`batch_size` must be None for `optimizer`='gd' (full batch); use 'sgd' for minibatches; "
                f"found {self.batch_size}"
            )

    def init_state(self, params):
        return {"velocity": [torch.zeros_like(x) for x in params] if self.momentum else None}

    def update(self, params, grads, state, k):
        lr, lam, beta = self.lr, self.weight_decay, self.momentum
        velocity = state["velocity"]
        out = []
        for i, (x, g) in enumerate(zip(params, grads, strict=True)):
            if lam:
                g = g + lam * x
            if velocity is not None:
                v = beta * velocity[i] + g
                velocity[i] = v
                x = x - lr * v
            else:
                x = torch.add(x, g, alpha=-lr)
            out.append(x)
        return out


@dataclass(frozen=True)
class SGD(GD):
    """Minibatch gradient descent: :class:`GD`'s update on batches of ``batch_size`` samples (required)."""

    name: ClassVar[str] = "sgd"

    def _check(self) -> None:
        if self.batch_size is None:
            raise ParameterError(
                "`optimizer`='sgd' needs `batch_size` (minibatch size, an integer ≥ 1); found None "
                "(use 'gd' for full batch)"
            )


@dataclass(frozen=True)
class Adam(Optimizer):
    """Adam (``torch.optim.Adam`` conventions, bias-corrected) with coupled weight decay (module docstring).

    ``betas`` ``(β₁, β₂)`` each in ``[0, 1)``; ``eps`` > 0.  Weight form only.
    """

    betas: tuple[float, float] = _ADAM_BETAS
    eps: float = _ADAM_EPS

    name: ClassVar[str] = "adam"
    closes_on_M: ClassVar[bool] = False
    rotation_equivariant: ClassVar[bool] = False
    hessian_stability: ClassVar[bool] = False
    not_closed: ClassVar[str] = (
        "`optimizer`='adam' does not close on the order parameter M = W Wᵀ: Adam divides each coordinate "
        "of the gradient 2GW by its own running RMS, which depends on W itself (and on the basis), not "
        "only on W Wᵀ. Use `form`='weights' with `W0`, or a closed optimizer ('gd', 'sgd', momentum)."
    )

    def _check(self) -> None:
        if self.momentum != 0.0:
            raise ParameterError(
                "`momentum` is for 'gd'/'sgd'; Adam has its own `adam_betas` (`betas`); "
                f"found momentum={self.momentum!r}"
            )
        try:
            b1, b2 = self.betas
        except (TypeError, ValueError):
            raise ParameterError(f"`adam_betas` must be a pair (β₁, β₂); found {self.betas!r}") from None
        betas = (float_param("adam_betas[0]", b1), float_param("adam_betas[1]", b2))
        for i, b in enumerate(betas):
            if not 0.0 <= b < 1.0:
                raise ParameterError(f"`adam_betas[{i}]` must lie in [0, 1); found {b!r}")
        object.__setattr__(self, "betas", betas)
        object.__setattr__(self, "eps", positive_float("adam_eps", self.eps))

    def init_state(self, params):
        return {"moments": [(torch.zeros_like(x), torch.zeros_like(x)) for x in params]}

    def update(self, params, grads, state, k):
        lr, lam, (b1, b2) = self.lr, self.weight_decay, self.betas
        out = []
        for i, (x, g) in enumerate(zip(params, grads, strict=True)):
            if lam:
                g = g + lam * x
            m1, m2 = state["moments"][i]
            m1.mul_(b1).add_(g, alpha=1 - b1)
            m2.mul_(b2).addcmul_(g, g, value=1 - b2)
            mhat = m1 / (1 - b1 ** (k + 1))
            vhat = m2 / (1 - b2 ** (k + 1))
            out.append(x - lr * mhat / (vhat.sqrt() + self.eps))
        return out

    def to_dict(self) -> dict:
        return {**super().to_dict(), "adam_betas": list(self.betas), "adam_eps": self.eps}


_BY_NAME: dict[str, type[Optimizer]] = {cls.name: cls for cls in (GD, SGD, Adam)}


def optimizer_object(optimizer: Any) -> Optimizer:
    """``optimizer`` itself, checked to be an :class:`Optimizer` (what :func:`~nqf.dynamics.simulate` and
    :func:`~nqf.dynamics.train_network` take: the object owns the step size and every setting).

    Raises
    ------
    ParameterError
        ``optimizer`` is a name or anything else that is not an :class:`Optimizer`.
    """
    if isinstance(optimizer, Optimizer):
        return optimizer
    hint = f" (build it with nqf.dynamics.as_optimizer({optimizer!r}, lr=…))" if isinstance(optimizer, str) else ""
    raise ParameterError(
        f"`optimizer` must be a nqf.dynamics.Optimizer such as GD(lr), SGD(lr, batch_size=…) or Adam(lr){hint}; "
        f"found {optimizer!r}"
    )


def as_optimizer(
    optimizer: str | Optimizer = "gd",
    *,
    lr: Any = None,
    momentum: Any = 0.0,
    weight_decay: Any = 0.0,
    batch_size: Any = None,
    adam_betas: Any = _ADAM_BETAS,
    adam_eps: Any = _ADAM_EPS,
) -> Optimizer:
    """The :class:`Optimizer` of a run: ``optimizer`` itself when it is one (the other keywords must then keep
    their defaults), else built from its name (``"gd"``, ``"sgd"``, ``"adam"``) and the keywords.

    Raises
    ------
    ParameterError
        An unknown name, a bad setting, or a keyword given beside an optimizer object.
    """
    if isinstance(optimizer, Optimizer):
        defaults = dict(lr=None, momentum=0.0, weight_decay=0.0, batch_size=None, adam_betas=_ADAM_BETAS)
        values = dict(lr=lr, momentum=momentum, weight_decay=weight_decay, batch_size=batch_size)
        values.update(adam_betas=tuple(adam_betas), adam_eps=adam_eps)
        for key, value in values.items():
            if value != defaults.get(key, _ADAM_EPS):
                raise ParameterError(
                    f"`{key}` must not be given beside an optimizer object, which owns its settings (set it on "
                    f"the object instead); found {key}={value!r} beside `optimizer`={optimizer!r}"
                )
        return optimizer
    if not isinstance(optimizer, str) or optimizer not in _BY_NAME:
        raise not_one_of("optimizer", optimizer, OPTIMIZERS, alternative="a nqf.dynamics.Optimizer")
    if optimizer == "adam":
        return Adam(
            lr, weight_decay=weight_decay, momentum=momentum, batch_size=batch_size, betas=adam_betas, eps=adam_eps
        )
    return _BY_NAME[optimizer](lr, weight_decay=weight_decay, momentum=momentum, batch_size=batch_size)
