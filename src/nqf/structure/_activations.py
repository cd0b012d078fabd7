r"""The activation registry: one record per activation, everything the package knows about it.

The two-layer MLP structure matrix depends on the activation only through
``σ(0)`` (the linear term when it is non-zero), ``σ'(0)`` (the scale of ``A``)
and ``σ''(0)`` (whether the truncation error is cubic or quartic); ``σ'''(0)``
is the leading cubic correction.

Every table of activations in the package is derived from :data:`REGISTRY`:
the smooth names :func:`get_activation` accepts (:data:`ACTIVATIONS`), the
non-smooth names it refuses (:data:`NON_SMOOTH_ACTIVATIONS`), the
``torch.nn`` modules that unit discovery takes for elementwise activations
(``REGISTRY.module_classes()``) and refuses as non-smooth (``REGISTRY.module_classes(smooth=False)``),
the smooth replacements that refusals name (``REGISTRY.smooth_alternatives()``) and the ``act=`` choices
of ``nqf analyze``.
An activation is added to the package by adding its record here.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from .._validation import not_one_of
from ..errors import InvalidTypeError, NormalFormError

__all__ = [
    "Activation",
    "ActivationModule",
    "get_activation",
    "ActivationRegistry",
    "REGISTRY",
    "ACTIVATIONS",
    "NON_SMOOTH_ACTIVATIONS",
]

_NAN = math.nan


@dataclass(frozen=True)
class Activation:
    """An activation with its value and first three derivatives at zero, and the modules that compute it.

    Attributes
    ----------
    name : str
    fn : callable, tensor → tensor (elementwise)
    s0, s1, s2, s3 : float
        ``σ(0)``, ``σ'(0)``, ``σ''(0)``, ``σ'''(0)`` (NaN where the activation
        is not smooth at zero, or not known).
    smooth : bool
        Three times differentiable at zero (the normal form applies).
    modules : tuple of type
        The ``torch.nn`` module classes that compute it (empty when torch has none).
    accepts : callable, optional
        ``module → bool``: further condition on an instance of ``modules``
        (e.g. ``nn.GELU`` with ``approximate="none"``).
    factory : callable, optional
        ``() → nn.Module`` computing it (see :meth:`module`).
    """

    name: str
    fn: Callable[[torch.Tensor], torch.Tensor]
    s0: float
    s1: float
    s2: float
    s3: float = _NAN
    smooth: bool = True
    modules: tuple[type[nn.Module], ...] = ()
    accepts: Callable[[nn.Module], bool] | None = None
    factory: Callable[[], nn.Module] | None = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)

    def __repr__(self) -> str:
        flag = "" if self.smooth else ", non-smooth"
        return (
            f"Activation({self.name!r}, s0={self.s0:.4g}, s1={self.s1:.4g}, s2={self.s2:.4g}, s3={self.s3:.4g}{flag})"
        )

    @property
    def zgz(self) -> bool:
        """The zero-gradient condition holds for an MLP iff ``σ(0) = 0``."""
        return self.s0 == 0.0

    def matches(self, module: nn.Module) -> bool:
        """Whether ``module`` computes this activation (an instance of :attr:`modules`, or its ``ActivationModule``)."""
        if isinstance(module, ActivationModule):
            return module.name == self.name
        return isinstance(module, self.modules) and (self.accepts is None or self.accepts(module))

    def module(self) -> nn.Module:
        """A new ``nn.Module`` computing this activation (its torch module, else an :class:`ActivationModule`)."""
        return self.factory() if self.factory is not None else ActivationModule(self.name)


class ActivationModule(nn.Module):
    """An elementwise activation of :data:`REGISTRY` by name, for activations torch has no module for.

    Parameters
    ----------
    name : str
        A registry name (``"sin"``, ``"erf"``, ``"softplus-centred"``, …).

    Raises
    ------
    InvalidParameterError
        For a name that is not in the registry.
    """

    def __init__(self, name: str):
        super().__init__()
        rec = REGISTRY.find(name)
        if rec is None:
            raise not_one_of("name", name, sorted(_BY_KEY))
        self.name = rec.name

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _BY_KEY[_key(self.name)].fn(x)

    def extra_repr(self) -> str:
        return self.name


# --------------------------------------------------------------------------- functions (module level: picklable)
def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


def _softplus_centred(x: torch.Tensor) -> torch.Tensor:
    return F.softplus(x) - math.log(2.0)


def _prelu_default(x: torch.Tensor) -> torch.Tensor:
    """``nn.PReLU()`` at its initial slope 0.25."""
    return F.leaky_relu(x, 0.25)


def _threshold_zero(x: torch.Tensor) -> torch.Tensor:
    """``nn.Threshold(0, 0)``."""
    return F.threshold(x, 0.0, 0.0)


def _rrelu_eval(x: torch.Tensor) -> torch.Tensor:
    return F.rrelu(x, training=False)


def _exact_gelu(module: nn.Module) -> bool:
    return getattr(module, "approximate", "none") == "none"


_SQPI, _SQ2PI, _LN2 = math.sqrt(math.pi), math.sqrt(2.0 * math.pi), math.log(2.0)


def _smooth(name, fn, s0, s1, s2, s3, modules=(), factory=None, accepts=None) -> Activation:
    return Activation(name, fn, s0, s1, s2, s3, True, modules, accepts, factory)


def _kink(name, fn, s0, modules=(), factory=None) -> Activation:
    return Activation(name, fn, s0, _NAN, _NAN, _NAN, False, modules, None, factory)


def _key(name: str) -> str:
    return name.lower().replace("_", "-")


class ActivationRegistry(tuple):
    """Every activation the package knows: a tuple of :class:`Activation` records, smooth ones first, with the
    look-ups that unit discovery, the refusals and ``nqf analyze`` make in it."""

    __slots__ = ()

    def find(self, name: str) -> Activation | None:
        """The record named ``name`` (smooth or not; case and ``_``/``-`` ignored), or None.

        Unlike :func:`get_activation` it does not refuse non-smooth activations.
        """
        return next((a for a in self if _key(a.name) == _key(name)), None)

    def of_module(self, module: nn.Module) -> Activation | None:
        """The record of the activation ``module`` computes, or None (not an activation the registry knows).

        E.g. ``nn.Tanh()`` → the ``"tanh"`` record; ``nn.GELU(approximate="tanh")`` → None.
        """
        if isinstance(module, ActivationModule):
            return self.find(module.name)
        return next((a for a in self if a.matches(module)), None)

    def module_classes(self, smooth: bool | None = None) -> tuple[type[nn.Module], ...]:
        """The ``torch.nn`` classes of the activations, in registry order: of smooth (True) or non-smooth
        (False) activations only, or of all (None, the default)."""
        out: list[type[nn.Module]] = []
        for a in self:
            if smooth is None or a.smooth == smooth:
                out.extend(c for c in a.modules if c not in out)
        return tuple(out)

    @staticmethod
    def label(module: nn.Module) -> str:
        """The class name of ``module``, with the activation's name for an ``ActivationModule``:
        ``ActivationModule(abs)``."""
        name = type(module).__name__
        return f"{name}({module.name})" if isinstance(module, ActivationModule) else name

    def smooth_alternatives(self) -> tuple[str, ...]:
        """Names of the smooth nonlinear activations with ``σ(0) = 0`` and ``σ'(0) ≠ 0``: what refusals
        suggest."""
        return tuple(a.name for a in self if a.smooth and a.zgz and a.s1 != 0.0 and (a.s2 != 0.0 or a.s3 != 0.0))

    def smooth_alternatives_text(self) -> str:
        """:meth:`smooth_alternatives` in words, for error messages (``"tanh, sin, …, a centred softplus, …"``)."""
        names = ["a centred softplus" if n == "softplus-centred" else n for n in self.smooth_alternatives()]
        return ", ".join(names[:-1]) + " or " + names[-1]


#: Every activation the package knows, smooth ones first.  Derivatives at zero are analytic (tests check
#: them against torch autograd); non-smooth records carry ``σ(0)`` only.
REGISTRY = ActivationRegistry(
    (
        _smooth("tanh", torch.tanh, 0.0, 1.0, 0.0, -2.0, (nn.Tanh,), nn.Tanh),
        _smooth("sin", torch.sin, 0.0, 1.0, 0.0, -1.0),
        _smooth("erf", torch.erf, 0.0, 2.0 / _SQPI, 0.0, -4.0 / _SQPI),
        _smooth("gelu", F.gelu, 0.0, 0.5, 2.0 / _SQ2PI, 0.0, (nn.GELU,), nn.GELU, _exact_gelu),
        _smooth("softplus-centred", _softplus_centred, 0.0, 0.5, 0.25, 0.0),
        _smooth("sigmoid", torch.sigmoid, 0.5, 0.25, 0.0, -0.125, (nn.Sigmoid,), nn.Sigmoid),
        _smooth("linear", _identity, 0.0, 1.0, 0.0, 0.0, (nn.Identity,), nn.Identity),
        _smooth("square", torch.square, 0.0, 0.0, 2.0, 0.0),
        _smooth("silu", F.silu, 0.0, 0.5, 0.5, 0.0, (nn.SiLU,), nn.SiLU),
        _smooth("softplus", F.softplus, _LN2, 0.5, 0.25, 0.0, (nn.Softplus,), nn.Softplus),
        _smooth("mish", F.mish, 0.0, 0.6, 0.64, -0.096, (nn.Mish,), nn.Mish),
        _smooth("tanhshrink", F.tanhshrink, 0.0, 0.0, 0.0, 2.0, (nn.Tanhshrink,), nn.Tanhshrink),
        _smooth("logsigmoid", F.logsigmoid, -_LN2, 0.5, -0.25, 0.0, (nn.LogSigmoid,), nn.LogSigmoid),
        _kink("relu", torch.relu, 0.0, (nn.ReLU,), nn.ReLU),
        _kink("relu6", F.relu6, 0.0, (nn.ReLU6,), nn.ReLU6),
        _kink("leaky_relu", F.leaky_relu, 0.0, (nn.LeakyReLU,), nn.LeakyReLU),
        _kink("prelu", _prelu_default, 0.0, (nn.PReLU,), nn.PReLU),
        _kink("rrelu", _rrelu_eval, 0.0, (nn.RReLU,), nn.RReLU),
        _kink("elu", F.elu, 0.0, (nn.ELU,), nn.ELU),
        _kink("selu", F.selu, 0.0, (nn.SELU,), nn.SELU),
        _kink("celu", F.celu, 0.0, (nn.CELU,), nn.CELU),
        _kink("hardtanh", F.hardtanh, 0.0, (nn.Hardtanh,), nn.Hardtanh),
        _kink("abs", torch.abs, 0.0),
        _kink("hardswish", F.hardswish, 0.0, (nn.Hardswish,), nn.Hardswish),
        _kink("hardsigmoid", F.hardsigmoid, 0.5, (nn.Hardsigmoid,), nn.Hardsigmoid),
        _kink("hardshrink", F.hardshrink, 0.0, (nn.Hardshrink,), nn.Hardshrink),
        _kink("softshrink", F.softshrink, 0.0, (nn.Softshrink,), nn.Softshrink),
        _kink("softsign", F.softsign, 0.0, (nn.Softsign,), nn.Softsign),
        _kink("threshold", _threshold_zero, 0.0, (nn.Threshold,), functools.partial(nn.Threshold, 0.0, 0.0)),
    )
)


_BY_KEY: dict[str, Activation] = {_key(a.name): a for a in REGISTRY}

#: The smooth activations by name (a view of :data:`REGISTRY`; :func:`get_activation` accepts these names).
ACTIVATIONS: dict[str, Activation] = {a.name: a for a in REGISTRY if a.smooth}

#: Names of the activations that are not three times differentiable at zero (refused by name).
NON_SMOOTH_ACTIVATIONS: tuple[str, ...] = tuple(a.name for a in REGISTRY if not a.smooth)


def get_activation(activation) -> Activation:
    """Resolve an activation name or callable.

    Parameters
    ----------
    activation : str, Activation or callable
        A name from :data:`ACTIVATIONS` or any elementwise callable; for a
        callable, ``σ(0)`` … ``σ'''(0)`` are taken by autodiff and the
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
        rec = REGISTRY.find(activation)
        if rec is not None and rec.smooth:
            return rec
        if rec is not None:
            raise NormalFormError(
                f"`activation` {activation!r} is not three times differentiable at 0: the normal form "
                f"Tr[W Wᵀ A(x)] needs a C³ activation. Choose one of {sorted(ACTIVATIONS)} or a smooth callable."
            )
        raise not_one_of("activation", activation, sorted(ACTIVATIONS), alternative="a callable")
    if callable(activation):
        return _from_callable(activation)
    raise InvalidTypeError(f"`activation` must be a name or a callable; found {type(activation).__name__}")


def _from_callable(fn) -> Activation:
    x = torch.zeros((), dtype=torch.float64, requires_grad=True)
    y = fn(x)
    (d1,) = torch.autograd.grad(y, x, create_graph=True)
    (d2,) = torch.autograd.grad(d1, x, create_graph=True, allow_unused=True) if d1.requires_grad else (None,)
    d3 = None
    if d2 is not None and d2.requires_grad:
        (d3,) = torch.autograd.grad(d2, x, allow_unused=True)
    s0, s1 = float(y.detach()), float(d1.detach())
    s2 = 0.0 if d2 is None else float(d2.detach())
    s3 = 0.0 if d3 is None else float(d3)
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
    return Activation(name, fn, s0, s1, s2, s3)
