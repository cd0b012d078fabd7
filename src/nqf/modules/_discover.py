r"""Find the layers of interchangeable units in a PyTorch module.

:func:`find_units` walks a module and returns one :class:`UnitCandidate` per
layer whose units the normal form can treat (docs/theory.md, section 1): a
set of ``m`` parameter blocks ``w_1 … w_m`` such that permuting them leaves the
module's function unchanged.  It recognises, by structure (no forward pass):

* ``"mlp-hidden"``: hidden neurons between two ``nn.Linear`` layers joined by
  elementwise activations (``nn.Tanh``, ``nn.GELU``, …, or a user's leaf module
  without parameters or buffers, e.g. a ``Sin`` module, taken as elementwise;
  ``nn.Dropout`` and ``nn.Identity`` may sit in between; with no activation at
  all, the hidden units of a linear network) inside an ``nn.Sequential`` at any depth.
  Unit ``i`` = (column ``i`` of the second weight, row ``i`` of the first
  [, its bias ``i``]), the layout of :func:`~nqf.modules.mlp_units`.
* ``"attention-heads"``: the heads of every ``nn.MultiheadAttention``,
  including the self-attention of ``nn.TransformerEncoderLayer`` /
  ``nn.TransformerDecoderLayer`` (layout :func:`~nqf.modules.attention_units`).
  In a transformer layer only the heads are units: the residual stream, layer
  norms and feed-forward block are part of the fixed map that reads the heads
  out (their own hidden neurons are not offered, they are not in a Sequential).
* ``"conv-channels"``: output channels of an ``nn.Conv1d``/``nn.Conv2d``
  (``groups = 1``) followed, in an ``nn.Sequential``, by an elementwise
  activation, optional average pooling / ``nn.Flatten``, and a convolution or
  ``nn.Linear`` that reads the channels (layout :func:`~nqf.modules.conv_units`).
* the modules of :mod:`nqf.networks` and any module with a ``units`` attribute
  holding a :class:`UnitLayout`; its kind is the module class's ``unit_kind``
  attribute (the networks declare ``"experts"`` for a mixture of experts,
  ``"mlp-hidden"``, ``"attention-heads"``, ``"conv-channels"``,
  ``"factor-columns"``), ``"custom"`` for a class without one.

A candidate through a non-smooth activation (ReLU, max pooling, …) is still
reported, flagged ``smooth=False``: :func:`~nqf.modules.from_module` refuses
it with a message naming smooth replacements.  Finding a layer is structural;
:func:`~nqf.modules.from_module` then *checks* the symmetry numerically.

:func:`select_units` picks one candidate (the only one, or the one named by
the CLI's ``--units LAYER_NAME``) and raises :class:`~nqf.errors.NoUnitsError`
otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from ..errors import InvalidTypeError, NoUnitsError
from ..structure import ActivationModule, module_classes, module_label, smooth_alternatives_text
from ._attention_layouts import attention_units
from ._autodiff import is_non_smooth_layer
from ._conv_layouts import conv_units
from ._units import UnitLayout, UnitSlice

__all__ = ["UnitCandidate", "find_units", "select_units", "ELEMENTWISE_MODULES"]

#: Elementwise activations accepted between two layers: the ``torch.nn`` classes of every activation of
#: :data:`~nqf.structure.REGISTRY` (smooth and non-smooth; the latter are flagged) and its
#: :class:`~nqf.structure.ActivationModule` (``sin``, ``erf``, …).
ELEMENTWISE_MODULES: tuple[type[nn.Module], ...] = module_classes() + (ActivationModule,)
_PASS = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.AlphaDropout, nn.Identity)
_POOL = (
    nn.AvgPool1d,
    nn.AvgPool2d,
    nn.AdaptiveAvgPool1d,
    nn.AdaptiveAvgPool2d,
    nn.Flatten,
    nn.MaxPool1d,
    nn.MaxPool2d,
    nn.AdaptiveMaxPool1d,
    nn.AdaptiveMaxPool2d,
)
#: Parameter-free layers that do not act feature by feature (never taken for an activation).
_NOT_FEATUREWISE = _POOL + (
    nn.Softmax,
    nn.LogSoftmax,
    nn.Softmin,
    nn.Softmax2d,
    nn.Unflatten,
    nn.Upsample,
    nn.PixelShuffle,
    nn.PixelUnshuffle,
    nn.ChannelShuffle,
    nn.Fold,
    nn.Unfold,
    nn.ZeroPad2d,
    nn.ConstantPad1d,
    nn.ConstantPad2d,
    nn.ReflectionPad1d,
    nn.ReplicationPad1d,
    nn.AvgPool3d,
    nn.MaxPool3d,
    nn.LPPool1d,
    nn.LPPool2d,
)


def _custom_activation(mod: nn.Module) -> bool:
    """A leaf module with no parameters or buffers, not a known shape/mixing layer: taken as elementwise.

    (E.g. a user's ``Sin`` module.)  Safe to assume: :func:`~nqf.modules.from_module` checks the
    permutation symmetry and the smoothness of the result numerically.
    """
    return (
        not isinstance(mod, _NOT_FEATUREWISE)
        and next(mod.parameters(), None) is None
        and next(mod.buffers(), None) is None
        and next(mod.children(), None) is None
    )


_LOOKED_FOR = (
    "hidden neurons between two nn.Linear joined by an elementwise activation in an nn.Sequential; "
    "heads of nn.MultiheadAttention / nn.TransformerEncoderLayer; channels of an nn.Conv1d/Conv2d "
    "followed by an elementwise activation and a conv/linear readout in an nn.Sequential; modules "
    "with a `.units` layout (nqf.networks: MLP, attention, conv, mixture of experts)"
)


@dataclass(frozen=True)
class UnitCandidate:
    """One layer of interchangeable units found in a module.

    Attributes
    ----------
    names : tuple of str
        Names of the layer(s) in ``module.named_modules()`` (e.g. ``("0", "2")``
        for the two Linear layers around the hidden neurons, or
        ``("layers.0", "layers.0.self_attn")``); any of them selects it in
        :func:`select_units`.  ``""`` is the module itself.
    kind : str
        ``"mlp-hidden"``, ``"attention-heads"``, ``"conv-channels"``,
        ``"experts"``, ``"factor-columns"`` or ``"custom"``.
    n_units : int
        Number of units ``m``.
    p : int
        Unit dimension.
    layout : UnitLayout
        Pass to :func:`~nqf.modules.from_module`, :func:`~nqf.modules.get_unit_weights`, …
    description : str
        One line for people.
    smooth : bool
        False when a known non-smooth layer (ReLU, max pooling) sits on the
        units' path: the normal form does not apply.
    """

    names: tuple[str, ...]
    kind: str
    n_units: int
    p: int
    layout: UnitLayout
    description: str
    smooth: bool = True

    @property
    def name(self) -> str:
        """The main layer name (``"(module)"`` for the module itself)."""
        return self.names[0] or "(module)"

    def to_dict(self) -> dict:
        return dict(
            names=list(self.names),
            kind=self.kind,
            n_units=self.n_units,
            p=self.p,
            smooth=self.smooth,
            description=self.description,
            layout=[dict(param=s.param, axis=s.axis, size=s.size, offset=s.offset) for s in self.layout.slices],
        )

    def __repr__(self) -> str:
        flag = "" if self.smooth else ", NON-SMOOTH"
        return f"UnitCandidate({self.name!r}, {self.kind}, m={self.n_units}, p={self.p}{flag})"


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _prefixed(layout: UnitLayout, prefix: str) -> UnitLayout:
    if not prefix:
        return layout
    return UnitLayout(
        [UnitSlice(f"{prefix}.{s.param}", s.axis, s.size, s.offset) for s in layout.slices], layout.n_units
    )


def _act_names(mods) -> str:
    if not [a for a in mods if not isinstance(a, _PASS + _POOL)]:
        return " → ".join([type(a).__name__ for a in mods] + ["no activation (linear)"])
    return " → ".join(
        type(a).__name__
        if isinstance(a, ELEMENTWISE_MODULES + _PASS + _POOL)
        else f"{type(a).__name__} (taken as elementwise)"
        for a in mods
    )


def _smooth_note(between) -> tuple[bool, str]:
    bad = [module_label(a) for a in between if is_non_smooth_layer(a)]
    if not bad:
        return True, ""
    return False, f" — NON-SMOOTH ({', '.join(bad)}): the normal form does not apply; use {smooth_alternatives_text()}"


def _sequential(root: nn.Module, prefix: str, seq: nn.Sequential, out: list) -> None:
    children = list(seq.named_children())
    for i, (n1, first) in enumerate(children):
        if not isinstance(first, (nn.Linear, nn.Conv1d, nn.Conv2d)):
            continue
        between, j = [], i + 1
        conv = not isinstance(first, nn.Linear)
        allowed = ELEMENTWISE_MODULES + _PASS + (_POOL if conv else ())
        while j < len(children) and (isinstance(children[j][1], allowed) or _custom_activation(children[j][1])):
            between.append(children[j][1])
            j += 1
        acts = [a for a in between if not isinstance(a, _PASS + _POOL)]
        if j >= len(children) or (conv and not acts):
            continue
        n2, second = children[j]
        name1, name2 = _join(prefix, n1), _join(prefix, n2)
        smooth, note = _smooth_note(between)
        if isinstance(first, nn.Linear) and isinstance(second, nn.Linear):
            m = first.out_features
            if second.in_features != m:
                continue
            slices = [UnitSlice(f"{name2}.weight", axis=1), UnitSlice(f"{name1}.weight", axis=0)]
            if first.bias is not None:
                slices.append(UnitSlice(f"{name1}.bias", axis=0))
            p = second.out_features + first.in_features + (first.bias is not None)
            desc = (
                f"{m} hidden neurons between `{name1}` (Linear {first.in_features}→{m}) and `{name2}` (Linear "
                f"{m}→{second.out_features}) through {_act_names(between)}; unit = (readout column, input row"
                f"{', bias' if first.bias is not None else ''}), p = {p}{note}"
            )
            out.append(UnitCandidate((name1, name2), "mlp-hidden", m, p, UnitLayout(slices, m), desc, smooth))
        elif isinstance(first, (nn.Conv1d, nn.Conv2d)) and isinstance(second, (nn.Linear, nn.Conv1d, nn.Conv2d)):
            if first.groups != 1:
                continue
            readout = name2 if isinstance(second, nn.Linear) else f"{name2}.weight"
            try:
                layout = conv_units(root, name1, readout, channel_axis=1)
            except (ValueError, KeyError, TypeError):
                continue
            if isinstance(second, (nn.Conv1d, nn.Conv2d)) and second.groups != 1:
                continue
            params = dict(root.named_parameters())
            p = layout.p(params)
            smooth, note = _smooth_note(between)
            desc = (
                f"{first.out_channels} channels of `{name1}` ({type(first).__name__} {first.in_channels}→"
                f"{first.out_channels}, kernel {tuple(first.kernel_size)}) read by `{name2}` through "
                f"{_act_names(between)}; unit = (readout block, filter{', bias' if first.bias is not None else ''}"
                f"), p = {p}{note}"
            )
            out.append(UnitCandidate((name1, name2), "conv-channels", first.out_channels, p, layout, desc, smooth))


def _unit_kind(sub: nn.Module) -> str:
    """The kind a module with its own ``units`` declares as the class attribute ``unit_kind`` (``"custom"`` without)."""
    kind = getattr(type(sub), "unit_kind", None)
    return kind if isinstance(kind, str) and kind else "custom"


def _own_units(sub: nn.Module):
    try:
        lay = getattr(sub, "units", None)
    except Exception:  # a property that fails on this instance
        return None
    return lay if isinstance(lay, UnitLayout) else None


def find_units(module: nn.Module) -> list[UnitCandidate]:
    """All layers of interchangeable units in ``module`` (see the module docstring), in module order.

    Parameters
    ----------
    module : torch.nn.Module

    Returns
    -------
    list of UnitCandidate
        Possibly empty.  Non-smooth candidates are included (``smooth=False``).

    Raises
    ------
    TypeError
        ``module`` is not an ``nn.Module``.
    """
    if not isinstance(module, nn.Module):
        raise InvalidTypeError(f"`module` must be a torch.nn.Module; found {type(module).__name__}")
    params = dict(module.named_parameters())
    found: list[UnitCandidate] = []
    skip: list[str] = []
    transformer_layers = (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)
    for name, sub in module.named_modules():
        if any(name.startswith(s + ".") for s in skip):
            continue
        own = _own_units(sub)
        if own is not None:
            skip.append(name)
            layout = _prefixed(own, name).resolve(params)
            kind = _unit_kind(sub)
            p = layout.p(params)
            desc = (
                f"{layout.m} units ({kind}) of `{name or '(module)'}` ({type(sub).__name__}.units: "
                f"{', '.join(s.param for s in layout.slices)}), p = {p}"
            )
            found.append(UnitCandidate((name,), kind, layout.m, p, layout, desc, True))
            if name == "":
                return found
            continue
        if isinstance(sub, nn.Sequential):
            _sequential(module, name, sub, found)
        elif isinstance(sub, nn.MultiheadAttention):
            layout = attention_units(sub, f"{name}." if name else "")
            p = layout.p(params)
            parent_name = name.rpartition(".")[0] if "." in name else ""
            parent = module.get_submodule(parent_name) if name else None
            in_layer = parent is not None and isinstance(parent, transformer_layers) and parent is not sub
            names = ((parent_name, name) if parent_name else (name, "")) if in_layer else (name,)
            where = (
                (
                    f" in {type(parent).__name__} `{parent_name or '(module)'}` (residual, layer norms and "
                    "feed-forward are part of the fixed readout)"
                )
                if in_layer
                else ""
            )
            desc = (
                f"{sub.num_heads} heads of `{name or 'MultiheadAttention'}` (MultiheadAttention, embed "
                f"{sub.embed_dim}, head dim {sub.head_dim}){where}; unit = (W_O, W_V, [b_V], W_Q, W_K, "
                f"[b_Q, b_K]) of one head, p = {p}"
            )
            found.append(UnitCandidate(names, "attention-heads", sub.num_heads, p, layout, desc, True))
    return found


def select_units(module: nn.Module, name: str | None = None) -> UnitCandidate:
    """The layer of units to analyse: the only candidate, or the one named ``name``.

    Parameters
    ----------
    module : torch.nn.Module
    name : str, optional
        A layer name as listed by :func:`find_units` (any of a candidate's
        ``names``; the CLI's ``--units LAYER_NAME``).

    Returns
    -------
    UnitCandidate
        Possibly flagged non-smooth (``from_module`` then refuses it).

    Raises
    ------
    NoUnitsError
        No candidate; ``name`` matches none; or several candidates and no ``name``.
    """
    found = find_units(module)
    listing = "; ".join(f"`{c.name}` ({c.kind}, {c.n_units} units)" for c in found)
    if not found:
        raise NoUnitsError(
            f"no interchangeable units found in {type(module).__name__}: looked for {_LOOKED_FOR}. "
            "Pass an explicit nqf.modules.UnitLayout instead."
        )
    if name is not None:
        match = [c for c in found if name in c.names or (name == "(module)" and "" in c.names)]
        if len(match) == 1:
            return match[0]
        if not match:
            raise NoUnitsError(f"`units` names layer {name!r}, which holds no interchangeable units; found: {listing}")
        raise NoUnitsError(f"`units` {name!r} matches {len(match)} layers of units; choose one of: {listing}")
    if len(found) > 1:
        raise NoUnitsError(
            f"{len(found)} layers of interchangeable units found: {listing}; choose one by name "
            "(`name` here, --units LAYER_NAME on the command line)"
        )
    return found[0]
