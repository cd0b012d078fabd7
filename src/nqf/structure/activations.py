r"""Smooth activations and the derivatives at zero that the normal form needs.

The two-layer MLP structure matrix depends on the activation only through
``σ(0)`` (the linear term when it is non-zero), ``σ'(0)`` (the scale of ``A``)
and ``σ''(0)`` (whether the truncation error is cubic or quartic).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..errors import InvalidParameterError, InvalidTypeError, NormalFormError

__all__ = ["Activation", "get_activation", "ACTIVATIONS", "NON_SMOOTH_ACTIVATIONS"]


@dataclass(frozen=True)
class Activation:
    """An activation with its value and first two derivatives at zero.

    Attributes
    ----------
    name : str
    fn : callable, tensor → tensor (elementwise)
    s0, s1, s2 : float
        ``σ(0)``, ``σ'(0)``, ``σ''(0)``.
    """

    name: str
    fn: Callable[[torch.Tensor], torch.Tensor]
    s0: float
    s1: float
    s2: float

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)

    @property
    def zgz(self) -> bool:
        """The zero-gradient condition holds for an MLP iff ``σ(0) = 0``."""
        return self.s0 == 0.0


def _softplus_centred(x):
    return torch.nn.functional.softplus(x) - math.log(2.0)


ACTIVATIONS: dict[str, Activation] = {
    "tanh": Activation("tanh", torch.tanh, 0.0, 1.0, 0.0),
    "sin": Activation("sin", torch.sin, 0.0, 1.0, 0.0),
    "erf": Activation("erf", torch.erf, 0.0, 2.0 / math.sqrt(math.pi), 0.0),
    "gelu": Activation("gelu", torch.nn.functional.gelu, 0.0, 0.5, 2.0 / math.sqrt(2.0 * math.pi)),
    "softplus-centred": Activation("softplus-centred", _softplus_centred, 0.0, 0.5, 0.25),
    "sigmoid": Activation("sigmoid", torch.sigmoid, 0.5, 0.25, 0.0),
    "linear": Activation("linear", lambda x: x, 0.0, 1.0, 0.0),
}

NON_SMOOTH_ACTIVATIONS = (
    "relu",
    "relu6",
    "leaky_relu",
    "elu",
    "selu",
    "celu",
    "hardtanh",
    "abs",
    "hardswish",
    "hardsigmoid",
)


def get_activation(activation) -> Activation:
    """Resolve an activation name or callable.

    Parameters
    ----------
    activation : str, Activation or callable
        A name from :data:`ACTIVATIONS` or any elementwise callable; for a
        callable, ``σ(0)``, ``σ'(0)``, ``σ''(0)`` are taken by autodiff and the
        function is checked to be smooth at zero.

    Raises
    ------
    NormalFormError
        For a non-smooth activation (ReLU and relatives): the normal form needs
        a C³ activation.
    ValueError
        For an unknown name.
    """
    if isinstance(activation, Activation):
        return activation
    if isinstance(activation, str):
        key = activation.lower().replace("_", "-") if activation.lower() != "leaky_relu" else activation.lower()
        if key in ACTIVATIONS:
            return ACTIVATIONS[key]
        if activation.lower() in NON_SMOOTH_ACTIVATIONS or key in NON_SMOOTH_ACTIVATIONS:
            raise NormalFormError(
                f"`activation` {activation!r} is not three times differentiable at 0: the normal form "
                f"Tr[W Wᵀ A(x)] needs a C³ activation. Choose one of {sorted(ACTIVATIONS)} or a smooth callable."
            )
        raise InvalidParameterError(
            f"`activation` must be one of {sorted(ACTIVATIONS)} or a callable; found {activation!r}"
        )
    if callable(activation):
        return _from_callable(activation)
    raise InvalidTypeError(f"`activation` must be a name or a callable; found {type(activation).__name__}")


def _from_callable(fn) -> Activation:
    x = torch.zeros((), dtype=torch.float64, requires_grad=True)
    y = fn(x)
    (d1,) = torch.autograd.grad(y, x, create_graph=True)
    (d2,) = torch.autograd.grad(d1, x, allow_unused=True) if d1.requires_grad else (None,)
    s0, s1 = float(y.detach()), float(d1.detach())
    s2 = 0.0 if d2 is None else float(d2)
    # smoothness: one-sided slopes of σ' must agree (a kink gives a jump)
    h = 1e-4
    hs = torch.tensor([-h, h], dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(fn(hs).sum(), hs)
    if abs(float(g[1] - g[0])) > 1e-2 * (abs(s1) + 1.0) or abs(s1 - float(g.mean())) > 1e-2 * (abs(s1) + 1):
        raise NormalFormError(
            f"`activation` {getattr(fn, '__name__', fn)!r} is not smooth at 0 (σ' jumps from {float(g[0]):.3g} "
            f"to {float(g[1]):.3g}): the normal form needs a C³ activation."
        )
    name = getattr(fn, "__name__", type(fn).__name__)
    return Activation(name, fn, s0, s1, s2)
