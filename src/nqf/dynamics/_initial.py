r"""The one parser of initial states: ``M(0)`` or ``W(0)`` given, or built at scale ``ε`` (docs/theory.md §0).

* :func:`initial_state` — validates an initial order parameter ``M0`` (``p × p``,
  symmetric positive semidefinite) or initial unit weights ``W0`` (``p × m``), or builds
  ``W0`` at scale ``ε`` with :func:`initial_weights` (or ``M0 = εI`` without a width).
  Used by :func:`~nqf.dynamics.simulate`, :func:`~nqf.dynamics.simulate_batched`,
  :func:`~nqf.dynamics.gradient_flow` and :func:`~nqf.dynamics.train_network`.
* :func:`initial_weights` — ``W(0) = √ε Qᵀ`` with ``Q`` (``m × p`` when ``m ≥ p``) having
  orthonormal columns, so ``M(0) = W Wᵀ = ε I`` and every unit starts non-zero.  **Width
  below p** (``m < p``): ``W(0) = √ε B`` with ``B`` (``p × m``) orthonormal columns spanning
  a uniformly random ``m``-dimensional subspace, so ``M(0) = ε Π`` with ``Π`` a random
  rank-``m`` orthogonal projector (the rank-deficient version of ``εI``).
* :func:`check_psd` — the symmetric-PSD test of an order parameter (or a batch of them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .._validation import as_tensor, check_shape, eps_value, int_param, one_of, tolerance
from ..errors import InvalidParameterError, InvalidTypeError, ShapeError

__all__ = ["initial_state", "initial_weights", "check_psd", "InitialState", "INITS"]

INITS = ("orthonormal", "gaussian")


def check_psd(name: str, M: torch.Tensor) -> torch.Tensor:
    """Raise unless ``M`` (``p × p``, or a batch ``B × p × p``) is symmetric positive semidefinite to
    round-off (``tolerance(dtype) · max|M|``); return its symmetric part."""
    batched = M.ndim == 3
    Mb = M if batched else M[None]
    if Mb.numel() == 0:
        return M
    lo, hi = torch.aminmax(Mb.flatten(1), dim=1)
    scale = torch.maximum(hi, -lo)  # max |M| without a temporary
    tol = tolerance(M.dtype) * scale.clamp(min=torch.finfo(M.dtype).tiny)
    run = (lambda b: f" (run {b})") if batched else (lambda b: "")
    if torch.equal(Mb, Mb.transpose(1, 2)):  # exactly symmetric (e.g. εI): its own symmetric part
        Mb = Mb.clone()
    else:
        asym = (Mb - Mb.transpose(1, 2)).abs().flatten(1).amax(1)
        if bool((asym > tol).any()):
            b = int(torch.argmax(asym / tol))
            raise InvalidParameterError(
                f"`{name}` must be symmetric{run(b)}; found max |M − Mᵀ| = {float(asym[b]):.3e} "
                f"(max |M| = {float(scale[b]):.3e})"
            )
        Mb = 0.5 * (Mb + Mb.transpose(1, 2))
    lam = _smallest_eigenvalues(Mb)
    bad = lam < -tol * Mb.shape[1]
    if bool(bad.any()):
        b = int(torch.nonzero(bad)[0])
        raise InvalidParameterError(
            f"`{name}` must be positive semidefinite (an order parameter W Wᵀ){run(b)}; found "
            f"smallest eigenvalue {float(lam[b]):.3e}"
        )
    return Mb if batched else Mb[0]


def _smallest_eigenvalues(Mb: torch.Tensor) -> torch.Tensor:
    """The smallest eigenvalue of each symmetric matrix of the batch ``Mb``: the smallest diagonal entry when
    every matrix is diagonal (``εI``: exact, no ``O(p³)`` decomposition), else from ``eigvalsh``."""
    diag = torch.diagonal(Mb, dim1=1, dim2=2)
    if int(torch.count_nonzero(Mb)) == int(torch.count_nonzero(diag)):
        return diag.amin(1)
    return torch.linalg.eigvalsh(Mb)[:, 0]


def initial_weights(
    p: int,
    width: int,
    eps: float,
    generator: torch.Generator | None = None,
    *,
    seed: int = 0,
    dtype=torch.float64,
    init: str = "orthonormal",
) -> torch.Tensor:
    """Unit weights ``W(0)`` (p × width) with ``M(0) = εI`` (``width ≥ p``) or ``ε Π`` (``width < p``).

    With ``init="gaussian"`` instead ``W(0) = √ε G / √m`` (``G`` standard Gaussian, the usual
    random initialisation): ``E[M(0)] = εI``, with fluctuations ``O(ε/√m)``.

    Parameters
    ----------
    p : int
        Unit dimension.
    width : int
        Number of units ``m``.
    eps : float
        Initial scale ``ε`` in (0, 1).
    generator : torch.Generator, optional
        Source of the random orthonormal frame (CPU); default a fresh one seeded with ``seed``.
    seed : int
        Seed of the frame when no ``generator`` is given.
    dtype : torch.dtype
    init : {"orthonormal", "gaussian"}

    Returns
    -------
    torch.Tensor, shape (p, width)
    """
    p = int_param("p", p, minimum=1)
    width = int_param("width", width, minimum=1)
    eps = eps_value(eps)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise InvalidTypeError(f"`generator` must be a torch.Generator; found {type(generator).__name__}")
    one_of("init", init, INITS)
    g = generator if generator is not None else torch.Generator().manual_seed(int(seed))
    if init == "gaussian":
        return (math.sqrt(eps) * torch.randn(p, width, dtype=torch.float64, generator=g) / math.sqrt(width)).to(dtype)
    if width >= p:
        Q, _ = torch.linalg.qr(torch.randn(width, p, generator=g, dtype=torch.float64))  # (m, p), QᵀQ = I
        W = Q.T
    else:
        B, _ = torch.linalg.qr(torch.randn(p, width, generator=g, dtype=torch.float64))  # (p, m), BᵀB = I
        W = B
    return (math.sqrt(eps) * W).to(dtype)


@dataclass(frozen=True)
class InitialState:
    """A validated initial state: exactly one of ``M0`` (p × p, symmetric PSD) and ``W0`` (p × m).

    ``M`` is the order parameter ``M(0)`` (``W0 W0ᵀ`` for weights), ``width`` the number of
    units ``m`` (``None`` for an order parameter)."""

    M0: torch.Tensor | None = None
    W0: torch.Tensor | None = None

    @property
    def width(self) -> int | None:
        return None if self.W0 is None else int(self.W0.shape[1])

    @property
    def M(self) -> torch.Tensor:
        if self.M0 is not None:
            return self.M0
        if self.W0 is None:
            raise InvalidParameterError("an InitialState holds `M0` or `W0`; found neither")
        return self.W0 @ self.W0.T

    def _given(self) -> tuple[str, torch.Tensor]:
        if self.W0 is not None:
            return "W0", self.W0
        if self.M0 is None:
            raise InvalidParameterError("an InitialState holds `M0` or `W0`; found neither")
        return "M0", self.M0

    def __repr__(self) -> str:
        which, t = self._given()
        return f"InitialState({which}={str(t.dtype).replace('torch.', '')}{list(t.shape)})"

    def to_dict(self) -> dict:
        which, t = self._given()
        return {"kind": which, "shape": list(t.shape), "width": self.width}


def initial_state(
    p: int,
    *,
    M0=None,
    W0=None,
    eps: float | None = None,
    width: int | None = None,
    seed: int = 0,
    generator: torch.Generator | None = None,
    dtype=torch.float64,
    device=None,
    zgz: bool = True,
    batched: bool = False,
) -> InitialState:
    r"""Parse (or build) the initial state of a run on ``p``-dimensional units.

    Exactly one of ``M0``, ``W0`` and ``eps`` is given:

    * ``M0`` (p × p): symmetric PSD to round-off (:func:`check_psd`); its symmetric part is kept.
      Refused when ``zgz`` is False: without the zero-gradient condition the dynamics close on
      ``(M, μ)`` and depend on the width (docs/theory.md §3).  With ``batched``, ``(B, p, p)``
      is accepted too (and a ``(p, p)`` stays as it is).
    * ``W0`` (p × m): any width ``m``, or exactly ``width`` when that is given.
    * ``eps``: ``W0 = initial_weights(p, width, eps, generator, seed=seed)`` when ``width`` is
      given, else ``M0 = ε I``.

    Parameters
    ----------
    p : int
    M0, W0 : array_like, optional
    eps : float, optional
        Initial scale in (0, 1).
    width : int, optional
        Number of units ``m``.
    seed, generator
        Randomness of the frame built from ``eps`` (:func:`initial_weights`).
    dtype, device
        Of the returned tensors.
    zgz : bool
        Whether the operator satisfies the zero-gradient condition.
    batched : bool
        Accept a batch of order parameters ``M0``.

    Returns
    -------
    InitialState

    Raises
    ------
    InvalidParameterError
        Both or neither of ``M0``/``W0`` (or ``eps`` with one of them), a non-symmetric or
        indefinite ``M0``, ``M0`` without ZGZ, ``eps`` outside (0, 1).
    ShapeError, NonFiniteError
        Bad shapes, NaN/inf entries.
    """
    given = [name for name, v in (("M0", M0), ("W0", W0), ("eps", eps)) if v is not None]
    if len(given) != 1:
        if eps is None:
            raise InvalidParameterError(
                "exactly one of `M0` (p×p order parameter) and `W0` (p×m weights) must be "
                "given; found " + ("both" if given else "neither")
            )
        raise InvalidParameterError(f"give `eps` (the initial scale) or one of `M0`/`W0`, not {' and '.join(given)}")
    if eps is not None:
        if width is None:
            M0 = eps_value(eps) * torch.eye(int_param("p", p, minimum=1), dtype=dtype)
        else:
            W0 = initial_weights(p, width, eps, generator, seed=seed, dtype=dtype)
    if W0 is not None:
        W0 = as_tensor("W0", W0, ndim=2, dtype=dtype, device=device)
        check_shape("W0", W0, (p, width))
        return InitialState(W0=W0)
    if not zgz:
        raise InvalidParameterError(
            "this operator has a linear/cross term (no zero-gradient condition): the dynamics "
            "close on (M, μ) and depend on the width m, so pass `W0` (p×m) instead of `M0`"
        )
    M0 = as_tensor("M0", M0, ndim=(2, 3) if batched else 2, dtype=dtype, device=device)
    if M0.shape[-2:] != (p, p):
        raise ShapeError(
            f"`M0` must have shape {'(B, p, p) or ' if batched else ''}({p}, {p}); found {tuple(M0.shape)}"
        )
    return InitialState(M0=check_psd("M0", M0))
