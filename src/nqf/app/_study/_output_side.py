r"""Parameters outside the units that move the output at zero units (a readout bias): the fast part of training.

In the user's own loop every parameter trains.  Those that act only *through* the units (an embedding
before them, the hidden layer's norm) have gradients proportional to the units' size: on a plateau they
barely move, and the NQF holds them at their values.  Those that move the output when every unit is
zero — the readout bias, whose output is ``f(0) = b`` — have gradients of order one: from the first steps
they fit the part of the residual they can reach, and keep fitting it while the units grow.  To leading order
the units then see the loss of the residual *outside* that reach,
``L = (1/N) Σ ½‖(I − P)(f_NQF − y + f(0))‖²``, ``P`` the orthogonal projection (over the ``N × C`` outputs) onto
the span of the Jacobian ``J = ∂f(0)/∂θ_out`` of those parameters.  Their own relaxation rates are the
non-zero eigenvalues of ``JᵀJ/N`` (gradient flow of ``L`` in ``θ_out``); the fit is fast when the slowest of
them is well above the first escape rate.

A readout bias gives ``P`` = the mean over the samples, output by output (:attr:`OutputSide.per_output_mean`):
for a whole two-layer MLP this is exact on the moment rows of the centred inputs (:func:`centred_mlp_rows`).
Anything else is applied to the operator itself (:class:`nqf.structure.OutputProjection`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ...errors import NormalFormError

__all__ = ["OutputSide", "output_side", "centred_mlp_rows", "MAX_OUTPUT_PARAMS"]

#: Most parameters outside the units that may move the output at zero units (their Jacobian is dense).
MAX_OUTPUT_PARAMS = 4096


@dataclass(frozen=True)
class OutputSide:
    """The output-side parameters of a module at zero units (module docstring).

    ``names``: the trainable parameters outside the units with a non-zero ``∂f(0)/∂θ``; ``basis``: orthonormal
    columns of the span of their Jacobian over the ``N·C`` outputs (``(N·C, r)``, ``r = 0`` when none);
    ``slowest_rate``: the smallest non-zero eigenvalue of ``JᵀJ/N`` (``inf`` when none);
    ``per_output_mean``: ``P`` is the per-output mean over the samples (a full readout bias)."""

    names: tuple
    basis: torch.Tensor
    slowest_rate: float
    per_output_mean: bool

    def project_out(self, R: torch.Tensor) -> torch.Tensor:
        """``(I − P) R`` for ``R`` of shape ``(N, C)``."""
        from ...structure import project_outputs

        return project_outputs(R, self.basis)


def _outside(module, found) -> list:
    unit_params = {sl.param for sl in found.layout.slices}
    return [(n, p) for n, p in module.named_parameters() if p.requires_grad and n not in unit_params]


def output_side(module, found, X: torch.Tensor) -> OutputSide:
    """:class:`OutputSide` of ``module`` (float64, its units at zero on a copy) on inputs ``X``.

    Raises
    ------
    NormalFormError
        More than :data:`MAX_OUTPUT_PARAMS` such parameters (their Jacobian would be dense and large).
    """
    import copy

    m = copy.deepcopy(module).eval()
    found.layout.set_W(m, torch.zeros_like(found.layout.get_W(m)))
    outside = _outside(m, found)
    if not outside:
        return _none()
    for _, p in outside:
        p.grad = None
    out = m(X).reshape(X.shape[0], -1)
    probe = torch.randn(out.shape, dtype=out.dtype, generator=torch.Generator().manual_seed(0))
    (out * probe).sum().backward()
    live = [(n, p) for n, p in outside if p.grad is not None and bool(p.grad.abs().max() > 0)]
    if not live:
        return _none()
    size = sum(int(p.numel()) for _, p in live)
    if size > MAX_OUTPUT_PARAMS:
        raise NormalFormError(
            f"`model`: {size} parameters outside the units move the output when every unit is zero "
            f"({', '.join(n for n, _ in live)}); at most {MAX_OUTPUT_PARAMS} are modelled (their fast fit needs "
            "their dense Jacobian)"
        )
    J = _jacobian(m, X, [p for _, p in live])  # (N·C, size)
    return _from_jacobian(tuple(n for n, _ in live), J, out.shape)


def _none() -> OutputSide:
    return OutputSide((), torch.zeros(0, 0, dtype=torch.float64), math.inf, False)


def _jacobian(m, X: torch.Tensor, params: list) -> torch.Tensor:
    """``J = ∂ vec f / ∂θ`` of shape ``(N·C, size)``: one double-backward pass per parameter entry (``J e_j`` as
    the derivative in ``u`` of ``⟨Jᵀu, e_j⟩``), plain autograd (no torch.func: see :mod:`nqf.app._study._operators`)."""
    with torch.enable_grad():
        out = m(X).reshape(-1)
        u = torch.zeros_like(out, requires_grad=True)
        grads = torch.autograd.grad(out, params, grad_outputs=u, create_graph=True, allow_unused=True)
        flat = torch.cat(
            [(torch.zeros_like(p) if g is None else g).reshape(-1) for g, p in zip(grads, params, strict=True)]
        )
        cols = []
        for j in range(flat.numel()):
            (col,) = torch.autograd.grad(flat[j], u, retain_graph=True, allow_unused=True)
            cols.append(torch.zeros_like(out) if col is None else col.detach())
    return torch.stack(cols, 1)


def _from_jacobian(names: tuple, J: torch.Tensor, shape) -> OutputSide:
    N, C = shape
    U, s, _ = torch.linalg.svd(J, full_matrices=False)
    tol = float(s.max()) * max(J.shape) * torch.finfo(J.dtype).eps if s.numel() else 0.0
    keep = s > tol
    basis = U[:, keep]
    slowest = float((s[keep].min() ** 2) / N) if bool(keep.any()) else math.inf
    # per-output mean: the span is that of the C constant-per-output vectors
    const = torch.zeros(N * C, C, dtype=J.dtype)
    for c in range(C):
        const[c::C, c] = 1.0 / math.sqrt(N)
    same = basis.shape[1] == C and bool(torch.allclose(basis @ (basis.T @ const), const, atol=1e-9))
    return OutputSide(names, basis, slowest, same)


def centred_mlp_rows(module, found, X: torch.Tensor, Y: torch.Tensor, side: OutputSide):
    """``(op, Ỹ, shift)``: the NQF of a whole two-layer MLP with its readout bias fitted, on moment rows, or None.

    With ``P`` the per-output mean (:attr:`OutputSide.per_output_mean`), the NQF's output ``σ'(0) M_{a,φ} φ(x)``
    (``φ(x) = s·[x, 1]``, ``s`` the folded batch-norm scale) loses its mean over the samples: it becomes the
    bias-free MLP's on ``φ(x) − φ̄`` (the ones column vanishes), whose loss depends on the data only through
    the moments (:mod:`nqf.app._study._moments`).  None where that does not apply (another model, or a projection
    that is not the per-output mean, or ``N ≤`` the feature count)."""
    from ...structure import mlp
    from ._moments import compressible_inputs, moment_rows
    from ._operators import activation_name

    act = activation_name(found.activation)
    if not (side.per_output_mean or not side.names) or act is None or found.kind != "mlp-hidden":
        return None
    if not (found.is_whole_mlp and len(found.names) == 2 and compressible_inputs(X)):
        return None
    first, second = (module.get_submodule(n) for n in found.names)
    if not (isinstance(first, torch.nn.Linear) and isinstance(second, torch.nn.Linear)):
        return None
    F = torch.cat([X, torch.ones(X.shape[0], 1, dtype=X.dtype)], 1) if first.bias is not None else X
    F = found.pre_scale * F
    if side.per_output_mean:
        F, Y = F - F.mean(0), Y - Y.mean(0)
    if F.shape[0] <= F.shape[1]:
        return None
    Fc, Yc, shift = moment_rows(F, Y)
    return mlp(Fc, act, bias=False, n_outputs=second.out_features), Yc, shift
