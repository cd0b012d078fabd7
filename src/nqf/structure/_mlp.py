r"""Two-layer MLP: ``f_c(x) = Σ_i a_{ic} σ(u_iᵀx [+ c_i])`` (hidden neurons as units).

Unit layout: ``w_i = (a_i ∈ R^C, u_i ∈ R^D [, c_i])``, ``p = C + D (+1)``.
Structure matrices (docs/theory.md §1)

.. math::

    A_c(x) = \frac{σ'(0)}{2}\begin{pmatrix} 0 & e_c x̃ᵀ \\ x̃ e_cᵀ & 0\end{pmatrix},
    \quad x̃ = x \text{ or } (x, 1) \text{ with a bias},

so ``Tr[M A_c(x)] = σ'(0) (M_{au} x̃)_c``: rank two per sample and output.
When ``σ(0) ≠ 0`` (sigmoid) the zero-gradient condition fails and the
operator carries the linear term ``b_c(x) = σ(0) e_c`` (on the readout block);
``B = 0`` because the module is additive over units.

The operator stores only ``X`` (no ``N × p × p`` array): ``op(M)`` and
``op.adjoint(R)`` cost ``O(N C D)`` time and ``O(N C)`` extra memory.
"""

from __future__ import annotations

import torch

from .._validation import as_tensor, positive_int
from ..errors import ShapeError
from ._activations import get_activation
from ._bilinear import BilinearStructure, OneHotKronKernel

__all__ = ["mlp"]


def mlp(X, activation="tanh", bias: bool = False, n_outputs: int = 1, *, dtype=None) -> BilinearStructure:
    """Structure operator of a two-layer MLP on inputs ``X``.

    Parameters
    ----------
    X : array_like, shape (N, D)
        Inputs.
    activation : str or callable
        ``"tanh"``, ``"sin"``, ``"erf"``, ``"gelu"``, ``"softplus-centred"``,
        ``"sigmoid"``, ``"linear"`` or a smooth elementwise callable.
    bias : bool
        Hidden biases ``c_i`` (part of each unit; the input gets a constant 1).
    n_outputs : int
        Number of outputs ``C`` (readout ``a_i ∈ R^C``).
    dtype : torch.dtype, optional
        Default: ``X``'s floating dtype, or float64.

    Returns
    -------
    BilinearStructure
        ``p = C + D (+1)``; blocks ``left = a``, ``right = (u, c)``.
    """
    X = as_tensor("X", X, ndim=2, dtype=dtype)
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ShapeError(f"`X` must have shape (N, D) with N, D ≥ 1; found {tuple(X.shape)}")
    n_outputs = positive_int("n_outputs", n_outputs)
    act = get_activation(activation)
    C, (N, D) = int(n_outputs), X.shape
    p = C + D + (1 if bias else 0)
    kernel = OneHotKronKernel(X[:, None, :], C, scale=act.s1, append_one=bias)
    layout = f"w = (a ∈ R^{C} readout [0:{C}], u ∈ R^{D} input weights [{C}:{C + D}]" + (
        f", c bias [{p - 1}])" if bias else ")"
    )
    op = BilinearStructure(p, slice(0, C), slice(C, p), kernel, layout=layout)
    if not act.zgz:
        b = torch.zeros(1, C, p, dtype=X.dtype, device=X.device)
        b[0, torch.arange(C), torch.arange(C)] = act.s0
        op.linear = b.expand(N, C, p)
    return op
