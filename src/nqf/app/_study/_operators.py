"""The structure operator of the chosen units: analytic where the family is recognised, autodiff otherwise.

:func:`structure_of` tries, in order,

1. **analytic, structured** operators of :mod:`nqf.structure` for a recognised family, built on
   the input the units' first layer receives (captured by a hook, so layers before the units are
   allowed): hidden neurons between two ``nn.Linear`` layers (:func:`nqf.structure.mlp`,
   memory ``O(N D)``; a batch norm between them that is one fixed scale in eval mode, as discovery folds it,
   scales the input part); channels of a ``Conv1d``/``Conv2d`` read by an ``nn.Linear`` after a
   flatten (per-position readout) or a global average pool (mean readout)
   (:func:`nqf.structure.conv1d` / :func:`~nqf.structure.conv2d`, with the conv bias; memory
   ``O(N Q k)``); the heads of a plain self-attention ``nn.MultiheadAttention`` (no mask, no
   extra key/value biases; :func:`nqf.structure.multi_head_attention`).  Whatever follows the
   layer the units feed is read out by its Jacobian at zero units
   (:class:`nqf.structure.ReadoutStructure`, label ``"… + readout"``; one ``N × C × d`` array).
   Each is accepted only if it equals the module's own autodiff operator
   (its second derivatives at zero units by plain autograd, along random directions) on a few samples
   to ``1e-10``: forward and adjoint, linear term, cross term; otherwise the next option is taken;
2. the **dense autodiff** operator ``N × C × p × p`` when it fits in :data:`DENSE_BUDGET`;
3. the **matrix-free autodiff** operator (:func:`nqf.modules.from_module` with
   ``matrix_free=True``: ``forward_factor`` / ``adjoint_apply`` through ``torch.func``, memory
   ``O(N (p + C))`` plus one chunk).

The label (``"analytic mlp"``, ``"analytic conv2d + readout"``, ``"analytic attention +
readout"``, ``"autodiff (dense)"``, ``"autodiff (matrix-free)"``, …) is what ``nqf analyze``
prints as its ``structure operator:`` line and records as ``Analysis.operator``.
"""

from __future__ import annotations

import copy
import math

import torch
from torch import nn

from ...modules import UnitScatter, evaluation_mode
from ._discover import FoundUnits, output_at_zero

__all__ = ["structure_of", "is_analytic", "activation_name", "DENSE_BUDGET", "AGREEMENT_RTOL"]

#: Bytes the dense autodiff array ``N × C × p × p`` (float64, built twice) may take; above it, matrix-free.
DENSE_BUDGET = 256 * 2**20
#: An analytic operator is used only if it equals the module's autodiff operator to this relative error.
AGREEMENT_RTOL = 1e-10


def structure_of(module: nn.Module, found: FoundUnits, X: torch.Tensor, *, check_samples: int = 8):
    """Structure operator of the chosen units on inputs ``X`` (see the module docstring).

    Returns
    -------
    op : StructureOperator
    offset : torch.Tensor, shape (N, C)
        ``f(0)``; for an analytic operator it is *not* part of ``op`` (subtract it from the
        targets), for the autodiff operators it is ``op.offset`` already.
    how : str
        Which operator (module docstring): ``"analytic mlp"``, ``"analytic conv1d"``, ``"analytic
        conv2d"``, ``"analytic attention"`` (each possibly ``" + readout"``), ``"autodiff (dense)"``
        or ``"autodiff (matrix-free)"``.
    """
    from ...modules import from_module

    f0 = output_at_zero(module, found.layout, X)
    C = f0.shape[1]
    sub = torch.arange(min(check_samples, X.shape[0]))
    for build in (_analytic_mlp, _analytic_conv, _analytic_attention, _analytic_experts):
        built = build(module, found, X, C)
        if built is not None and _agrees(built[0], module, found, X, sub):
            return built[0], f0, built[1]
    N, p = X.shape[0], found.p
    if N * C * p * p * 8 * 2 <= DENSE_BUDGET:
        op = from_module(module, found.layout, X, zgz="carry", matrix_free=False)
        return op, op.offset, "autodiff (dense)"
    op = from_module(module, found.layout, X, zgz="carry", matrix_free=True)
    return op, op.offset, "autodiff (matrix-free)"


def is_analytic(how: str) -> bool:
    """``True`` for the labels of :func:`structure_of` whose operator leaves ``f(0)`` out."""
    return how.startswith("analytic")


def activation_name(act: nn.Module | None) -> str | None:
    """The registry name of a smooth activation (analytic operator possible), else None."""
    from ...structure import REGISTRY, Activation

    if isinstance(act, Activation):
        return act.name
    rec = None if act is None else REGISTRY.of_module(act)
    return rec.name if rec is not None and rec.smooth else None


def _analytic_mlp(module: nn.Module, found: FoundUnits, X: torch.Tensor, C: int):
    """:func:`nqf.structure.mlp` for hidden neurons between two ``nn.Linear`` layers (read out by the rest)."""
    from ...structure import mlp

    act = activation_name(found.activation)
    if found.kind != "mlp-hidden" or act is None or len(found.names) != 2:
        return None
    first, second = (module.get_submodule(n) for n in found.names)
    if not (isinstance(first, nn.Linear) and isinstance(second, nn.Linear)):
        return None
    Xin = X if found.is_whole_mlp else _layer_input(module, found.names[0], X)
    scale = found.pre_scale  # batch norms folded between the layers (discovery read them off the forward)
    if Xin.ndim != 2:
        return None
    if scale == 1.0:
        inner = mlp(Xin, act, bias=first.bias is not None, n_outputs=second.out_features)
    else:  # σ(s (w·x + b)) = σ(w·(s x) + b·s): the input part [x, 1] scaled by s (the bias is its last entry)
        ones = torch.ones(Xin.shape[0], 1, dtype=Xin.dtype)
        scaled = scale * (torch.cat([Xin, ones], dim=1) if first.bias is not None else Xin)
        inner = mlp(scaled, act, bias=False, n_outputs=second.out_features)
    return _read_out(module, found, X, inner, found.names[1], "analytic mlp")


def _read_out(module, found: FoundUnits, X, inner, layer: str, label: str, *, tokens: bool = False):
    """``inner`` (the operator of the layer the units feed) read out by the rest of the network: itself when the
    layer's output is the module's output, else a :class:`nqf.structure.ReadoutStructure` (module docstring)."""
    from ...structure import ReadoutStructure

    if found.is_whole_mlp:
        return inner, label
    J = _readout_jacobian(module, found, layer, X, inner.n_outputs, tokens=tokens)
    eye = torch.eye(inner.n_outputs, dtype=J.dtype)
    if J.shape[1] == inner.n_outputs and bool(torch.equal(J, eye.expand_as(J))):
        return inner, label
    return ReadoutStructure(inner, J), f"{label} + readout"


def _readout_jacobian(module, found: FoundUnits, layer: str, X, d: int, *, tokens: bool) -> torch.Tensor:
    """``J[n, c, j] = ∂f_c/∂h_j`` at zero units, ``h`` the output of ``layer`` (of every token alike with
    ``tokens``; the first element of a tuple output), by one backward pass per output ``c`` of plain autograd
    (torch.func would import ``torch._dynamo`` and sympy, 68 MB; samples are independent, so the gradient of
    ``Σ_n f_nc`` in the shift of sample ``n`` is its own row)."""
    zeroed = copy.deepcopy(module).eval()
    found.layout.set_W(zeroed, torch.zeros_like(found.layout.get_W(zeroed)))
    target = zeroed.get_submodule(layer)

    def f(delta):
        def add(_m, _args, out):
            if isinstance(out, tuple):
                return (out[0] + (delta[:, None, :] if tokens else delta), *out[1:])
            return out + delta

        handle = target.register_forward_hook(add)
        try:
            out = zeroed(X)
        finally:
            handle.remove()
        return out.reshape(out.shape[0], -1)

    delta = torch.zeros(X.shape[0], d, dtype=X.dtype, requires_grad=True)
    out = f(delta)
    rows = []
    for c in range(out.shape[1]):
        (g,) = torch.autograd.grad(out[:, c].sum(), delta, retain_graph=True, allow_unused=True)
        rows.append(torch.zeros_like(delta) if g is None else g)
    return torch.stack(rows, 1).detach()


def _layer_input(module: nn.Module, name: str, X: torch.Tensor) -> torch.Tensor:
    """What the submodule ``name`` receives when ``module`` runs on ``X`` (a forward pre-hook)."""
    seen: list[torch.Tensor] = []
    layer = module.get_submodule(name)
    handle = layer.register_forward_pre_hook(lambda _m, args: seen.append(args[0].detach()))
    try:
        with torch.no_grad():
            module(X)
    finally:
        handle.remove()
    return seen[0]


def _analytic_conv(module: nn.Module, found: FoundUnits, X: torch.Tensor, C: int):
    """:func:`nqf.structure.conv1d`/``conv2d`` for channels of a plain zero-padded convolution."""
    from ...structure import conv1d, conv2d

    act = activation_name(found.activation)
    if found.kind != "conv-channels" or act is None or len(found.names) != 2:
        return None
    conv, readout = (module.get_submodule(n) for n in found.names)
    if not isinstance(conv, (nn.Conv1d, nn.Conv2d)) or not isinstance(readout, nn.Linear):
        return None
    if conv.groups != 1 or conv.padding_mode != "zeros" or isinstance(conv.padding, str):
        return None
    if any(d != 1 for d in conv.dilation):
        return None
    m = conv.out_channels
    mode = "mean" if readout.in_features == m else "position"
    Xc = _layer_input(module, found.names[0], X)
    build, label = (conv1d, "analytic conv1d") if isinstance(conv, nn.Conv1d) else (conv2d, "analytic conv2d")
    try:
        inner = build(
            Xc, conv.kernel_size, conv.stride, conv.padding, act, mode, readout.out_features, bias=conv.bias is not None
        )
    except (ValueError, RuntimeError):  # shapes the analytic family does not cover
        return None
    if inner.p != found.p or not inner.satisfies_zgz:
        return None
    return _read_out(module, found, X, inner, found.names[1], label)


def _analytic_attention(module: nn.Module, found: FoundUnits, X: torch.Tensor, C: int):
    """:func:`nqf.structure.multi_head_attention` for the heads of a plain self-attention ``nn.MultiheadAttention``
    (no mask, no extra key/value biases), read out by the rest of the network through the token mean."""
    from ...structure import multi_head_attention

    if found.kind != "attention-heads" or not found.names:
        return None
    mha = module.get_submodule(found.names[-1])
    if not isinstance(mha, nn.MultiheadAttention) or not mha._qkv_same_embed_dim:
        return None
    if mha.bias_k is not None or mha.add_zero_attn:
        return None
    seen: list = []
    handle = mha.register_forward_pre_hook(lambda _m, args, kw: seen.append((args, kw)), with_kwargs=True)
    try:
        with torch.no_grad():
            module(X)
    finally:
        handle.remove()
    if len(seen) != 1:
        return None
    args, kw = seen[0]
    q = args[0] if args else kw.get("query")
    rest = [*args[1:3], kw.get("key"), kw.get("value")]
    if any(t is not None and t is not q for t in rest) or kw.get("attn_mask") is not None or kw.get("is_causal"):
        return None
    if kw.get("key_padding_mask") is not None or len(args) > 3:
        return None
    tok = q.detach() if mha.batch_first else q.detach().transpose(0, 1)
    d = mha.embed_dim // mha.num_heads
    inner = multi_head_attention(tok, d, d, n_outputs=mha.embed_dim, bias=mha.in_proj_bias is not None)
    if inner.p != found.p:
        return None
    return _read_out(module, found, X, inner, found.names[-1], "analytic attention", tokens=True)


def _analytic_experts(module: nn.Module, found: FoundUnits, X: torch.Tensor, C: int):
    """Identical two-layer experts (``Linear``, smooth activation, ``Linear`` without bias) summed with a softmax
    gate whose rows are part of the units (uniform, ``1/E``, at zero units), the sum being the module's output: to
    second order ``f = (1/E) Σ_e Σ_j a_ej σ'(0)(u_ejᵀx + c_ej)``, a two-layer MLP of the experts' hidden neurons
    scaled by ``1/E``, each expert ``h`` of them (:class:`nqf.structure.ChannelStructure` over
    :func:`nqf.structure.mlp`; the gate rows do not enter).  Whether the module is that is left to the agreement
    check against its own derivatives."""
    from ...structure import ChannelStructure, mlp

    if found.kind != "experts" or not found.names:
        return None
    stack = module.get_submodule(found.names[0])
    seq = getattr(stack, "stacked", None)
    if not isinstance(seq, nn.Sequential) or len(seq) != 3:
        return None
    first, act_module, second = seq
    act = activation_name(act_module)
    if not (isinstance(first, nn.Linear) and isinstance(second, nn.Linear)) or second.bias is not None or act is None:
        return None
    h, D = first.weight.shape[1:]
    E = int(first.weight.shape[0])  # the stacked parameter is (E, h, D): one slice per expert
    where, start = {}, 0  # each layout slice's offset in the unit (one expert's slice of a stacked parameter)
    for sl in found.layout.slices:
        where[sl.param] = start
        start += module.get_parameter(sl.param)[0].numel()
    prefix = f"{found.names[0]}.stacked."
    names = [prefix + "0.weight", prefix + "2.weight"] + ([prefix + "0.bias"] if first.bias is not None else [])
    if start != found.p or any(n not in where for n in names) or second.weight.shape[1:] != (C, h):
        return None
    j = torch.arange(h)[:, None]
    cols = [where[names[1]] + torch.arange(C)[None, :] * h + j, where[names[0]] + j * D + torch.arange(D)[None, :]]
    Xin = _layer_input(module, found.names[0] + ".stacked", X)
    if first.bias is not None:
        cols.append(where[names[2]] + j)
        Xin = torch.cat([Xin, torch.ones(Xin.shape[0], 1, dtype=Xin.dtype)], 1)
    if Xin.ndim != 2:
        return None
    index = torch.cat(cols, 1)
    layout = f"expert = {h} hidden neurons (channels) of (a ∈ R^{C}, u ∈ R^{D}" + (
        ", c)" if first.bias is not None else ")"
    )
    op = ChannelStructure(mlp(Xin / E, act, bias=False, n_outputs=C), index, found.p, layout=layout)
    return op, "analytic experts"


def _agrees(op, module: nn.Module, found: FoundUnits, X: torch.Tensor, sub: torch.Tensor) -> bool:
    """``op`` on samples ``sub`` equals the module's own derivatives at zero units (module docstring).

    Along two random directions ``v`` (unit 0 at ``s v``, unit 1 at ``t v``, every other unit at zero):
    ``𝒜(v vᵀ) = ½ ∂²f/∂s²``, ``vᵀ 𝒜*(R) v = Σ R ⊙ ½ ∂²f/∂s²``, the linear term ``b·v = ∂f/∂s`` and the
    cross term ``B(v vᵀ) = ½ ∂²f/∂s∂t`` (each zero where ``op`` has none), per sample and output.  Derivatives by
    plain autograd (:func:`_along`): torch.func's transforms import ``torch._dynamo`` and sympy (68 MB resident)
    on their first use, which the analysis of an MLP otherwise never needs.  A difference of the symmetric
    arrays escapes a random ``v`` with probability zero.
    """
    mine, xs = op.take(sub), X[sub]
    net = copy.deepcopy(module).eval()
    scatter = UnitScatter(net, found.layout)
    if scatter.m < 2:  # the cross term needs two units; the autodiff operator refuses one unit with its reason
        return False
    gen = torch.Generator().manual_seed(0)
    R = torch.randn(len(sub), mine.n_outputs, generator=gen, dtype=X.dtype)
    for _ in range(2):
        v = torch.randn(scatter.p, generator=gen, dtype=X.dtype)
        try:
            with evaluation_mode():
                d1, d2, d12 = _along(net, scatter, xs, v)
        except (RuntimeError, NotImplementedError):  # an operation without a double-backward rule
            return False
        scale = max(float(d2.abs().max()), float(d1.abs().max()), 1e-300)
        b, B, vv = mine.linear, mine.cross, torch.outer(v, v)
        pairs = [
            (mine.forward_unchecked(vv), 0.5 * d2, scale),
            (v @ mine.adjoint_unchecked(R) @ v, (R * 0.5 * d2).sum(), float((R * d2).abs().sum())),
            (torch.zeros_like(d1) if b is None else b @ v, d1, scale),
            (torch.zeros_like(d12) if B is None else B.forward_unchecked(vv), 0.5 * d12, scale),
        ]
        for got, want, size in pairs:
            if got.shape != want.shape or not math.isfinite(scale):
                return False
            if not float((got - want).abs().max()) <= AGREEMENT_RTOL * max(size, 1e-300):
                return False
    return True


def _along(net: nn.Module, scatter, xs: torch.Tensor, v: torch.Tensor):
    """``∂f/∂s``, ``∂²f/∂s²`` and ``∂²f/∂s∂t`` at ``s = t = 0`` of ``f(s, t)``: the module's output on ``xs`` with
    unit 0 at ``s v`` and unit 1 at ``t v`` (others zero), each ``(n, C)``, by plain autograd (double backward)."""
    s = torch.zeros((), dtype=v.dtype, requires_grad=True)
    t = torch.zeros((), dtype=v.dtype, requires_grad=True)
    rest = torch.zeros(scatter.p, scatter.m - 2, dtype=v.dtype)
    W = torch.cat([(s * v)[:, None], (t * v)[:, None], rest], 1)
    F = scatter.module_output(net, W, xs)
    d1 = _derivative(F, s)
    return d1.detach(), _derivative(d1, s).detach(), _derivative(d1, t).detach()


def _derivative(F: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """``∂F/∂s`` of every entry of ``F`` for a scalar ``s``, differentiable again: two backward passes (the
    gradient of ``uᵀF`` in ``s`` is linear in ``u``; its gradient in ``u`` is ``∂F/∂s``)."""
    u = torch.zeros_like(F, requires_grad=True)
    (g,) = torch.autograd.grad(F, s, grad_outputs=u, create_graph=True, allow_unused=True)
    if g is None:
        return torch.zeros_like(F)
    (J,) = torch.autograd.grad(g, u, create_graph=True, allow_unused=True)
    return torch.zeros_like(F) if J is None else J
