r"""Mixture of experts with a softmax gate, experts as units.

``f_c(x) = Σ_e g_e(x) a_{ec} σ(u_eᵀx)``, ``g = softmax_e(G_e·x)``, with unit
``w_e = (a_e ∈ R^C, u_e ∈ R^D, G_e ∈ R^D)`` (``p = C + 2D``; expert readout,
expert input weights, gate row).  Conventions (docs/theory.md §0): loss
``L = (1/N) Σ_n ℓ(f_n, y_n)``, GD ``W ← W − η∇_W L``, time ``t = η·steps``.

Expansion about ``W = 0``.  At zero the gate is uniform, and to first order
``g_e = 1/E + (1/E)(G_e·x − Ḡ·x) + O(G²)``, ``Ḡ = (1/E) Σ_e G_e``.  With
``σ(0) = 0``

.. math::

    f_c = \frac{σ'(0)}{E} Σ_e a_{ec}\, u_eᵀx
          + \underbrace{\frac{σ'(0)}{E} Σ_e (G_e − Ḡ)·x\; a_{ec}\, u_eᵀx
          + \frac{σ''(0)}{2E} Σ_e a_{ec} (u_eᵀx)^2}_{O(‖W‖^3)} + O(‖W‖^4),

so ``A_c(x) = σ'(0)/(2E) · [[0, e_c xᵀ, 0], [x e_cᵀ, 0, 0], [0, 0, 0]]`` — the MLP
form divided by ``E`` — and the gate rows do not enter ``A``.  The gate × expert
term is cubic and couples different experts (through ``Ḡ``), but only at third
order: the gradient and every cross-unit Hessian block vanish at ``W = 0`` (the
weak zero-gradient condition of docs/theory.md §1), although a gate row at
zero *does* get gradient once other experts are non-zero (the strong form
fails).  Truncation error: exact order 3 (the gate term is generically
non-zero even for odd ``σ`` such as tanh).

With ``σ(0) ≠ 0`` (sigmoid) the zero-gradient condition fails and the operator
carries

* the linear term ``b_c = (σ(0)/E) e_c`` on the ``a`` block;
* within-unit ``a``–``G`` curvature: ``A_c`` gains the block
  ``½ σ(0)(1/E − 1/E²) e_c xᵀ`` between ``a`` and ``G``;
* the cross-unit term ``B_c = ½ (−σ(0)/E²) [[0, ·, e_c xᵀ], …]`` between ``a`` and ``G``
  (from ``∂g_e/∂G_{e'} = (δ_{ee'}/E − 1/E²) x`` at zero).

Only ``X`` (``N × D``) is stored, never ``N × p × p``.
"""

from __future__ import annotations

import torch

from .._validation import as_tensor, positive_int
from ..errors import ShapeError
from ._activations import get_activation
from ._bilinear import BilinearStructure, OneHotKronKernel

__all__ = ["mixture_of_experts"]


def mixture_of_experts(X, n_experts: int, activation="tanh", n_outputs: int = 1, *, dtype=None) -> BilinearStructure:
    r"""Structure operator of a softmax-gated mixture of experts (experts as units).

    .. math:: \mathrm{Tr}[M A_c(x)] = \frac{σ'(0)}{E} (M_{au} x)_c
              \;\big[+\, σ(0)\,\tfrac{1}{E}(1 − \tfrac{1}{E}) (M_{aG} x)_c\big]

    Parameters
    ----------
    X : array_like, shape (N, D)
        Inputs.
    n_experts : int
        ``E``.  ``A`` depends on it (the gate is ``1/E`` at zero), unlike a width.
    activation : str or callable
        Smooth expert activation (see :func:`nqf.structure.get_activation`);
        ReLU and other kinks raise :class:`~nqf.errors.NormalFormError`.
    n_outputs : int
        ``C``.
    dtype : torch.dtype, optional

    Returns
    -------
    BilinearStructure
        ``p = C + 2D``, layout ``(a [0:C], u [C:C+D], G [C+D:C+2D])``; left block
        ``a``, right block ``u`` (or ``(u, G)`` when ``σ(0) ≠ 0``).  ``linear``
        and ``cross`` are set when ``σ(0) ≠ 0``.
    """
    X = as_tensor("X", X, ndim=2, dtype=dtype)
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ShapeError(f"`X` must have shape (N, D) with N, D ≥ 1; found {tuple(X.shape)}")
    E = positive_int("n_experts", n_experts)
    C = positive_int("n_outputs", n_outputs)
    act = get_activation(activation)
    N, D = X.shape
    p = C + 2 * D
    layout = (
        f"expert w_e = (a ∈ R^{C} readout [0:{C}], u ∈ R^{D} expert input weights [{C}:{C + D}], "
        f"G ∈ R^{D} gate row [{C + D}:{p}])"
    )
    if act.zgz:
        kernel = OneHotKronKernel(X[:, None, :], C, scale=act.s1 / E)
        return BilinearStructure(p, slice(0, C), slice(C, C + D), kernel, layout=layout)
    # σ(0) ≠ 0: a–G curvature inside a unit, a linear term and a cross-unit term.
    F = torch.cat([(act.s1 / E) * X, (act.s0 * (1.0 / E - 1.0 / E**2)) * X], dim=1)[:, None, :]
    op = BilinearStructure(p, slice(0, C), slice(C, p), OneHotKronKernel(F, C), layout=layout)
    b = torch.zeros(1, C, p, dtype=X.dtype, device=X.device)
    b[0, torch.arange(C), torch.arange(C)] = act.s0 / E
    op.linear = b.expand(N, C, p)
    op.cross = BilinearStructure(
        p, slice(0, C), slice(C + D, p), OneHotKronKernel(X[:, None, :], C, scale=-act.s0 / E**2), layout=layout
    )
    return op
