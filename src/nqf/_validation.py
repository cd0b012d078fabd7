"""Input validation shared by all modules: conversion to tensors with clear errors."""

from __future__ import annotations

import numbers
from typing import Sequence

import numpy as np
import torch

from .errors import NonFiniteError, ShapeError

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
    """
    if isinstance(value, torch.Tensor):
        t = value
    else:
        try:
            t = torch.as_tensor(np.asarray(value))
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"`{name}` must be an array or tensor of numbers; found {type(value).__name__} ({exc})"
            ) from exc
    if t.dtype == torch.bool or t.is_complex():
        raise TypeError(f"`{name}` must be a real floating array; found dtype {t.dtype}")
    if dtype is None:
        dtype = t.dtype if t.is_floating_point() else DEFAULT_DTYPE
    t = t.to(dtype=dtype, device=device if device is not None else t.device)
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if t.ndim not in allowed:
            exp = " or ".join(str(a) for a in allowed)
            raise ShapeError(
                f"`{name}` must have {exp} dimensions; found shape {tuple(t.shape)} ({t.ndim} dimensions)"
            )
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
    return all(bool(torch.isfinite(flat[i:i + step]).all()) for i in range(0, flat.numel(), step))


def positive_int(name: str, value) -> int:
    """``value`` as an ``int`` ≥ 1; a bool, a non-integer or a value below 1 raises ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < 1:
        raise ValueError(f"`{name}` must be a positive integer; found {value!r}")
    return int(value)


def check_shape(name: str, t: torch.Tensor, shape: Sequence[int | None]) -> None:
    """Raise :class:`ShapeError` unless ``t.shape`` matches ``shape`` (``None`` = any size)."""
    ok = t.ndim == len(shape) and all(s is None or s == d for s, d in zip(shape, t.shape))
    if not ok:
        exp = "(" + ", ".join("any" if s is None else str(s) for s in shape) + ")"
        raise ShapeError(f"`{name}` must have shape {exp}; found {tuple(t.shape)}")


def tolerance(dtype: torch.dtype, factor: float = 1e3) -> float:
    """Relative tolerance for a check dominated by round-off in ``dtype``."""
    return factor * EPS.get(dtype, EPS[torch.float32])
