"""Unit layout of a user model made of a convolution followed by a readout.

For :func:`nqf.modules.from_module` on a model such as::

    nn.Sequential(nn.Conv1d(3, m, 5, bias=False), nn.Tanh(), nn.Flatten(), nn.Linear(m * Q, C, bias=False))
    nn.Sequential(nn.Conv2d(3, m, 3, bias=False), nn.Tanh(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                  nn.Linear(m, C, bias=False))

each output channel of the convolution is one unit:
``w_ch = (readout block of ch (flattened), conv.weight[ch] (flattened) [, conv.bias[ch]])``.
With a per-position readout applied to the channel-major flattening of the
convolution output (``nn.Flatten`` of ``(B, m, Q)``, or ``(B, m, H_out,
W_out)``), the block of channel ``ch`` is ``weight[:, ch·Q:(ch+1)·Q]``,
flattened output-major (index ``c·Q + q``) — the layout of
:func:`nqf.structure.conv1d` / :func:`~nqf.structure.conv2d` with
``readout="position"``; with a mean-pooled readout it is ``weight[:, ch]``
(``readout="mean"``).
"""

from __future__ import annotations

from torch import nn

from ..errors import InvalidTypeError, NormalFormError, ShapeError, UnknownNameError
from ._units import UnitLayout, UnitSlice

__all__ = ["conv_units"]


def conv_units(module: nn.Module, conv: str, readout: str, *, channel_axis: int = 1) -> UnitLayout:
    """Channels of a convolution followed by a readout, as a :class:`UnitLayout`.

    Parameters
    ----------
    module : nn.Module
        The model (the names below are relative to it).
    conv : str
        Name of the ``nn.Conv1d`` / ``nn.Conv2d`` submodule (e.g. ``"0"`` in a
        Sequential, ``"conv"``).  Its bias, when present, becomes part of
        each unit (after the filter).
    readout : str
        Name of the readout: an ``nn.Linear`` submodule (its ``weight`` is
        used, shape ``(C, m·Q)`` or ``(C, m)``) or a parameter (e.g.
        ``"readout"`` of shape ``(C, m, Q)`` or ``(C, m)``).  A readout bias
        is not part of any unit (held fixed).
    channel_axis : int
        Axis of the readout weight along which the channels are laid out
        (1 for ``nn.Linear.weight`` and for the ``(C, m, …)`` parameters of
        :class:`nqf.networks.ConvNet1d`).  Its length must be ``m·Q`` for
        some integer ``Q ≥ 1`` (channel-major blocks of ``Q`` positions).

    Returns
    -------
    UnitLayout
        ``n_units = m = conv.out_channels``.

    Raises
    ------
    UnknownNameError (a KeyError)
        ``conv`` or ``readout`` is not in ``module``.
    TypeError
        ``conv`` is not an ``nn.Conv1d``/``nn.Conv2d``.
    ShapeError
        The readout axis length is not a multiple of the number of channels.
    NormalFormError
        A grouped convolution (``groups > 1``): its channels see different
        inputs, so they are not interchangeable units.
    """
    modules = dict(module.named_modules())
    params = dict(module.named_parameters())
    if conv not in modules:
        raise UnknownNameError(
            f"`conv` names submodule {conv!r}, which the module does not have; its submodules are "
            f"{sorted(k for k in modules if k)}"
        )
    layer = modules[conv]
    if not isinstance(layer, (nn.Conv1d, nn.Conv2d)):
        raise InvalidTypeError(f"`conv` must name an nn.Conv1d or nn.Conv2d; {conv!r} is {type(layer).__name__}")
    if layer.groups != 1:
        raise NormalFormError(
            f"`conv` {conv!r} has groups = {layer.groups}: channels of different groups see "
            "different input channels, so they are not interchangeable units"
        )
    if readout in modules and isinstance(modules[readout], nn.Linear):
        rname = f"{readout}.weight"
    elif readout in params:
        rname = readout
    else:
        raise UnknownNameError(
            f"`readout` names {readout!r}, which is neither an nn.Linear submodule nor a "
            f"parameter of the module; its parameters are {sorted(params)}"
        )
    weight = params[rname]
    m = layer.out_channels
    if not -weight.ndim <= channel_axis < weight.ndim:
        raise ShapeError(
            f"`channel_axis` {channel_axis} is out of range for readout `{rname}` of shape {tuple(weight.shape)}"
        )
    length = weight.shape[channel_axis]
    if length % m:
        raise ShapeError(
            f"readout `{rname}` has {length} entries along axis {channel_axis}, not a multiple of the "
            f"{m} channels of `{conv}`; expected m·Q (per-position readout of the flattened "
            "channel-major output) or m (mean-pooled readout)"
        )
    prefix = f"{conv}." if conv else ""
    slices = [UnitSlice(rname, axis=channel_axis, size=length // m), UnitSlice(f"{prefix}weight", axis=0)]
    if layer.bias is not None:
        slices.append(UnitSlice(f"{prefix}bias", axis=0))
    return UnitLayout(slices, n_units=m)
