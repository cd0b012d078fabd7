"""Unit layouts of common PyTorch modules, for :func:`nqf.modules.from_module`."""

from __future__ import annotations

from torch import nn

from ..errors import InvalidParameterError, ShapeError
from ._units import UnitLayout, UnitSlice

__all__ = ["mlp_units"]


def mlp_units(module: nn.Sequential, prefix: str = "") -> UnitLayout:
    """Hidden neurons of ``nn.Sequential(nn.Linear(D, m), act, nn.Linear(m, C))``.

    Unit ``i`` is ``(readout column i, input row i [, input bias i])``, the
    layout of :func:`nqf.structure.mlp`.  A readout bias is not part of any
    unit (it is held fixed).

    Parameters
    ----------
    module : nn.Sequential
        Must contain exactly two ``nn.Linear`` layers.
    prefix : str
        Name prefix when the Sequential is a submodule (e.g. ``"body."``).
    """
    linears = [(name, sub) for name, sub in module.named_children() if isinstance(sub, nn.Linear)]
    if len(linears) != 2:
        raise InvalidParameterError(
            f"`module` must be a Sequential with exactly two nn.Linear layers; found {len(linears)}"
        )
    (n_in, lin_in), (n_out, lin_out) = linears
    if lin_in.out_features != lin_out.in_features:
        raise ShapeError(
            f"hidden sizes disagree: first Linear has {lin_in.out_features} outputs, second "
            f"{lin_out.in_features} inputs"
        )
    slices = [UnitSlice(f"{prefix}{n_out}.weight", axis=1), UnitSlice(f"{prefix}{n_in}.weight", axis=0)]
    if lin_in.bias is not None:
        slices.append(UnitSlice(f"{prefix}{n_in}.bias", axis=0))
    return UnitLayout(slices, n_units=lin_in.out_features)
