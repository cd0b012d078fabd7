"""Input validation shared by all modules: conversion to tensors with clear errors.

Scalar checks (:func:`positive_float`, :func:`positive_int`, :func:`seed_value`, …)
raise :class:`ParameterError`, an :class:`~nqf.errors.NQFError` that is also a
``ValueError`` and a ``TypeError``, with a message that names the parameter, says
what was expected and what was found.  Tensors passed in are never attached to the
caller's autograd graph (:func:`as_tensor` detaches them).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import numbers
from collections.abc import Iterator, Sequence

import numpy as np
import torch

from .errors import InvalidParameterError, InvalidTypeError, NonFiniteError, ShapeError


class ParameterError(InvalidParameterError, TypeError):
    """A scalar parameter has the wrong type or an invalid value (the message names it).

    An :class:`~nqf.errors.InvalidParameterError` (so an ``NQFError`` and a ``ValueError``)
    and also a ``TypeError``, so callers may catch whichever they expect.
    """


DEFAULT_DTYPE = torch.float64

#: Round-off scale per dtype, used to choose tolerances from the numerics.
EPS = {torch.float64: float(np.finfo(np.float64).eps), torch.float32: float(np.finfo(np.float32).eps)}


def as_tensor(
    name: str,
    value,
    *,
    ndim: int | Sequence[int] | None = None,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
    finite: bool = True,
    copy: bool = False,
) -> torch.Tensor:
    """Convert ``value`` to a floating tensor, checking dimensions and finiteness.

    Parameters
    ----------
    name : str
        Parameter name used in error messages.
    value : array_like or torch.Tensor
        The input.
    ndim : int or sequence of int, optional
        Allowed numbers of dimensions.
    dtype : torch.dtype, optional
        Target dtype. Default: keep a floating tensor's dtype, else float64.
    device : optional
        Target device. Default: the tensor's own device (CPU for arrays).
    finite : bool
        Raise :class:`NonFiniteError` if any entry is NaN or infinite.
    copy : bool
        Return a tensor that never shares memory with ``value`` (for inputs the
        callee keeps, so that the caller mutating its array later changes nothing).

    A tensor with ``requires_grad`` is detached: no autograd graph grows from an input.
    """
    if isinstance(value, torch.Tensor):
        t = value.detach()
    else:
        try:
            t = torch.as_tensor(np.asarray(value))
        except (TypeError, ValueError) as exc:
            raise InvalidTypeError(
                f"`{name}` must be an array or tensor of numbers; found {type(value).__name__} ({exc})"
            ) from exc
    if t.dtype == torch.bool or t.is_complex():
        raise InvalidTypeError(f"`{name}` must be a real floating array; found dtype {t.dtype}")
    if dtype is None:
        dtype = t.dtype if t.is_floating_point() else DEFAULT_DTYPE
    src = t
    t = t.to(dtype=dtype, device=device if device is not None else t.device)
    if copy and (t is src or t.data_ptr() == src.data_ptr()):
        t = t.clone()
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if t.ndim not in allowed:
            exp = " or ".join(str(a) for a in allowed)
            raise ShapeError(f"`{name}` must have {exp} dimensions; found shape {tuple(t.shape)} ({t.ndim} dimensions)")
    if finite and t.numel() and not all_finite(t):
        bad = int((~torch.isfinite(t)).sum())
        raise NonFiniteError(f"`{name}` must be finite; found {bad} NaN/inf entries out of {t.numel()}")
    return t


def all_finite(t: torch.Tensor) -> bool:
    """True when every entry of ``t`` is finite, without an elementwise temporary for large arrays.

    A sum is NaN or infinite whenever any term is, so a finite sum proves
    finiteness; only when the sum is not finite (a non-finite entry, or an
    overflow of huge finite entries) are the entries checked chunk by chunk.
    """
    if bool(torch.isfinite(t.sum())):
        return True
    flat = t.reshape(-1)
    step = 1 << 22
    return all(bool(torch.isfinite(flat[i : i + step]).all()) for i in range(0, flat.numel(), step))


def positive_int(name: str, value) -> int:
    """``value`` as an ``int`` ≥ 1; a bool, a non-integer or a value below 1 raises ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < 1:
        raise ParameterError(f"`{name}` must be a positive integer; found {value!r}")
    return int(value)


def check_shape(name: str, t: torch.Tensor, shape: Sequence[int | None]) -> None:
    """Raise :class:`ShapeError` unless ``t.shape`` matches ``shape`` (``None`` = any size)."""
    ok = t.ndim == len(shape) and all(s is None or s == d for s, d in zip(shape, t.shape, strict=True))
    if not ok:
        exp = "(" + ", ".join("any" if s is None else str(s) for s in shape) + ")"
        raise ShapeError(f"`{name}` must have shape {exp}; found {tuple(t.shape)}")


def tolerance(dtype: torch.dtype, factor: float = 1e3) -> float:
    """Relative tolerance for a check dominated by round-off in ``dtype``."""
    return factor * EPS.get(dtype, EPS[torch.float32])


# --------------------------------------------------------------------------- scalar parameters
def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def _describe(value) -> str:
    return f"{value!r} ({type(value).__name__})"


def int_param(name: str, value, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` as an ``int`` in ``[minimum, maximum]``; bools, floats, None and strings are refused."""
    if not _is_int(value):
        kind = "a boolean" if isinstance(value, (bool, np.bool_)) else _describe(value)
        raise ParameterError(f"`{name}` must be an integer; found {kind}")
    v = int(value)
    if (minimum is not None and v < minimum) or (maximum is not None and v > maximum):
        lo = "-inf" if minimum is None else str(minimum)
        hi = "inf" if maximum is None else str(maximum)
        raise ParameterError(f"`{name}` must be an integer in [{lo}, {hi}]; found {v}")
    return v


def int_tuple(name: str, value, n: int, minimum: int) -> tuple[int, ...]:
    """``value`` as a tuple of ``n`` integers ≥ ``minimum`` (an int is repeated)."""
    vals = (value,) * n if not isinstance(value, (tuple, list)) else tuple(value)
    ok = len(vals) == n and all(not isinstance(v, bool) and isinstance(v, int) and v >= minimum for v in vals)
    if not ok:
        what = "an int" if n == 1 else "an int or a pair of ints"
        raise InvalidParameterError(f"`{name}` must be {what}, each ≥ {minimum}; found {value!r}")
    return vals


def float_param(
    name: str, value, *, positive: bool = False, nonnegative: bool = False, finite: bool = True, allow_inf: bool = False
) -> float:
    """``value`` as a real ``float`` (numpy scalars and 0-d tensors accepted; bools, NaN and inf refused).

    ``positive``/``nonnegative`` add a sign condition; ``allow_inf`` accepts ``+inf`` (never NaN).
    """
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or value.is_complex() or value.dtype == torch.bool:
            raise ParameterError(
                f"`{name}` must be a real number; found a tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
            )
        value = value.detach().item()
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        kind = "a boolean" if isinstance(value, (bool, np.bool_)) else _describe(value)
        raise ParameterError(f"`{name}` must be a real number; found {kind}")
    v = float(value)
    if math.isnan(v):
        raise ParameterError(f"`{name}` must be a number; found NaN")
    if math.isinf(v) and finite and not (allow_inf and v > 0):
        raise ParameterError(f"`{name}` must be finite; found {v}")
    if positive and not v > 0:
        raise ParameterError(f"`{name}` must be a positive {'finite ' if finite else ''}number; found {v!r}")
    if nonnegative and not v >= 0:
        raise ParameterError(f"`{name}` must be a non-negative {'finite ' if finite else ''}number; found {v!r}")
    return v


def positive_float(name: str, value) -> float:
    """A finite real ``> 0`` (learning rates, tolerances)."""
    return float_param(name, value, positive=True)


def unit_fraction(name: str, value, what: str = "") -> float:
    """A finite real in the open interval ``(0, 1)`` (a fraction, a level of confidence, the initial scale), with one
    wording for every way it can be wrong: "`name` must lie in (0, 1) (what); found …"."""
    try:
        v = float_param(name, value)
    except ParameterError:
        v, found = math.nan, _describe(value)
    else:
        found = repr(v)
    if not 0.0 < v < 1.0:
        raise ParameterError(f"`{name}` must lie in (0, 1){f' ({what})' if what else ''}; found {found}")
    return v


def not_one_of(name: str, value, options, *, alternative: str = "") -> ParameterError:
    """The one refusal of a value outside a fixed set of choices, in one wording for every argument:
    "`name` must be one of 'a', 'b'[ or alternative]; found value" (``raise not_one_of(...)``)."""
    listed = ", ".join(map(repr, options))
    more = f" or {alternative}" if alternative else ""
    return ParameterError(f"`{name}` must be one of {listed}{more}; found {value!r}")


def one_of(name: str, value, options):
    """``value`` when it is one of ``options`` (a method, a rule, a readout, …); else :func:`not_one_of`'s error.

    An array, whose ``==`` is elementwise, is never one of them."""
    try:
        ok = bool(value in options)
    except (TypeError, ValueError, RuntimeError):  # numpy and torch refuse bool() of an elementwise ==
        ok = False
    if not ok:
        raise not_one_of(name, value, options)
    return value


def eps_value(value, name: str = "eps") -> float:
    """The initial scale ``ε``: a finite real in ``(0, 1)`` (``M(0) = εI``, a mode's start ``ε``, or ``ε z*``).

    The one check of ``eps`` in nqf (:func:`unit_fraction`); a scale ``≥ 1`` is not small and has no plateau, so it
    is refused everywhere rather than giving a time ``≤ 0``."""
    return unit_fraction(name, value, "the initial scale ε")


def seed_value(value, name: str = "seed") -> int:
    """A random seed: an ``int`` in ``[0, 2**32)`` (what NumPy accepts); bools refused."""
    return int_param(name, value, minimum=0, maximum=2**32 - 1)


_STEP_CAP: contextvars.ContextVar[int | None] = contextvars.ContextVar("nqf_step_cap", default=None)


@contextlib.contextmanager
def step_cap(max_steps: int | None) -> Iterator[None]:
    """Within the block, :func:`steps_value` refuses more than ``max_steps`` steps (``None``: no cap, the default
    of the Python API); :func:`nqf.app.run_experiment` sets it around an experiment."""
    token = _STEP_CAP.set(None if max_steps is None else int(max_steps))
    try:
        yield
    finally:
        _STEP_CAP.reset(token)


def steps_value(value, name: str = "steps") -> int:
    """A number of steps: an ``int`` ≥ 0 (``inf``, ``None``, floats and bools refused), at most the cap of
    :func:`step_cap` when one is set."""
    if isinstance(value, float) and value.is_integer() and not isinstance(value, bool):
        raise ParameterError(f"`{name}` must be an integer (write {int(value)}, not {value!r})")
    steps = int_param(name, value, minimum=0)
    cap = _STEP_CAP.get()
    if cap is not None and steps > cap:
        raise ParameterError(
            f"`{name}`: the run asks for {steps} GD steps, more than max_steps={cap} (--max-steps) allows; change "
            "the parameters that set its length (lr, t_max, horizon, ε) or raise --max-steps"
        )
    return steps


def divergence_threshold_value(value) -> float:
    """The ``divergence_threshold`` of a run: a real number > 1 (``inf`` allowed: never stop; NaN refused)."""
    thr = float_param("divergence_threshold", value, allow_inf=True)
    if not thr > 1:
        raise ParameterError(f"`divergence_threshold` must be > 1; found {thr!r}")
    return thr


def check_flow_scalars(t_span, rtol, atol, weight_decay, max_step):
    """Settings of an ODE integration, validated up front (a NaN or infinite one would make the solver hang).

    Returns ``(t0, t1, rtol, atol, weight_decay, max_step)``.
    """
    try:
        t0, t1 = t_span
    except (TypeError, ValueError):
        raise ParameterError(f"`t_span` must be a pair (t0, t1); found {t_span!r}") from None
    t0 = float_param("t_span[0]", t0)
    t1 = float_param("t_span[1]", t1)
    if not t1 > t0:
        raise ParameterError(f"`t_span` must have t1 > t0; found {t_span!r}")
    rtol = positive_float("rtol", rtol)
    atol = positive_float("atol", atol)
    weight_decay = float_param("weight_decay", weight_decay, nonnegative=True)
    max_step = float_param("max_step", max_step, positive=True, allow_inf=True)
    return t0, t1, rtol, atol, weight_decay, max_step


def check_inputs(name: str, X, *, device=None) -> torch.Tensor:
    """Network inputs: a tensor (or array) with a sample axis of at least one sample; floats must be finite.

    Integer inputs (token indices) keep their dtype; the result is detached from any autograd graph.
    """
    if isinstance(X, torch.Tensor):
        t = X.detach()
    else:
        try:
            t = torch.as_tensor(np.asarray(X))
        except (TypeError, ValueError, RuntimeError) as exc:
            raise ParameterError(
                f"`{name}` must be a tensor or array of numbers; found {type(X).__name__} ({exc})"
            ) from None
    if t.is_complex() or t.dtype == torch.bool:
        raise ParameterError(f"`{name}` must hold real numbers; found dtype {t.dtype}")
    if t.ndim < 1 or t.shape[0] < 1:
        raise ShapeError(f"`{name}` must have a sample axis with at least one sample; found shape {tuple(t.shape)}")
    if t.is_floating_point() and t.numel() and not all_finite(t):
        bad = int((~torch.isfinite(t)).sum())
        raise NonFiniteError(f"`{name}` must be finite; found {bad} NaN/inf entries out of {t.numel()}")
    if device is not None:
        t = t.to(device)
    return t


# --------------------------------------------------------------------------- divergence
def divergence_message(
    *,
    step: int,
    t: float,
    loss: float,
    limit: float,
    lr: float,
    saved: int,
    curvature: float | None = None,
    momentum: float = 0.0,
    optimizer: str = "gd",
) -> str:
    """The message of a run stopped by divergence: step, loss and a learning rate that would be stable.

    ``curvature`` is an estimate of the largest eigenvalue of the Hessian in weight space (e.g. the spectral
    norm of ``S = 2G + λI`` at the last finite state); gradient descent with heavy-ball momentum β is
    stable for ``η · curvature < 2 (1 + β)``.
    """
    msg = (
        f"diverged at step {step} (t = {t:g}): loss {loss:.4g} is not finite or exceeds "
        f"`divergence_threshold` × L(0) = {limit:.4g}; the {saved} states saved before it are kept. "
    )
    if optimizer == "adam":
        return msg + f"`lr` = {lr:g} is too large for Adam here (no curvature estimate for Adam); try {lr / 10:g}."
    if curvature is not None and math.isfinite(curvature) and curvature > 0:
        stable = 2.0 * (1.0 + momentum) / curvature
        suggest = 0.5 * stable
        return msg + (
            f"Lower `lr` (η = {lr:g}): the curvature estimate {curvature:.4g} at the last finite state "
            f"makes η < {stable:.4g} stable; try lr = {suggest:.3g}."
        )
    return msg + (
        f"Lower `lr` (η = {lr:g}); no curvature estimate is available here, so try lr = {lr / 10:g} "
        f"(GD on MSE is stable while η·‖2G‖ stays below 2)."
    )


def divergence_curvature(
    op, L: torch.Tensor, r: torch.Tensor, weight_decay: float, n_samples: int, *, loss: str = "mse", iters: int = 40
) -> float | None:
    """Largest eigenvalue of the loss Hessian in unit space at the factor ``L`` (``M = L Lᵀ``), for full-batch
    MSE with the zero-gradient condition (else ``None``); ``r`` is the residual at ``L``.

    Hessian-vector products are exact, ``H(D) = S D + (2/N) 𝒜*(𝒜(L Dᵀ + D Lᵀ)) L`` with ``S = 2G + λI``;
    the top eigenvalue is found by power iteration (shifted when the largest in magnitude is negative) and
    combined with ``λ_max(S)`` (the directions of a wider ``W`` outside the span of ``L``).  GD with step η
    (heavy-ball β) is stable near ``L`` when ``η · curvature < 2 (1 + β)``.
    """
    try:
        if loss != "mse" or getattr(op, "linear", None) is not None or getattr(op, "cross", None) is not None:
            return None
        if L is None or r is None or not bool(torch.isfinite(L).all()) or not bool(torch.isfinite(r).all()):
            return None
        with torch.no_grad():
            N = float(n_samples)
            G = op.adjoint_unchecked(r) / N
            S = 2.0 * G + weight_decay * torch.eye(G.shape[0], dtype=G.dtype, device=G.device)
            top_S = float(torch.linalg.eigvalsh(0.5 * (S + S.T)).max())

            def hvp(D):
                dr = op.forward_unchecked(L @ D.T + D @ L.T)
                return S @ D + (2.0 / N) * (op.adjoint_unchecked(dr) @ L)

            def power(shift: float) -> float:
                gen = torch.Generator(device="cpu").manual_seed(0)
                D = torch.randn(L.shape, generator=gen, dtype=L.dtype).to(L.device)
                D = D / D.norm()
                lam = 0.0
                for _ in range(iters):
                    HD = hvp(D) - shift * D
                    lam = float((D * HD).sum())
                    n = float(HD.norm())
                    if not math.isfinite(n) or n == 0.0:
                        break
                    D = HD / n
                return lam + shift

            if L.numel() == 0:
                return top_S if top_S > 0 else None
            lam1 = power(0.0)
            top = lam1 if lam1 > 0 else power(lam1)
            best = max(top, top_S)
            return best if math.isfinite(best) and best > 0 else None
    except (RuntimeError, ValueError, TypeError, AttributeError, ArithmeticError):  # an estimate for a message only
        return None
