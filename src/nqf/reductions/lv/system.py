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

import dataclasses
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from scipy.integrate import solve_ivp

from ..._validation import as_tensor
from ...errors import DivergenceError, InvalidParameterError, NonFiniteError, ShapeError
from .final import FinalState, Plateaus
from .logistic import LogisticSolutions
from .solution import LVSolution, _np, _t, switch_times

__all__ = ["LotkaVolterra", "LVSolution", "switch_times", "Plateaus"]

BAND_MAX = 32  # widest band of a sparse C given to LSODA as a banded Jacobian


class LotkaVolterra(LogisticSolutions, FinalState):
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
            raise InvalidParameterError(f"`beta` and `C`: mode {k} has β_k = {b[k]:.3e} > 0 but C_kk = {diag[k]:.3e}; "
                             "the loss is unbounded below (a growing mode with no self-interaction)")
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
                raise ShapeError(f"`factor` must be (A, b) with A of shape (m, {K}) and b of shape (m,); "
                                 f"found {A.shape} and {bb.shape}")
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
                raise InvalidParameterError(f"`C` must be positive semi-definite; found smallest eigenvalue {lam:.3e} "
                                 f"(largest diagonal entry {scale:.3e})") from None
        C = self._sparse
        assert C is not None  # exactly one of _dense and _sparse is set
        if self.is_diagonal:
            if d.min() < -tol * scale:
                raise InvalidParameterError(
                    f"`C` must be positive semi-definite; found a diagonal entry {d.min():.3e} < 0")
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
                "`z0` must have at least one positive entry; found all zeros (nothing can grow)")
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
        zf = self._final if self._final is not None else self._compute_final()
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

    # ------------------------------------------------------------ GD map
    def gd(self, eta: float, steps: int, *, record_every: int = 1) -> LVSolution:
        r"""Exact discrete gradient descent: ``z ← (1 − 2η g)² z``, ``g = C z − β``.

        This is ``M ← (I − 2ηG) M (I − 2ηG)`` restricted to the shared eigenbasis,
        exact for any ``η`` (docs/theory.md §3.1, §4.1).  Time ``t = η · steps``.

        Parameters
        ----------
        eta : float > 0
        steps : int ≥ 0
        record_every : int ≥ 1
            Store every ``record_every``-th state (the last one is always stored).

        Returns
        -------
        LVSolution
            ``method="gd"``.

        Raises
        ------
        DivergenceError
            When ``z`` becomes non-finite (step too large).
        """
        eta = float(eta)
        if not (np.isfinite(eta) and eta > 0):
            raise InvalidParameterError(f"`eta` must be a finite positive step size; found {eta}")
        steps, record_every = int(steps), int(record_every)
        if steps < 0 or record_every < 1:
            raise InvalidParameterError(f"`steps` must be ≥ 0 and `record_every` ≥ 1; found {steps}, {record_every}")
        z = self._z0.copy()
        ts, zs = [0.0], [z.copy()]
        with np.errstate(over="ignore", invalid="ignore"):
            for s in range(1, steps + 1):
                g = self._matvec(z) - self._beta
                z = (1.0 - 2.0 * eta * g) ** 2 * z
                if s % record_every == 0 or s == steps:
                    if not np.isfinite(z).all():
                        raise DivergenceError(f"GD diverged at step {s} (t = {s * eta:.4g}); reduce `eta` "
                                              f"(stability needs η · λ_max(C) · max z ≲ 1)")
                    ts.append(s * eta)
                    zs.append(z.copy())
        with np.errstate(divide="ignore"):
            lz = np.log(np.array(zs))
        return LVSolution(_t(ts), _t(lz), self, "gd", True, "", {"steps": steps})

    # ---------------------------------------------------------- log flow
    def flow(self, t, *, n_points: int = 2001, method: str = "auto", rtol: float = 1e-10,
             atol: float = 1e-10, dense_output: bool = True) -> LVSolution:
        r"""Gradient flow in log coordinates with an implicit stiff integrator.

        Integrates ``u = ln z``, ``du_k/dt = 4(β_k − (C e^u)_k)``, with the analytic Jacobian
        ``∂u̇/∂u = −4 C diag(e^u)`` (sparse when ``C`` is sparse), by
        :func:`scipy.integrate.solve_ivp` with an implicit method: ``"auto"`` (default) takes
        LSODA with the Jacobian in banded form when ``C`` is sparse with a narrow band
        (bandwidth ≤ ``BAND_MAX``, e.g. tridiagonal: ``O(K)`` per step), BDF with the sparse
        Jacobian (real sparse LU) for other sparse ``C``, and Radau for dense ``C``.  Starting
        values ``u(0) = ln z(0)`` are finite for any positive float64 (``ln 1e-300 ≈ −690.8``),
        and ``z = e^u`` never overflows along the exact solution (``z`` stays bounded by the
        loss); trial Newton iterates are capped at ``z ≤ 1e3 · max(1, z∞, z(0))`` so that a
        rejected overshooting step cannot produce inf/NaN.  Explicit integrators fail
        here (the system is stiff once modes saturate).  Modes with ``z(0) = 0`` stay at 0 and
        are not integrated.

        Parameters
        ----------
        t : float or array_like of shape (T,)
            Final time (then ``n_points`` output times: a union of a linear and a
            logarithmic grid on ``[0, t]``), or increasing output times starting at 0.
        n_points : int
        method : {"auto", "Radau", "BDF", "LSODA"}
        rtol, atol : float
            Integrator tolerances on ``u``.
        dense_output : bool
            Keep the interpolant (used to refine :meth:`LVSolution.switch_times`).

        Returns
        -------
        LVSolution
            ``success``/``message`` report integrator failure instead of raising.
        """
        if method not in ("auto", "Radau", "BDF", "LSODA"):
            raise InvalidParameterError(f"`method` must be one of 'auto', 'Radau', 'BDF', 'LSODA' (implicit, stiff); "
                             f"found {method!r}")
        tt = _np("t", t, (0, 1))
        if tt.ndim == 0:
            T = float(tt)
            if not T > 0:
                raise InvalidParameterError(f"`t` (final time) must be > 0; found {T}")
            n = max(int(n_points), 4)
            tt = np.unique(np.concatenate([[0.0], np.linspace(0, T, n // 2),
                                           np.geomspace(T * 1e-6, T, n - n // 2)]))
        if tt[0] != 0 or np.any(np.diff(tt) <= 0):
            raise InvalidParameterError("`t` must be increasing and start at 0")
        mask = self._z0 > 0
        idx = np.flatnonzero(mask)
        b = self._beta[idx]
        lband = uband = 0
        coo = None
        if self._dense is not None:
            Cm = self._dense[np.ix_(idx, idx)]
        else:
            assert self._sparse is not None  # exactly one of _dense and _sparse is set
            Cm = self._sparse[idx][:, idx].tocsc()
            coo = Cm.tocoo()
            lband = int(max(0, (coo.row - coo.col).max(initial=0)))
            uband = int(max(0, (coo.col - coo.row).max(initial=0)))
        sparse = coo is not None

        # Trial Newton iterates of a large implicit step can overshoot far beyond any state the
        # flow visits; capping z there keeps f finite (no inf − inf = NaN in the error estimate),
        # so the step is rejected and shrunk normally.  The exact solution never reaches the cap:
        # the loss decreases along the flow, which bounds z (cap = 1e3 · max(1, z∞, z(0))).
        zcap = 1e3 * max(1.0, float(np.max(self._z0)), float(np.max(self.final_state().numpy())))
        ucap = float(np.log(zcap))

        def fun(_t_, u):
            return 4.0 * (b - Cm @ np.exp(np.minimum(u, ucap)))

        def jac(_t_, u):
            z = np.exp(np.minimum(u, ucap))
            if sparse:
                return (-4.0 * (Cm @ sp.diags(z))).tocsc()
            return -4.0 * Cm * z[None, :]

        extra: dict[str, Any] = {}
        jacobian = jac
        if method == "auto":
            method = ("LSODA" if max(lband, uband) <= BAND_MAX else "BDF") if sparse else "Radau"
        if method == "LSODA" and coo is not None:
            # LSODA's packed banded Jacobian: J[uband + i − j, j] = −4 C_ij z_j
            pos = uband + coo.row - coo.col

            def banded_jac(_t_, u):
                z = np.exp(np.minimum(u, ucap))
                J = np.zeros((lband + uband + 1, u.shape[0]))
                J[pos, coo.col] = -4.0 * coo.data * z[coo.col]
                return J

            jacobian = banded_jac
            extra = {"lband": lband, "uband": uband}

        u0 = np.log(self._z0[idx])
        with np.errstate(over="ignore", invalid="ignore"):  # rejected Newton trials inside scipy
            sol = solve_ivp(fun, (0.0, float(tt[-1])), u0, method=method, t_eval=tt, jac=jacobian, rtol=rtol,
                            atol=atol, dense_output=dense_output, **extra)
        lz = np.full((sol.t.shape[0], self.K), -np.inf)
        lz[:, idx] = sol.y.T
        stats = {"nfev": sol.nfev, "njev": sol.njev, "nlu": sol.nlu, "method": method}
        return LVSolution(_t(sol.t), _t(lz), self, method, bool(sol.success), sol.message, stats,
                          sol.sol if dense_output else None, mask)

    # -------------------------------------------------------------- limit
    def limit(self, eps: float | None = None):
        """ε → 0 limit of this system (:func:`nqf.reductions.lv.limit`), with ``s_k(0) = ln z_k(0)/ln(1/ε)``.

        Parameters
        ----------
        eps : float in (0, 1), optional
            Reference scale; default ``max z(0)`` (so ``s(0) = −1`` when ``z(0) = ε``).
        """
        from .limit import limit

        if self._dense is None and not self.is_diagonal:
            raise InvalidParameterError("`limit` needs a dense `C`; convert with `C.toarray()`")
        eps = float(np.max(self._z0)) if eps is None else float(eps)
        if not 0 < eps < 1:
            raise InvalidParameterError(f"`eps` must lie in (0, 1); found {eps}")
        with np.errstate(divide="ignore"):
            s0 = np.log(self._z0) / (-np.log(eps))
        C = self._dense if self._dense is not None else np.diag(self._diag)
        return dataclasses.replace(limit(self._beta, C, s0, y2=self.y2), eps=eps)

