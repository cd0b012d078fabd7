"""Assumption checks of an analysis, each with a number (docs/theory.md §1, §4).

* smooth activation at 0 (ReLU and friends are refused with what to use instead);
* permutation symmetry of the units (``f(W) = f(Wπ)``);
* the zero-gradient condition (units at zero get no gradient: ``b = 0``, ``B = 0``);
* commutation of the structure matrices, tested with two random adjoints
  (``‖[𝒜*(R), 𝒜*(S)]‖ / (‖𝒜*(R)‖ ‖𝒜*(S)‖)``, milliseconds, nothing dense is built):
  decides Lotka–Volterra or the saddle sequence;
* the order of the NQF's error in the units: a cubic term (``σ''(0) ≠ 0``, a gate) makes it ``O(‖W‖³)``;
* width against ``p`` (``M(0) = εI`` needs ``m ≥ p``);
* memory and time, estimated before the long runs from the sizes and a timed step;
* training-only randomness (dropout, batch statistics): such layers are switched to eval mode, as the
  structure operator sees them, and named.
"""

from __future__ import annotations

import copy
import math
from typing import NoReturn

import torch
from torch import nn

from ...errors import NormalFormError
from ...structure import COMMUTING_RTOL, REGISTRY, commutator_defect
from ._result import CheckRow

__all__ = [
    "TRAINING_ONLY",
    "training_only_layers",
    "freeze_training_only",
    "check_training_only",
    "check_activation_at_zero",
    "check_smooth",
    "check_symmetry",
    "check_zgz",
    "check_error_order",
    "check_commutation",
    "check_width",
    "estimate_row",
]

#: Layers that behave differently in training mode (random masks, batch statistics).
TRAINING_ONLY: tuple[type[nn.Module], ...] = (
    nn.Dropout,
    nn.Dropout1d,
    nn.Dropout2d,
    nn.Dropout3d,
    nn.AlphaDropout,
    nn.FeatureAlphaDropout,
    nn.BatchNorm1d,
    nn.BatchNorm2d,
    nn.BatchNorm3d,
    nn.SyncBatchNorm,
)


def training_only_layers(module: nn.Module) -> list[str]:
    """``"NAME (Class)"`` of every layer of ``module`` whose training mode is random or batch-dependent."""
    return [
        f"`{n or type(module).__name__}` ({type(m).__name__})"
        for n, m in module.named_modules()
        if isinstance(m, TRAINING_ONLY)
    ]


def freeze_training_only(module: nn.Module) -> list[str]:
    """Put ``module`` in eval mode (dropout off, batch norm on its running statistics), as the structure
    operator and the real training of the analysis use it; returns :func:`training_only_layers`."""
    module.eval()
    return training_only_layers(module)


def check_training_only(names: list[str]) -> CheckRow:
    """The row for training-only layers: ``ok`` without any, ``warn`` naming them (switched off)."""
    if not names:
        return CheckRow("training-only layers", "none", "no dropout / batch statistics", "ok")
    return CheckRow(
        "training-only layers",
        ", ".join(names),
        "no dropout / batch statistics",
        "warn",
        "switched off (eval mode) for the analysis: the NQF and the real training use the deterministic network",
    )


def check_activation_at_zero(found) -> None:
    """The zero-gradient condition, early and cheap, for units with an elementwise activation: ``σ(0) = 0``.

    Raises
    ------
    NormalFormError
        ``σ(0) ≠ 0`` (e.g. a sigmoid), with the message of :func:`check_zgz`.
    """
    act = found.activation
    if act is None:
        return
    with torch.no_grad():
        at0 = float(act(torch.zeros(1, dtype=torch.float64)).reshape(-1)[0])
    if abs(at0) > 1e-12:
        _zgz_error(act)


def check_smooth(module: nn.Module, *, found=None, X: torch.Tensor | None = None) -> CheckRow:
    """Refuse layers that are not three times differentiable at 0 (one clear line); measure the kinks on the
    readout path.

    A non-smooth activation kept as the ``activation`` attribute of a ``torch.nn`` transformer layer
    (``F.relu`` by default) acts after the units (the heads), on the feed-forward pre-activations of the fixed
    readout: the form is smooth at zero unit weights when none of those is exactly 0.  With ``found`` (from
    :func:`nqf.app._study.choose_units`) and the inputs ``X`` the row says how far the nearest one is from the kink
    (:func:`nqf.modules.kink_distances`, status ``warn``) and a pre-activation on the kink is refused; without
    them the row says the distance was not measured (``warn``), never "no non-smooth layer".

    Raises
    ------
    NormalFormError
        Names the first non-smooth layer and smooth replacements; or a transformer layer's kink reached at
        zero unit weights.
    """
    from ...modules import is_non_smooth_layer, kink_distances, readout_kinks

    kinks = readout_kinks(module)
    attrs = {f"{n}.activation" if n else "activation" for n, _ in kinks}
    for name, sub in module.named_modules():
        if is_non_smooth_layer(sub) and name not in attrs:
            raise NormalFormError(
                f"`model`: layer `{name or type(module).__name__}` is {REGISTRY.label(sub)}, which is not smooth at 0 "
                f"(the NQF expands the network around zero weights to second order; a kink has no curvature "
                f"there and the prediction would be silently wrong); use {REGISTRY.smooth_alternatives_text()} "
                "(e.g. --model mlp:width=256,act=tanh)"
            )
    if not kinks:
        return CheckRow("smooth at 0", "no non-smooth layer", "C³ at zero weights", "ok")
    where = ", ".join(f"{act} in the feed-forward of `{n or type(module).__name__}`" for n, act in kinks)
    if found is None or X is None:
        note = "after the units, on the readout path: its distance to the kink at zero unit weights is not measured"
        return CheckRow("smooth at 0", where, "C³ at zero weights", "warn", note)
    net = module if getattr(found, "module", None) is None else found.module
    dist = kink_distances(net, found.layout, X)
    name, d = min(dist.items(), key=lambda kv: kv[1])
    if not d > 0.0:
        raise NormalFormError(
            f"`model`: the feed-forward activation of `{name or type(module).__name__}` ({where}) is at its kink at "
            f"zero unit weights (min |pre-activation| = {d:.3g} on {min(len(X), 256)} samples): not smooth there; "
            f"use activation='gelu' or another smooth one ({REGISTRY.smooth_alternatives_text()})"
        )
    value = f"{where}: min |pre-activation| = {d:.3g} at zero unit weights"
    note = (
        "the kink acts after the units, at the feed-forward pre-activations of the fixed readout; none is at 0 on "
        f"{min(len(X), 256)} samples, so the form is smooth at zero units while the units move them by less than "
        f"{d:.3g}"
    )
    return CheckRow("smooth at 0", value, "C³ at zero weights", "warn", note)


def check_symmetry(module: nn.Module, layout, X: torch.Tensor, seed: int = 0) -> CheckRow:
    """``max |f(W) − f(Wπ)| / max |f|`` for random ``W`` and generating permutations ``π``."""
    from ...modules import check_permutation_symmetry

    dev = check_permutation_symmetry(module, layout, X[:16], seed=seed)
    return CheckRow("unit symmetry", f"{dev:.1e}", "f(W) = f(Wπ) to round-off", "ok")


def check_zgz(op, offset: torch.Tensor, how: str, activation=None) -> CheckRow:
    """The zero-gradient condition; without it the flow does not close on ``M`` and no staircase is predicted.

    Raises
    ------
    NormalFormError
        When it fails (e.g. a sigmoid: ``σ(0) = 1/2``).
    """
    if op.satisfies_zgz:
        return CheckRow("zero-gradient condition", "b = 0, B = 0", "units at zero get no gradient", "ok")
    _zgz_error(activation)


def _zgz_error(activation) -> NoReturn:
    extra = "" if activation is None else f" ({type(activation).__name__}: σ(0) ≠ 0)"
    raise NormalFormError(
        f"`model`: the zero-gradient condition fails{extra}: a unit at zero still receives a gradient, so the "
        "dynamics do not close on M = W Wᵀ and no staircase can be predicted; use an activation with σ(0) = 0 "
        f"({REGISTRY.smooth_alternatives_text()})"
    )


def check_commutation(op, rtol: float = COMMUTING_RTOL) -> tuple[CheckRow, bool]:
    """Commutation row and the decision (True: Lotka–Volterra; False: saddle sequence).

    The number is :func:`nqf.structure.commutator_defect` (two random adjoints, nothing dense) and the
    decision the one of :func:`nqf.structure.commutes`, which :func:`nqf.predict` makes.
    """
    value = commutator_defect(op)
    yes = value <= rtol
    note = (
        "commuting: Lotka–Volterra reduction"
        if yes
        else "not commuting: greedy saddle sequence (nqf.reductions.saddles.saddle_sequence)"
    )
    return CheckRow("commutation", f"{value:.2e}", f"≤ {rtol:g} for Lotka–Volterra", "ok", note), yes


def check_error_order(module: nn.Module, found, X: torch.Tensor, *, seed: int = 0, scale: float = 1e-2) -> CheckRow:
    """Whether the module has a term of third order in the units, which the NQF leaves out.

    Along a random ``W`` (columns of norm ~1, every unit at once) the odd part of ``g(s) = f(sW) − f(0)``,
    ``(g(s) − g(−s))/2``, holds the odd orders (the first is zero by the zero-gradient condition), the even
    part the NQF's ``s²`` term.  An odd part above the round-off of ``f`` that shrinks 8-fold when ``s`` halves
    is a cubic term: an activation with ``σ''(0) ≠ 0`` (GELU, SiLU), or a factor first order in the units such
    as a softmax gate over experts.  The row gives ``κ`` with ``|f₃| / |f₂| ≈ κ r`` at units of norm ``r``
    (``warn``); without one the error is ``O(‖W‖⁴)`` (``ok``).  Samples: the first 64 of ``X``.
    """
    from ...modules import UnitScatter

    net = copy.deepcopy(module if getattr(found, "module", None) is None else found.module).eval()
    scatter = UnitScatter(net, found.layout)
    gen = torch.Generator().manual_seed(seed)
    W = torch.randn(scatter.p, scatter.m, generator=gen, dtype=X.dtype) / math.sqrt(scatter.p)
    xs = X[:64]

    with torch.no_grad():
        zero = scatter.module_output(net, 0.0 * W, xs)

    def parts(s: float):
        with torch.no_grad():
            plus, minus = (scatter.module_output(net, c * W, xs) for c in (s, -s))
        floor = 64 * torch.finfo(X.dtype).eps * float(torch.maximum(plus.abs(), minus.abs()).max())
        return float((plus - minus).abs().max()) / 2, float((plus + minus - 2 * zero).abs().max()) / 2, floor

    odd, even, floor = parts(scale)
    odd_half, _, floor_half = parts(scale / 2)
    expected = "O(‖W‖⁴): no cubic term in the units"
    if odd <= floor or odd_half <= floor_half or not even > 0:
        return CheckRow("NQF error order", "O(‖W‖⁴)", expected, "ok", "the odd part of f(sW) is at round-off")
    order = math.log2(odd / odd_half)  # 3 for a cubic term
    if abs(order - 3) < 0.5:
        kappa = (odd / scale**3) / (even / scale**2)
        value = f"O(‖W‖³): |f₃|/|f₂| ≈ {kappa:.2g}·r (odd part ÷ {2**order:.1f} when s halves)"
        what = (
            "a term of third order in the units (an activation with σ''(0) ≠ 0, or a factor first order in the "
            "units, such as a gate)"
        )
    else:  # not a Taylor term (a kink gives |s|·s: order 2)
        value = f"odd part of order s^{order:.1f} (÷ {2**order:.1f} when s halves)"
        what = "an odd part that is not a Taylor term of the units (a kink on the path from the units to the output)"
    note = f"{what} that the NQF leaves out: the network parts from the NQF as its units grow, most at the later drops"
    return CheckRow("NQF error order", value, expected, "warn", note)


def check_width(width: int, p: int) -> CheckRow:
    if width >= p:
        return CheckRow("width vs p", f"m = {width}, p = {p}", "m ≥ p for M(0) = εI", "ok")
    return CheckRow(
        "width vs p",
        f"m = {width}, p = {p}",
        "m ≥ p for M(0) = εI",
        "warn",
        f"M(0) = εΠ with Π a random rank-{width} projector; weight-form simulation",
    )


def estimate_row(seconds: float, nbytes: float) -> CheckRow:
    """Memory and time estimate (before the long runs)."""
    return CheckRow(
        "memory and time",
        f"{nbytes / 2**20:.0f} MiB, ~{seconds:.0f} s",
        "estimated before the runs",
        "ok",
        "from the array sizes and timed runs of 3 and 13 steps of each run",
    )
