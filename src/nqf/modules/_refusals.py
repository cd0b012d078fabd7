"""Why a layer is not offered as units: the layer that blocks, the reason, and what would work.

:func:`unit_refusals` turns every :class:`~nqf.modules._trace.Block` of the traced forward (the node where
the path from a ``nn.Linear`` / convolution to a readout stops) into one line naming, by its
``named_modules()`` name, the module or call that blocks and why it is not allowed, and adds the recurrent
layers (``nn.RNN``, ``nn.LSTM``, ``nn.GRU``), whose hidden units are coupled through time.  A layer whose
outputs are the module's output (a readout) is not listed, nor a layer that belongs to a candidate.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from ._steps import BATCH_NORMS, batchnorm_affine
from ._trace import Block, trace_layers

__all__ = ["unit_refusals"]

_NORMS = (nn.LayerNorm, nn.GroupNorm, nn.LocalResponseNorm) + ((nn.RMSNorm,) if hasattr(nn, "RMSNorm") else ())
_SOFTMAX = (nn.Softmax, nn.LogSoftmax, nn.Softmin, nn.Softmax2d)
_RECURRENT = (nn.RNNBase, nn.RNNCellBase)
_SOFTMAX_FUNCTIONS = ("softmax", "log_softmax", "softmin")
_RESIDUAL = "a residual block whose skip goes around the units (x + W₂ tanh(W₁ x), then a fixed readout) works"


@dataclass(frozen=True)
class Refusal:
    """A layer that is not offered as units: ``layer`` (its ``named_modules()`` name), ``blocker`` (the module
    or call that blocks, for people) and ``reason`` (one line: why, and what would work)."""

    layer: str
    blocker: str
    reason: str

    def summary(self) -> str:
        """``refused `LAYER`: REASON`` (what ``--list-units`` and the errors show)."""
        return f"refused `{self.layer or '(module)'}`: {self.reason}"

    def to_dict(self) -> dict:
        return dict(layer=self.layer, blocker=self.blocker, reason=self.reason)


def _units_word(module: nn.Module, first: str) -> tuple[int, str]:
    layer = module.get_submodule(first)
    if isinstance(layer, nn.Linear):
        return layer.out_features, "hidden units"
    return int(getattr(layer, "out_channels", 0)), "channels"


def _batchnorm_reason(bn: nn.Module, where: str, m: int, word: str, first: str) -> str:
    aff = batchnorm_affine(bn)
    fix = (
        "nqf folds a batch norm only when it multiplies every feature by the same scale with zero shift (as a "
        f"freshly initialised one does); remove it or fold its scale and shift into `{first}`"
    )
    if aff is None:
        return (
            f"{where} has no running statistics (track_running_stats=False): even in eval mode it normalises "
            f"with the batch's own statistics, so a sample's output depends on the batch; {fix}"
        )
    scale, shift = aff
    problems = []
    if bool((shift != 0).any()):
        problems.append(
            f"shifts the {m} pre-activations (max |shift| = {float(shift.abs().max()):.3g}): σ's argument is not "
            "zero at zero unit weights, so units at zero still get a gradient (no zero-gradient condition)"
        )
    if float(scale.max() - scale.min()) > 1e-12 * float(scale.abs().max()) or float(scale.abs().max()) == 0:
        problems.append(
            f"scales the {m} {word} unequally ({float(scale.min()):.4g} to {float(scale.max()):.4g}): the units "
            "are no longer interchangeable"
        )
    return f"{where} in eval mode (running statistics) {' and '.join(problems) or 'is not one fixed scale'}; {fix}"


def _module_reason(module: nn.Module, b: Block, m: int, word: str) -> str:
    mod = module.get_submodule(b.module) if b.module is not None else None
    first = b.first
    if isinstance(mod, _NORMS):
        return (
            f"{b.where} normalises across the {m} {word} of `{first}`, so the output is not a sum over units: "
            f"they are not separable; remove it or move it before `{first}`"
        )
    if isinstance(mod, BATCH_NORMS):
        return _batchnorm_reason(mod, b.where, m, word, first)
    if isinstance(mod, _RECURRENT):
        return (
            f"{b.where} couples the {m} outputs of `{first}` through time by its recurrent weights (weight_hh): "
            f"the output is not a sum over units of `{first}`; nqf needs a feed-forward layer of units"
        )
    if isinstance(mod, _SOFTMAX):
        return (
            f"{b.where} normalises across the {m} {word} of `{first}` (each output depends on all of them): "
            "they are not separable"
        )
    if mod is not None and next(mod.parameters(), None) is not None:
        return (
            f"{b.where} reads the {m} outputs of `{first}` together (not one unit at a time), so the output is not "
            f"a sum over units of `{first}`; the units must reach a Linear or conv readout through elementwise "
            "steps only"
        )
    return (
        f"{b.where} between `{first}` and its readout is not an elementwise step, a pooling over other axes or a "
        "reshape nqf can follow"
    )


def _quoted(where: str) -> str:
    """A call label in backticks (a module's ``Class `name``` already has them)."""
    return where if "`" in where else f"`{where}`"


def _reason(module: nn.Module, b: Block) -> str:
    m, word = _units_word(module, b.first)
    first = b.first
    if b.kind == "module":
        return _module_reason(module, b, m, word)
    if b.kind == "axes":
        return f"after `{first}`, {b.why}"
    if b.kind == "readers":
        return (
            f"the outputs of `{first}` are read by {b.why} ({_quoted(b.where)}): a unit reaches the output by "
            "more than one path, so the output is not a sum over units read out by one layer"
        )
    if b.kind == "combine" and b.readout is not None:
        return (
            f"Linear `{b.readout}` reads the {m} {word} of `{first}` added to {b.other} ({b.where}): its columns "
            f"multiply both the units and the skip input {b.other}, so at zero units the output is still linear in "
            f"`{b.readout}`'s weights (no zero-gradient condition) and each column also reads its own input "
            f"coordinate (the units are not interchangeable); {_RESIDUAL}"
        )
    if b.kind == "combine":
        return (
            f"{_quoted(b.where)} combines the outputs of `{first}` with {b.other}, so they are not read out by one "
            "layer alone (not a sum over units)"
        )
    if b.kind in ("shared", "readout-axis"):
        return f"{b.where} cannot read the units of `{first}`: {b.why}"
    if any(b.where.startswith(p) for p in ("torch." + s for s in _SOFTMAX_FUNCTIONS)) or any(
        f"F.{s}" in b.where or f".{s}(" in b.where for s in _SOFTMAX_FUNCTIONS
    ):
        return (
            f"{_quoted(b.where)} normalises the {m} {word} of `{first}` together (each output depends on all of them)"
        )
    return (
        f"{_quoted(b.where)} after `{first}` is not an elementwise activation, a pooling over other axes or a reshape "
        "nqf can follow"
    )


def _recurrent(module: nn.Module, skip: list[str]) -> list[Refusal]:
    out = []
    for name, mod in module.named_modules():
        if isinstance(mod, _RECURRENT) and not any(name == s or name.startswith(s + ".") for s in skip):
            where = f"{type(mod).__name__} `{name or '(module)'}`"
            reason = (
                f"{where}: its hidden units are coupled through time by the recurrent weights (weight_hh), not a "
                "sum over units; nqf needs a feed-forward layer of units (nn.Linear / conv read out by a layer)"
            )
            out.append(Refusal(name, where, reason))
    return out


def unit_refusals(module: nn.Module, taken: tuple[str, ...] = (), skip: tuple[str, ...] = ()) -> list[Refusal]:
    """Every layer of ``module`` that is not offered as units, with the layer that blocks and why.

    Parameters
    ----------
    module : nn.Module
    taken : tuple of str
        Layer names that belong to a candidate (not listed).
    skip : tuple of str
        Submodules not searched (modules with their own ``units``).
    """
    _, blocks = trace_layers(module)
    out, seen = [], set()
    for b in blocks:
        if b.kind == "output" or b.first in taken or (b.downstream is None and b.readout is None):
            continue
        if any(b.first.startswith(s + ".") for s in skip) or (b.first, b.where) in seen:
            continue
        seen.add((b.first, b.where))
        out.append(Refusal(b.first, b.where, _reason(module, b)))
    return out + _recurrent(module, list(skip))
