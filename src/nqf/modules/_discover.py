r"""Find the layers of interchangeable units in a PyTorch module.

:func:`find_units` walks a module and returns one :class:`UnitCandidate` per
layer whose units the normal form can treat (docs/theory.md, section 1): a
set of ``m`` parameter blocks ``w_1 … w_m`` such that permuting them leaves the
module's function unchanged.  It recognises, without running the module:

* ``"mlp-hidden"``: hidden neurons between two ``nn.Linear`` layers joined by
  elementwise activations (``nn.Tanh``, ``nn.GELU``, …, their functions in the
  forward such as ``torch.tanh`` / ``F.gelu`` / ``x.tanh()``, or a user's leaf module
  without parameters or buffers, e.g. a ``Sin`` module, taken as elementwise;
  dropout and ``nn.Identity`` may sit in between; with no activation at all, the
  hidden units of a linear network) anywhere in the module tree: in an
  ``nn.Sequential`` or in any module's ``forward``.
  Unit ``i`` = (column ``i`` of the second weight, row ``i`` of the first
  [, its bias ``i``]), the layout of :func:`~nqf.modules.mlp_units`.
* ``"attention-heads"``: the heads of every ``nn.MultiheadAttention``,
  including the self-attention of ``nn.TransformerEncoderLayer`` /
  ``nn.TransformerDecoderLayer`` (layout :func:`~nqf.modules.attention_units`).
  In a transformer layer only the heads are units: the residual stream, layer
  norms and feed-forward block are part of the fixed map that reads the heads
  out (their own hidden neurons are not offered: ``torch.nn`` layers are not searched inside).
* ``"conv-channels"``: output channels of an ``nn.Conv1d``/``nn.Conv2d``
  (``groups = 1``) followed by an elementwise activation, optional pooling /
  flatten (``nn.Flatten``, ``torch.flatten``, ``x.view(x.size(0), -1)``, …), and a
  convolution or ``nn.Linear`` that reads the channels (layout
  :func:`~nqf.modules.conv_units`).
* ``"experts"``: parallel experts combined by a gate, ``Σ_e g_e(x) expert_e(x)`` with the experts in an
  ``nn.ModuleList`` / ``nn.ModuleDict`` of identical children and a gate ``nn.Linear(D, E)``
  (:mod:`nqf.modules._experts`); unit ``e`` = (all parameters of expert ``e``, gate row ``e``), laid out on
  an equivalent copy whose experts' parameters are stacked (:meth:`UnitCandidate.prepare`).
* the modules of :mod:`nqf.networks` and any module with a ``units`` attribute
  holding a :class:`UnitLayout`; its kind is the module class's ``unit_kind``
  attribute (the networks declare ``"experts"`` for a mixture of experts,
  ``"mlp-hidden"``, ``"attention-heads"``, ``"conv-channels"``,
  ``"factor-columns"``), ``"custom"`` for a class without one.

The order of the two layers is the order of the dataflow (:mod:`nqf.modules._trace`):
the forward is traced with ``torch.fx`` and the output of the first layer must
reach the second through the allowed steps alone, with nothing else reading the
values in between (a hidden activation that is also added to the output is not
offered).  Between the layers the forward may also average or sum over other axes than the units',
transpose, select along other axes and flatten (:mod:`nqf.modules._axes`), and a batch norm that in eval
mode is one fixed scale with zero shift is folded.  Where the forward cannot be traced (control flow on the input), the
direct children are read in registration order, as in a Sequential; such a
candidate has ``order_verified=False`` and says so in its description.

A candidate through a non-smooth activation (ReLU, max pooling, …) is still
reported, flagged ``smooth=False``: :func:`~nqf.modules.from_module` refuses
it with a message naming smooth replacements.  Finding a layer is structural;
:func:`~nqf.modules.from_module` then *checks* the symmetry numerically.

:func:`select_units` picks one candidate (the only one, or the one named by
the CLI's ``--units LAYER_NAME``, or the one whose layers contain every other's: experts before
the hidden neurons inside each expert) and raises :class:`~nqf.errors.NoUnitsError` otherwise,
naming, when nothing is found, every layer that blocks and why (:func:`~nqf.modules.refused_units`).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from ..errors import InvalidTypeError, NoUnitsError
from ..structure import REGISTRY, ActivationModule
from ._attention_layouts import attention_units
from ._autodiff import is_non_smooth_layer
from ._compat import check_attention_torch
from ._conv_layouts import conv_units
from ._experts import find_experts, stack_experts
from ._refusals import unit_refusals
from ._steps import Step, uniform_batchnorm_scale
from ._trace import Chain, layer_chains, trace_graph
from ._units import UnitLayout, UnitSlice

__all__ = ["UnitCandidate", "find_units", "select_units", "ELEMENTWISE_MODULES", "refused_units"]

#: Elementwise activations accepted between two layers: the ``torch.nn`` classes of every activation of the
#: registry (smooth and non-smooth; the latter flagged) and its ``ActivationModule`` (``sin``, ``erf``, …).
ELEMENTWISE_MODULES: tuple[type[nn.Module], ...] = REGISTRY.module_classes() + (ActivationModule,)


_LOOKED_FOR = (
    "hidden neurons between two nn.Linear joined by an elementwise activation (in the traced forward, or in "
    "registration order where it cannot be traced; means over other axes, transposes and flattening allowed); "
    "heads of nn.MultiheadAttention / nn.TransformerEncoderLayer; channels of an nn.Conv1d/Conv2d followed by an "
    "elementwise activation and a conv/linear readout; experts in an nn.ModuleList combined by a Linear gate; "
    "modules with a `.units` layout (nqf.networks: MLP, attention, conv, mixture of experts)"
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
        Pass to :func:`~nqf.modules.from_module`, :meth:`~nqf.modules.UnitLayout.get_W`, …
    description : str
        One line for people.
    smooth : bool
        False when a known non-smooth layer (ReLU, max pooling) sits on the
        units' path: the normal form does not apply.
    activation : str or None
        Registry name (:data:`~nqf.structure.REGISTRY`) of the activation
        between the two layers when it is the only step there (a module such as
        ``nn.Tanh`` or a function such as ``torch.tanh``; for hidden neurons,
        dropout and a folded batch norm may sit beside it; for conv channels,
        pooling, flatten and dropout); None otherwise.
    pre_scale : float
        The fixed scale the batch norms folded between the two layers apply to
        the pre-activations (1.0 without any): ``σ(s (w·x + b))``.
    order_verified : bool
        False when the layer order was taken from registration order because
        the forward could not be traced (see :mod:`nqf.modules._trace`).
    stacked : str or None
        For experts held in an ``nn.ModuleList`` / ``nn.ModuleDict``: its name.  The layout then refers to
        the equivalent copy :meth:`prepare` returns (the experts' parameters stacked), not to the module.
    """

    names: tuple[str, ...]
    kind: str
    n_units: int
    p: int
    layout: UnitLayout
    description: str
    smooth: bool = True
    activation: str | None = None
    order_verified: bool = True
    stacked: str | None = None
    pre_scale: float = 1.0

    def prepare(self, module: nn.Module) -> nn.Module:
        """The module :attr:`layout` refers to: ``module`` itself, or for :attr:`stacked` experts an equivalent
        copy with their parameters stacked (:func:`nqf.modules.stack_experts`; ``module`` is not changed)."""
        return module if self.stacked is None else stack_experts(module, self.stacked)

    @property
    def name(self) -> str:
        """The main layer name (``"(module)"`` for the module itself)."""
        return self.names[0] or "(module)"

    def summary(self) -> str:
        """One line: the layer name(s), kind, number of units and ``p`` (what ``--list-units`` and errors show)."""
        names = " / ".join(f"`{n or '(module)'}`" for n in self.names)
        flags = ("" if self.smooth else ", NON-SMOOTH") + ("" if self.order_verified else ", order not verified")
        return f"{names} ({self.kind}, {self.n_units} units, p = {self.p}{flags})"

    def to_dict(self) -> dict:
        return dict(
            names=list(self.names),
            kind=self.kind,
            n_units=self.n_units,
            p=self.p,
            smooth=self.smooth,
            activation=self.activation,
            order_verified=self.order_verified,
            stacked=self.stacked,
            pre_scale=self.pre_scale,
            description=self.description,
            layout=[dict(param=s.param, axis=s.axis, size=s.size, offset=s.offset) for s in self.layout.slices],
        )

    def __repr__(self) -> str:
        flag = "" if self.smooth else ", NON-SMOOTH"
        return f"UnitCandidate({self.name!r}, {self.kind}, m={self.n_units}, p={self.p}{flag})"


def _prefixed(layout: UnitLayout, prefix: str) -> UnitLayout:
    if not prefix:
        return layout
    return UnitLayout(
        [UnitSlice(f"{prefix}.{s.param}", s.axis, s.size, s.offset) for s in layout.slices], layout.n_units
    )


def _act_names(steps: tuple[Step, ...]) -> str:
    labels = [st.label for st in steps]
    if not [st for st in steps if st.role in ("act", "custom")]:
        labels.append("no activation (linear)")
    return " → ".join(labels)


def _smooth_note(steps: tuple[Step, ...]) -> tuple[bool, str]:
    bad = [st.label for st in steps if st.non_smooth or (st.module is not None and is_non_smooth_layer(st.module))]
    if not bad:
        return True, ""
    use = REGISTRY.smooth_alternatives_text()
    return False, f" — NON-SMOOTH ({', '.join(bad)}): the normal form does not apply; use {use}"


_UNVERIFIED = (
    " — layer order taken from registration (the forward could not be traced with torch.fx), not verified; "
    "from_module checks the permutation symmetry"
)


def _single_activation(steps: tuple[Step, ...], *, around: tuple[str, ...] = ()) -> str | None:
    """The registry name of the one activation between the layers, else None; besides it only steps whose
    role is in ``around`` (a convolution's pooling / flatten and dropout: ``("pool", "pass")``)."""
    acts = [st for st in steps if st.role == "act"]
    rest = [st for st in steps if st.role != "act"]
    if len(acts) == 1 and acts[0].activation is not None and all(st.role in around for st in rest):
        return acts[0].activation.name
    return None


def _folded_scale(steps: tuple[Step, ...]) -> float:
    """The product of the scales of the batch norms folded between the layers (role ``"scale"``; 1.0: none)."""
    scale = 1.0
    for st in steps:
        if st.role == "scale" and st.module is not None:
            s = uniform_batchnorm_scale(st.module)
            assert s is not None  # a "scale" step is a batch norm of one scale (module_step)
            scale *= s
    return scale


def _scale_note(root: nn.Module, steps: tuple[Step, ...]) -> str:
    """The batch norms folded as one fixed scale, in words (empty without any)."""
    names = {id(mod): name for name, mod in root.named_modules()}
    folded = [st for st in steps if st.role == "scale" and st.module is not None]
    return "".join(
        f"; {type(st.module).__name__} `{names.get(id(st.module), '?')}` in eval mode (running statistics) "
        "multiplies every pre-activation by the same scale with zero shift: folded as a fixed scale (units stay "
        "interchangeable, σ's argument stays zero at zero weights)"
        for st in folded
    )


def _mlp_candidate(root: nn.Module, chain: Chain, first: nn.Linear, second: nn.Linear) -> UnitCandidate | None:
    m, name1, name2 = first.out_features, chain.first, chain.second
    block = second.in_features // m if chain.merged and second.in_features % m == 0 else 1
    if second.in_features != m * block:
        return None
    slices = [UnitSlice(f"{name2}.weight", axis=1, size=block), UnitSlice(f"{name1}.weight", axis=0)]
    if first.bias is not None:
        slices.append(UnitSlice(f"{name1}.bias", axis=0))
    p = second.out_features * block + first.in_features + (first.bias is not None)
    smooth, note = _smooth_note(chain.steps)
    readout = "readout column" if block == 1 else f"readout block of {block} columns"
    desc = (
        f"{m} hidden neurons between `{name1}` (Linear {first.in_features}→{m}) and `{name2}` (Linear "
        f"{second.in_features}→{second.out_features}) through {_act_names(chain.steps)}; unit = ({readout}, input "
        f"row{', bias' if first.bias is not None else ''}), p = {p}{_scale_note(root, chain.steps)}{note}"
        f"{'' if chain.verified else _UNVERIFIED}"
    )
    act = _single_activation(chain.steps, around=("pass", "scale"))  # dropout, identity, a folded batch norm
    return UnitCandidate(
        (name1, name2),
        "mlp-hidden",
        m,
        p,
        UnitLayout(slices, m),
        desc,
        smooth,
        act,
        chain.verified,
        pre_scale=_folded_scale(chain.steps),
    )


def _conv_candidate(root: nn.Module, chain: Chain, first: nn.Module, second: nn.Module) -> UnitCandidate | None:
    if not isinstance(first, (nn.Conv1d, nn.Conv2d)) or first.groups != 1:
        return None
    if not [st for st in chain.steps if st.role in ("act", "custom")]:
        return None
    if isinstance(second, (nn.Conv1d, nn.Conv2d)) and second.groups != 1:
        return None
    name1, name2 = chain.first, chain.second
    if isinstance(second, nn.Linear) and not chain.merged and second.in_features != first.out_channels:
        return None
    readout = name2 if isinstance(second, nn.Linear) else f"{name2}.weight"
    try:
        layout = conv_units(root, name1, readout, channel_axis=1)
    except (ValueError, KeyError, TypeError):
        return None
    p = layout.p(dict(root.named_parameters()))
    smooth, note = _smooth_note(chain.steps)
    desc = (
        f"{first.out_channels} channels of `{name1}` ({type(first).__name__} {first.in_channels}→"
        f"{first.out_channels}, kernel {tuple(first.kernel_size)}) read by `{name2}` through "
        f"{_act_names(chain.steps)}; unit = (readout block, filter{', bias' if first.bias is not None else ''}"
        f"), p = {p}{_scale_note(root, chain.steps)}{note}{'' if chain.verified else _UNVERIFIED}"
    )
    act = _single_activation(chain.steps, around=("pool", "pass"))
    return UnitCandidate(
        (name1, name2), "conv-channels", first.out_channels, p, layout, desc, smooth, act, chain.verified
    )


def _chain_candidates(root: nn.Module) -> list[UnitCandidate]:
    """Hidden neurons and conv channels of every chain layer → steps → layer (:func:`layer_chains`)."""
    out = []
    for chain in layer_chains(root):
        first, second = root.get_submodule(chain.first), root.get_submodule(chain.second)
        if isinstance(first, nn.Linear):
            cand = _mlp_candidate(root, chain, first, second) if isinstance(second, nn.Linear) else None
        else:
            cand = _conv_candidate(root, chain, first, second)
        if cand is not None:
            out.append(cand)
    return out


def _unit_kind(sub: nn.Module) -> str:
    """The kind a module with its own ``units`` declares as the class attribute ``unit_kind`` (``"custom"`` without)."""
    kind = getattr(type(sub), "unit_kind", None)
    return kind if isinstance(kind, str) and kind else "custom"


def _own_units(sub: nn.Module):
    try:
        lay = getattr(sub, "units", None)
    except (AttributeError, RuntimeError, TypeError, ValueError, NotImplementedError, KeyError, IndexError):
        return None  # a property that fails on this instance
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
    TypeError, NormalFormError
        ``module`` is not an ``nn.Module``; it holds attention and torch is older than 2.3 (``modules/_compat.py``).
    """
    if not isinstance(module, nn.Module):
        raise InvalidTypeError(f"`module` must be a torch.nn.Module; found {type(module).__name__}")
    check_attention_torch(module)  # torch 2.2: attention's fast path cannot be switched off
    params = dict(module.named_parameters())
    found: list[UnitCandidate] = []
    skip: list[str] = []
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
        elif isinstance(sub, nn.MultiheadAttention):
            found.append(_attention_candidate(module, name, sub, params))
    found.extend(_chain_candidates(module))
    found.extend(_experts_candidates(module, skip))
    order = {name: i for i, (name, _) in enumerate(module.named_modules())}
    return sorted(found, key=lambda c: order.get(c.names[0], len(order)))


def _experts_candidates(module: nn.Module, skip: list[str]) -> list[UnitCandidate]:
    """Experts in a ModuleList / ModuleDict combined by a gate (:mod:`nqf.modules._experts`)."""
    out = []
    for e in find_experts(module, trace_graph(module)):
        if any(e.container == s or e.container.startswith(s + ".") for s in skip):
            continue
        box, gate = module.get_submodule(e.container), module.get_submodule(e.gate)
        first = next(iter(box.children()))
        assert isinstance(gate, nn.Linear)
        desc = (
            f"{e.n} experts of `{e.container}` ({type(box).__name__} of {type(first).__name__}) combined by the "
            f"gate `{e.gate}` (Linear {gate.in_features}→{e.n}); unit = (all {e.per_expert} parameters of one "
            f"expert, gate row{', gate bias' if gate.bias is not None else ''}), p = {e.p}; laid out on an "
            f"equivalent copy whose experts' parameters are stacked (`{e.container}.stacked.*`, "
            "UnitCandidate.prepare); from_module checks the permutation symmetry"
        )
        names = (e.container, e.gate)
        out.append(UnitCandidate(names, "experts", e.n, e.p, e.layout, desc, True, None, True, e.container))
    return out


def refused_units(module: nn.Module, found: list[UnitCandidate] | None = None) -> list:
    """Every layer of ``module`` not offered as units, each a ``Refusal`` (``layer``, ``blocker``, ``reason``;
    :meth:`summary` is one line naming the layer that blocks, why, and what would work).

    Layers that belong to a candidate of :func:`find_units` (``found``, computed when not given) and layers
    whose outputs are the module's output (readouts) are not listed.
    """
    found = find_units(module) if found is None else found
    taken = tuple(n for c in found for n in c.names)
    skip = tuple(n for n, sub in module.named_modules() if _own_units(sub) is not None)
    return unit_refusals(module, taken, skip)


def _inside(name: str, outer: str) -> bool:
    return name == outer or name.startswith(outer + ".")


def _outermost(found: list[UnitCandidate]) -> UnitCandidate | None:
    """The candidate whose layers contain every other candidate's (experts around their hidden neurons)."""
    for c in found:
        if all(c is d or all(any(_inside(n, o) for o in c.names if o) for n in d.names) for d in found):
            return c
    return None


def _attention_candidate(module: nn.Module, name: str, sub: nn.MultiheadAttention, params: dict) -> UnitCandidate:
    layout = attention_units(sub, f"{name}." if name else "")
    p = layout.p(params)
    parent_name = name.rpartition(".")[0] if "." in name else ""
    parent = module.get_submodule(parent_name) if name else None
    transformer_layers = (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)
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
    return UnitCandidate(names, "attention-heads", sub.num_heads, p, layout, desc, True)


def select_units(module: nn.Module, name: str | None = None) -> UnitCandidate:
    """The layer of units to analyse: the only candidate, the one named ``name``, or the outermost.

    The outermost is the candidate whose layers contain every other candidate's: experts of a mixture are
    chosen before the hidden neurons inside each expert (a permutation of the experts is a symmetry of the
    whole model); the inner ones stay selectable by name.

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
        No candidate (naming the layers that block, :func:`refused_units`); ``name`` matches none; or several
        candidates, none containing the others, and no ``name``.
    """
    found = find_units(module)
    listing = "; ".join(c.summary() for c in found)
    if not found:
        blocked = "; ".join(r.summary() for r in refused_units(module, found))
        raise NoUnitsError(
            f"no interchangeable units found in {type(module).__name__}: looked for {_LOOKED_FOR}. "
            f"{f'Blocked: {blocked}. ' if blocked else ''}Pass an explicit nqf.modules.UnitLayout instead."
        )
    if name is not None:
        match = [c for c in found if name in c.names or (name == "(module)" and "" in c.names)]
        if len(match) == 1:
            return match[0]
        if not match:
            raise NoUnitsError(f"`units` names layer {name!r}, which holds no interchangeable units; found: {listing}")
        raise NoUnitsError(f"`units` {name!r} matches {len(match)} layers of units; choose one of: {listing}")
    if len(found) > 1 and (outer := _outermost(found)) is not None:
        return outer
    if len(found) > 1:
        raise NoUnitsError(
            f"{len(found)} layers of interchangeable units found: {listing}; choose one by name "
            "(`name` here, --units LAYER_NAME on the command line)"
        )
    return found[0]
