r"""The Lotka–Volterra system of commuting data and its solvers (docs/theory.md §4.1–§4.3).

With commuting structure matrices ``A_n = U diag(a_n) Uᵀ`` and ``M(0) = U diag(z(0)) Uᵀ``,
MSE gradient descent on ``M = W Wᵀ`` stays diagonal in ``U`` and the diagonal ``z``
obeys

.. math::

    \frac{dz_k}{dt} = 4 z_k (β_k − (C z)_k), \qquad
    β = \frac1N Σ_n ỹ_n a_n, \quad C = \frac1N Σ_n a_n a_nᵀ,

with growth rates ``ζ = 4β`` and the loss

.. math::

    L(z) = ½ E[ỹ²] − βᵀz + ½ zᵀ C z, \qquad ỹ = y − f(0).

Conventions (docs/theory.md §0): ``L = (1/N) Σ_n ℓ_n``, ``ℓ = ½‖f − y‖²`` (summed over
output coordinates), GD ``W ← W − η∇_W L``, training time ``t = η · steps``.

Solvers (all on a :class:`LotkaVolterra`):

* :meth:`LotkaVolterra.logistic` — exact closed form when ``C`` is diagonal;
* :meth:`LotkaVolterra.gd` — the exact discrete GD map ``z ← (1 − 2ηg)² z``, ``g = Cz − β``;
* :meth:`LotkaVolterra.flow` — gradient flow in log coordinates ``u = ln z``,
  ``du/dt = 4(β − C e^u)``, integrated with an implicit stiff method (Radau or
  BDF) and the analytic Jacobian ``∂u̇/∂u = −4 C diag(z)``; valid for any
  ``z(0) > 0`` down to the smallest float64 (``ln 1e-300 ≈ −690.8`` is finite);
* :meth:`LotkaVolterra.limit` — the ε → 0 saddle-to-saddle limit (:func:`nqf.reductions.lv.limit`);
* :meth:`LotkaVolterra.final_state` — the minimiser of ``L`` over ``z ≥ 0``.
"""

import numpy as np
import scipy.sparse as sp
import torch

from ..._validation import as_tensor
from ...errors import InvalidParameterError, NonFiniteError, ShapeError
from . import _final as final
from ._final import Plateaus
from ._methods import LotkaVolterraSolvers
from ._solution import LVSolution, _np, _t, switch_times

__all__ = ["LotkaVolterra", "LVSolution", "switch_times", "Plateaus"]


class LotkaVolterra(LotkaVolterraSolvers):
    r"""Generalised Lotka–Volterra system ``dz/dt = 4 z ⊙ (β − C z)`` of commuting data.

    Usually built by :func:`nqf.reductions.lv.reduce` from a structure operator; can also be
    built directly from ``(β, C, z(0))`` for synthetic systems.

    Parameters
    ----------
    beta : array_like, shape (K,)
        ``β_k = (1/N) Σ_n ỹ_n a_nk``.
    C : array_like of shape (K, K), array_like of shape (K,) (the diagonal of a diagonal ``C``), or scipy.sparse matrix
        Symmetric positive semi-definite interaction matrix ``(1/N) Σ_n a_n a_nᵀ``.
    z0 : float or array_like of shape (K,)
        Initial state ``z(0) ≥ 0`` (a scalar ``ε`` means ``z_k(0) = ε`` and must be > 0;
        modes with ``z_k(0) = 0`` stay at 0 for ever).
    y2 : float, optional
        ``E[‖ỹ‖²] = (1/N) Σ_n ‖y_n − f_n(0)‖²``.  When omitted, :meth:`loss` returns the
        excess loss ``L(z) − min_{z ≥ 0} L``.
    basis : array_like, shape (p, K), optional
        Shared eigenvectors ``U`` of the kept modes (set by :func:`reduce`).
    factor : tuple (A, b), optional
        Least-squares form ``L = ½‖A z − b‖²`` with ``A`` of shape (m, K) and ``b`` (m,)
        (set by :func:`reduce`: ``A = a/√N``, ``b = ỹ/√N``); used for a stable loss and
        for the final state by NNLS.
    rest : array_like, shape (p, p), optional
        Part of ``M(0)`` on the discarded (signal-free) directions; constant in time.
    psd_tol : float
        Relative tolerance of the positive semi-definiteness check of ``C``.

    Attributes
    ----------
    beta, zeta, z0 : torch.Tensor, shape (K,)
        ``ζ = 4β`` are the growth rates.
    C : torch.Tensor of shape (K, K), or scipy.sparse.csr_matrix when given sparse or as a diagonal
    basis : torch.Tensor of shape (p, K) or None
    y2 : float or None
    K : int
    is_diagonal : bool
        True when every off-diagonal ``|C_kl| ≤ 1e-12 √(C_kk C_ll)`` (round-off couplings, as
        produced by :func:`reduce` on orthogonal features, are ignored by the logistic solver).
    commutation_defect : float or None
        The measured non-commutation ``δ`` of the basis, set by :func:`reduce` (None otherwise).

    Raises
    ------
    NonFiniteError, ShapeError
        NaN/inf or wrong shapes.
    ValueError
        ``C`` not symmetric, not positive semi-definite, ``z0`` negative (or a scalar ``ε ≤ 0``),
        or a mode with ``β_k > 0`` and ``C_kk = 0`` (loss unbounded below).
    """

    commutation_defect: float | None = None

    def __init__(self, beta, C, z0, *, y2=None, basis=None, factor=None, rest=None, psd_tol: float = 1e-10):
        b = _np("beta", beta, 1)
        K = b.shape[0]
        if K == 0:
            raise ShapeError("`beta` must have at least one mode; found shape (0,)")
        self.K = K
        self._beta = b
        self._sparse = None
        self._dense = None
        if sp.issparse(C):
            Cs = sp.csr_matrix(C, dtype=np.float64)
            if Cs.shape != (K, K):
                raise ShapeError(f"`C` must have shape ({K}, {K}); found {Cs.shape}")
            if not np.isfinite(Cs.data).all():
                raise NonFiniteError("`C` must be finite; found NaN/inf entries")
            self._sparse = Cs
            diag = Cs.diagonal()
            offd = Cs - sp.diags(diag)
            offd.eliminate_zeros()
            self.is_diagonal = offd.nnz == 0
        else:
            Cn = _np("C", C, (1, 2))
            if Cn.ndim == 1:
                if Cn.shape != (K,):
                    raise ShapeError(f"`C` given as a diagonal must have shape ({K},); found {Cn.shape}")
                self._sparse = sp.diags(Cn).tocsr()
                diag = Cn
                self.is_diagonal = True
            else:
                if Cn.shape != (K, K):
                    raise ShapeError(f"`C` must have shape ({K}, {K}); found {Cn.shape}")
                self._dense = Cn
                diag = np.diag(Cn).copy()
                off = np.abs(Cn - np.diag(diag))
                rs = np.sqrt(np.maximum(diag, 0.0))
                self.is_diagonal = bool(np.all(off <= 1e-12 * np.maximum(np.outer(rs, rs), 1e-300)))
        self._diag = diag
        self._check_psd(psd_tol)
        bad = (diag <= 0) & (b > 0)
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise InvalidParameterError(
                f"`beta` and `C`: mode {k} has β_k = {b[k]:.3e} > 0 but C_kk = {diag[k]:.3e}; "
                "the loss is unbounded below (a growing mode with no self-interaction)"
            )
        self._z0 = self._check_z0(z0)
        self.y2 = None if y2 is None else float(y2)
        if self.y2 is not None and not np.isfinite(self.y2):
            raise NonFiniteError(f"`y2` must be finite; found {y2}")
        self.basis = None if basis is None else as_tensor("basis", basis, ndim=2, dtype=torch.float64)
        if self.basis is not None and self.basis.shape[1] != K:
            raise ShapeError(f"`basis` must have shape (p, {K}); found {tuple(self.basis.shape)}")
        self.rest = None if rest is None else as_tensor("rest", rest, ndim=2, dtype=torch.float64)
        self._factor = None
        if factor is not None:
            A = _np("factor[0]", factor[0], 2)
            bb = _np("factor[1]", factor[1], 1)
            if A.shape[1] != K or A.shape[0] != bb.shape[0]:
                raise ShapeError(
                    f"`factor` must be (A, b) with A of shape (m, {K}) and b of shape (m,); "
                    f"found {A.shape} and {bb.shape}"
                )
            self._factor = (A, bb)
        self._final = None

    # ------------------------------------------------------------ validation
    def _check_psd(self, tol: float):
        d = self._diag
        scale = max(float(np.max(np.abs(d))), 1e-300)
        if self._dense is not None:
            C = self._dense
            asym = float(np.max(np.abs(C - C.T)))
            if asym > 1e-10 * max(float(np.max(np.abs(C))), 1e-300):
                raise InvalidParameterError(f"`C` must be symmetric; found max |C − Cᵀ| = {asym:.3e}")
            try:
                np.linalg.cholesky(C + tol * scale * np.eye(self.K))
                return
            except np.linalg.LinAlgError:
                lam = float(np.linalg.eigvalsh(0.5 * (C + C.T))[0])
                raise InvalidParameterError(
                    f"`C` must be positive semi-definite; found smallest eigenvalue {lam:.3e} "
                    f"(largest diagonal entry {scale:.3e})"
                ) from None
        C = self._sparse
        assert C is not None  # exactly one of _dense and _sparse is set
        if self.is_diagonal:
            if d.min() < -tol * scale:
                raise InvalidParameterError(
                    f"`C` must be positive semi-definite; found a diagonal entry {d.min():.3e} < 0"
                )
            return
        asym = abs(C - C.T).max()
        if asym > 1e-10 * max(abs(C).max(), 1e-300):
            raise InvalidParameterError(f"`C` must be symmetric; found max |C − Cᵀ| = {asym:.3e}")
        radius = np.asarray(abs(C).sum(axis=1)).ravel() - np.abs(d)
        if np.all(d - radius >= -tol * scale):
            return  # Gershgorin: diagonally dominant with a non-negative diagonal ⇒ PSD
        from scipy.sparse.linalg import eigsh

        # scipy's unannotated `tol=0` default makes pyright infer an int parameter
        lam = float(eigsh(C, k=1, which="SA", return_eigenvectors=False, tol=1e-8)[0])  # pyright: ignore[reportArgumentType]
        if lam < -tol * scale * 10:
            raise InvalidParameterError(f"`C` must be positive semi-definite; found smallest eigenvalue {lam:.3e}")

    def _check_z0(self, z0) -> np.ndarray:
        z = _np("z0", z0, (0, 1))
        if z.ndim == 0:
            if not z > 0:
                raise InvalidParameterError(f"`z0` (the initial scale ε) must be > 0; found {float(z)}")
            return np.full(self.K, float(z))
        if z.shape != (self.K,):
            raise ShapeError(f"`z0` must be a scalar or have shape ({self.K},); found {z.shape}")
        if (z < 0).any():
            raise InvalidParameterError(f"`z0` must be ≥ 0 (z = diag of a PSD M(0)); found min {z.min():.3e}")
        if not (z > 0).any():
            raise InvalidParameterError(
                "`z0` must have at least one positive entry; found all zeros (nothing can grow)"
            )
        return z

    # ------------------------------------------------------------ attributes
    @property
    def beta(self) -> torch.Tensor:
        """``β``, shape (K,)."""
        return _t(self._beta)

    @property
    def zeta(self) -> torch.Tensor:
        """Growth rates ``ζ = 4β``, shape (K,)."""
        return _t(4.0 * self._beta)

    @property
    def z0(self) -> torch.Tensor:
        """Initial state ``z(0)``, shape (K,)."""
        return _t(self._z0)

    @property
    def C(self):
        """Interaction matrix: torch (K, K) when dense, else ``scipy.sparse.csr_matrix``."""
        return _t(self._dense) if self._dense is not None else self._sparse

    @property
    def C_diag(self) -> torch.Tensor:
        """Diagonal of ``C``, shape (K,)."""
        return _t(self._diag)

    def with_z0(self, z0) -> "LotkaVolterra":
        """The same system started from ``z0`` (scalar ``ε > 0`` or shape (K,))."""
        new = object.__new__(LotkaVolterra)
        new.__dict__.update(self.__dict__)
        new._z0 = self._check_z0(z0)
        new._final = None  # with singular C the selected final state depends on z(0)
        return new

    def __repr__(self) -> str:
        kind = "diagonal" if self.is_diagonal else ("sparse" if self._dense is None else "dense")
        return f"LotkaVolterra(K={self.K}, C={kind}, y2={self.y2})"

    # ----------------------------------------------------------- algebra
    def _matvec(self, z: np.ndarray) -> np.ndarray:
        """``C z`` for z of shape (K,) or (T, K) (rows)."""
        if self._dense is not None:
            return z @ self._dense
        return (self._sparse @ z.T).T if z.ndim == 2 else self._sparse @ z

    def gradient(self, z) -> torch.Tensor:
        """``g = C z − β`` (``∂L/∂z``), shape like ``z`` ((K,) or (T, K))."""
        zz = _np("z", z, (1, 2))
        return _t(self._matvec(zz) - self._beta)

    def _loss_parts(self):
        zf = self._final if self._final is not None else final.compute_final(self)
        self._final = zf
        g = self._matvec(zf) - self._beta
        if self._factor is not None:
            A, y = self._factor
            r = A @ zf - y
            Linf = 0.5 * float(r @ r)
        elif self.y2 is not None:
            Linf = 0.5 * self.y2 - float(self._beta @ zf) + 0.5 * float(zf @ self._matvec(zf))
        else:
            Linf = 0.0
        return zf, g, Linf

    def loss(self, z) -> torch.Tensor:
        r"""MSE loss ``L(z) = ½ E[‖ỹ‖²] − βᵀz + ½ zᵀCz``.

        Evaluated without cancellation as ``L(z∞) + g∞ᵀ(z − z∞) + ½ (z − z∞)ᵀ C (z − z∞)``
        (an identity for any reference point; ``z∞`` = :meth:`final_state`,
        ``g∞ = Cz∞ − β``), so the small excess near convergence keeps full relative
        precision.  ``L(z∞)`` is ``½‖Az∞ − b‖²`` with the factor of :func:`reduce`; when the
        system has neither a factor nor ``y2`` it is set to 0 (the result is the excess loss).

        Parameters
        ----------
        z : array_like, shape (K,) or (T, K)

        Returns
        -------
        torch.Tensor, shape () or (T,)
        """
        zz = _np("z", z, (1, 2))
        if zz.shape[-1] != self.K:
            raise ShapeError(f"`z` must have last dimension {self.K}; found {zz.shape}")
        zf, g, Linf = self._loss_parts()
        dz = zz - zf
        quad = np.sum(dz * self._matvec(dz), axis=-1)
        return _t(Linf + dz @ g + 0.5 * quad)

    def excess_loss(self, z) -> torch.Tensor:
        """``L(z) − L(z∞) ≥ 0``, shape () or (T,)."""
        zf, g, Linf = self._loss_parts()
        zz = _np("z", z, (1, 2))
        dz = zz - zf
        return _t(dz @ g + 0.5 * np.sum(dz * self._matvec(dz), axis=-1))

    def final_loss(self) -> float:
        """``min_{z ≥ 0} L(z)``."""
        return float(self._loss_parts()[2])

    def to_matrix(self, z) -> torch.Tensor:
        """Order parameter ``M = U diag(z) Uᵀ (+ the constant part of M(0) on discarded directions)``.

        Parameters
        ----------
        z : array_like, shape (K,)

        Returns
        -------
        torch.Tensor, shape (p, p)
        """
        if self.basis is None:
            raise InvalidParameterError("this system has no `basis` (it was not built by `nqf.reductions.lv.reduce`)")
        zz = as_tensor("z", z, ndim=1, dtype=torch.float64)
        M = (self.basis * zz) @ self.basis.T
        return M if self.rest is None else M + self.rest
