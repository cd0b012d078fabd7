"""Reference copy of the ε → 0 limit before the incremental inverse-Cholesky update (benchmark only).

The algorithm of ``nqf.reductions.lv.limit`` / ``nqf.reductions.lv._qp.ActiveSetQP`` as of commit
3d0bf0f (explicit inverse of ``C_PP`` updated by bordering, full ``β − Cz`` recomputed after every
event), kept verbatim so that ``bench_lv.py`` measures old and new in one run and compares their
events.  Not part of the package; do not import it from ``src``.
"""

from __future__ import annotations

import numpy as np
import torch

from nqf._validation import as_tensor
from nqf.errors import InvalidParameterError, ShapeError
from nqf.reductions.lv._limit import LimitEvent, LimitResult
from nqf.reductions.lv._qp import UnboundedError


class ReferenceActiveSetQP:
    """Incremental active-set state for ``min_{z ≥ 0} −βᵀz + ½zᵀCz``.

    The inverse ``G = C_PP⁻¹`` of the passive block is kept explicitly and updated by
    bordering (adding a mode: a rank-one update, ``O(|P|²)``) and by the Schur complement
    (removing a mode: ``G' = G_{−j,−j} − g_j g_jᵀ / G_jj``, ``O(|P|²)``).  Round-off
    drift is monitored through the optimality residual ``(β − Cz)_P`` (which must vanish)
    and removed by recomputing ``G`` from ``C_PP`` when it exceeds ``1e-10`` relative.

    Parameters
    ----------
    C : numpy.ndarray, shape (K, K)
        Symmetric positive semi-definite interaction matrix.
    beta : numpy.ndarray, shape (K,)
        Linear coefficients.
    rtol : float
        Relative pivot tolerance: a Schur complement below ``rtol · C_kk`` is treated as
        zero (the new column is in the span of the passive set).

    Attributes
    ----------
    z : numpy.ndarray, shape (K,)
        Current feasible point; optimal over its support after each :meth:`add`.
    passive : list of int
        The support ``P`` of ``z`` (order of the rows of ``G``).
    in_p : numpy.ndarray of bool, shape (K,)
    """

    def __init__(self, C: np.ndarray, beta: np.ndarray, rtol: float = 1e-11):
        self.C = np.ascontiguousarray(C)
        self.beta = beta
        self.K = beta.shape[0]
        self.rtol = rtol
        self.z = np.zeros(self.K)
        self.passive: list[int] = []
        self.in_p = np.zeros(self.K, dtype=bool)
        self._buf = np.zeros((min(64, self.K), min(64, self.K)))
        self._grad = None
        self._optimal = True  # z is the optimum restricted to its support
        self._last = None
        self.refreshes = 0

    # --------------------------------------------------------- inverse of C_PP
    @property
    def _m(self) -> int:
        return len(self.passive)

    def _G(self) -> np.ndarray:
        m = self._m
        return self._buf[:m, :m]

    def _grow(self):
        m = self._m
        if m + 1 > self._buf.shape[0]:
            cap = min(self.K, max(2 * self._buf.shape[0], m + 1))
            new = np.zeros((cap, cap))
            new[:m, :m] = self._buf[:m, :m]
            self._buf = new

    def _try_append(self, k: int) -> bool:
        """Border ``G`` with mode ``k``; False if the Schur complement vanishes."""
        P = self.passive
        ckk = self.C[k, k]
        if P:
            c = self.C[k, P]
            u = self._G() @ c
            piv = ckk - c @ u
        else:
            u = np.zeros(0)
            piv = ckk
        if not piv > self.rtol * max(ckk, 1e-300):
            return False
        self._last = (u, piv)
        self._grow()
        m = self._m
        B = self._buf
        if m:
            B[:m, :m] += np.outer(u / piv, u)
            B[m, :m] = -u / piv
            B[:m, m] = -u / piv
        B[m, m] = 1.0 / piv
        P.append(k)
        self.in_p[k] = True
        return True

    def _delete(self, pos: int):
        """Remove the mode at position ``pos`` (Schur complement of ``G``)."""
        m = self._m
        B = self._buf
        g = B[:m, pos].copy()
        gjj = g[pos]
        g = np.delete(g, pos)
        B[pos : m - 1, :m] = B[pos + 1 : m, :m]
        B[: m - 1, pos : m - 1] = B[: m - 1, pos + 1 : m]
        B[m - 1, :m] = 0.0
        B[:m, m - 1] = 0.0
        if m > 1:
            B[: m - 1, : m - 1] -= np.outer(g / gjj, g)
        k = self.passive.pop(pos)
        self.in_p[k] = False
        self.z[k] = 0.0
        self._grad = None

    def _refresh(self):
        P = self.passive
        m = self._m
        if m:
            self._buf[:m, :m] = np.linalg.inv(self.C[np.ix_(P, P)])
        self.refreshes += 1

    def _solve_beta(self) -> np.ndarray:
        return self._G() @ self.beta[self.passive]

    # ------------------------------------------------------------------ API
    def gradient(self) -> np.ndarray:
        """``β − C z`` (the negative loss gradient), shape (K,); cached until ``z`` changes."""
        if self._grad is None:
            self._grad = self.beta - self.C @ self.z if self.passive else self.beta.copy()
        return self._grad

    def add(self, k: int) -> list[int]:
        """Add mode ``k`` (which must have ``(β − Cz)_k > 0``) and re-optimise.

        Returns
        -------
        list of int
            Modes removed from the support on the way (their optimum hit zero).
        """
        removed: list[int] = []
        self._grad = None
        guard = 0
        self._optimal = self._optimal and not self.in_p[k]
        while not self._try_append(k):
            guard += 1
            if guard > self.K + 1:
                raise UnboundedError(
                    "active-set step made no progress; `C` is numerically singular beyond the pivot tolerance"
                )
            # ray along the null direction d (d_k = 1, d_P = −C_PP⁻¹ C_Pk): the loss falls linearly
            P = self.passive
            if not P:
                raise UnboundedError(
                    f"the loss is unbounded below: mode {k} has C_kk = {self.C[k, k]:.3e} "
                    f"and growth rate β_k − (Cz)_k > 0 (`beta` is not in the range of `C`)"
                )
            dP = -(self._G() @ self.C[P, k])
            neg = dP < 0
            if not neg.any():
                raise UnboundedError(
                    f"the loss is unbounded below along a null direction of `C` "
                    f"through mode {k} (`beta` is not in the range of `C`)"
                )
            zP = self.z[P]
            ratios = np.where(neg, zP / np.where(neg, -dP, 1.0), np.inf)
            j = int(np.argmin(ratios))
            t = ratios[j]
            self.z[P] = np.maximum(zP + t * dP, 0.0)
            self.z[k] += t
            removed.append(P[j])
            self._delete(j)
            self._optimal = False
        # Lawson–Hanson inner loop: move from the feasible z towards the restricted optimum
        bordered = not removed and self._optimal
        for _ in range(self.K + 2):
            P = self.passive
            if bordered:
                # z_P was optimal on P \ {k}: x_k = (β_k − C_kP z_P)/s, x_P = z_P − x_k C_PP⁻¹C_Pk
                u, piv = self._last
                Pold = P[:-1]
                xk = (self.beta[k] - self.C[k, Pold] @ self.z[Pold]) / piv
                x = np.append(self.z[Pold] - xk * u, xk)
                bordered = False
            else:
                x = self._solve_beta()
            thr = 1e-13 * max(1.0, float(np.max(np.abs(x))))
            if np.all(x > thr):
                self.z[P] = x
                self._grad = None
                g = self.gradient()
                scale = max(float(np.max(np.abs(self.beta))), 1e-300)
                if np.max(np.abs(g[P])) > 1e-10 * scale:  # drift of the updated inverse
                    self._refresh()
                    x = self._solve_beta()
                    if np.all(x > thr):
                        self.z[P] = x
                        self._grad = None
                        self._optimal = True
                        return removed
                    continue
                self._optimal = True
                return removed
            zP = self.z[P]
            bad = x <= thr
            denom = np.where(bad, np.maximum(zP - x, 1e-300), 1.0)
            alpha = np.where(bad, zP / denom, np.inf)
            alpha = float(min(1.0, max(0.0, alpha.min())))
            znew = zP + alpha * (x - zP)
            drop = [i for i in range(len(P)) if bad[i] and znew[i] <= thr]
            if not drop:
                drop = [int(np.argmin(np.where(bad, znew, np.inf)))]
            self.z[P] = np.maximum(znew, 0.0)
            for pos in sorted(drop, reverse=True):
                removed.append(P[pos])
                self._delete(pos)
        raise UnboundedError("active-set inner loop did not terminate")  # pragma: no cover

    def solve(self, candidates: np.ndarray | None = None, vtol: float | None = None) -> np.ndarray:
        """Run to the global minimiser: add the most positive-gradient mode until KKT holds.

        Parameters
        ----------
        candidates : numpy.ndarray of bool, shape (K,), optional
            Restrict the support to these modes (default: all).
        vtol : float, optional
            Gradient tolerance for optimality (default ``1e-12 · scale``).

        Returns
        -------
        numpy.ndarray, shape (K,)
        """
        if vtol is None:
            vtol = 1e-12 * max(float(np.max(np.abs(self.beta))), float(np.max(np.diag(self.C))), 1e-300)
        for _ in range(10 * self.K + 10):
            v = self.gradient()
            mask = ~self.in_p & (v > vtol)
            if candidates is not None:
                mask &= candidates
            if not mask.any():
                return self.z.copy()
            k = int(np.argmax(np.where(mask, v, -np.inf)))
            self.add(k)
        raise UnboundedError("active-set method did not converge")  # pragma: no cover


def reference_limit(beta, C, s0=None, *, y2: float | None = None, max_events: int | None = None) -> LimitResult:
    r"""Events of the ε → 0 limit of ``dz/dt = 4 z ⊙ (β − Cz)`` (saddle-to-saddle dynamics).

    Parameters
    ----------
    beta : array_like, shape (K,)
        ``β`` (growth rates ``ζ = 4β``).
    C : array_like, shape (K, K)
        Symmetric positive semi-definite interaction matrix.
    s0 : array_like, shape (K,), optional
        Initial log coordinates ``s_k(0) = ln z_k(0) / ln(1/ε) ≤ 0``; default ``−1`` for every
        mode (``z(0) = ε``).  ``−inf`` marks a mode that starts at exactly 0; ``0`` a mode
        that starts at an ``O(1)`` value.
    y2 : float, optional
        ``E[‖ỹ‖²]``; the reported plateau losses are ``½ y2 − βᵀz + ½ zᵀCz``.  When omitted
        they are excess losses ``L(z) − min_{z ≥ 0} L`` (the last plateau is 0).
    max_events : int, optional
        Safety bound (default ``10 K + 10``).

    Returns
    -------
    LimitResult
        Events (``τ``, mode, on/off, active set, plateau loss), final state and the
        piecewise-linear paths ``s(τ)``.  Times in training units are ``t ≈ τ ln(1/ε)``,
        with ``O(1)`` corrections (so the relative error falls like ``1/ln(1/ε)``).

    Raises
    ------
    ShapeError, NonFiniteError
        Wrong shapes, NaN.
    ValueError
        ``C`` not symmetric or not PSD; ``s0 > 0``; the loss unbounded below.
    """
    b = as_tensor("beta", beta, ndim=1, dtype=torch.float64).numpy().copy()
    K = b.shape[0]
    if K == 0:
        raise ShapeError("`beta` must have at least one mode (K ≥ 1); found shape (0,)")
    Cn = as_tensor("C", C, ndim=2, dtype=torch.float64).numpy()
    if Cn.shape != (K, K):
        raise ShapeError(f"`C` must have shape ({K}, {K}) to match `beta`; found {Cn.shape}")
    scale = max(float(np.max(np.abs(np.diag(Cn)))) if K else 0.0, 1e-300)
    asym = float(np.max(np.abs(Cn - Cn.T))) if K else 0.0
    if asym > 1e-10 * max(float(np.max(np.abs(Cn))), 1e-300):
        raise InvalidParameterError(f"`C` must be symmetric; found max |C − Cᵀ| = {asym:.3e}")
    try:
        np.linalg.cholesky(Cn + 1e-10 * scale * np.eye(K))
    except np.linalg.LinAlgError:
        lam = float(np.linalg.eigvalsh(Cn)[0])
        raise InvalidParameterError(
            f"`C` must be positive semi-definite; found smallest eigenvalue {lam:.3e}"
        ) from None
    if s0 is None:
        s = -np.ones(K)
    else:
        s = as_tensor("s0", s0, ndim=1, dtype=torch.float64, finite=False).numpy().copy()
        if s.shape != (K,):
            raise ShapeError(f"`s0` must have shape ({K},); found {s.shape}")
        if np.isnan(s).any() or np.isposinf(s).any():
            raise InvalidParameterError("`s0` must not contain NaN or +inf")
        if (s > 0).any():
            raise InvalidParameterError(f"`s0` must be ≤ 0 (z(0) ≤ 1 in units of ε); found max {s.max():.3e}")
    qp = ReferenceActiveSetQP(Cn, b)
    vtol = 1e-12 * max(float(np.max(np.abs(b))), scale, 1e-300)
    stol = 1e-12
    max_events = 10 * K + 10 if max_events is None else int(max_events)
    events: list[LimitEvent] = []
    z_after: list[np.ndarray] = []
    path_tau, path_s = [0.0], [s.copy()]

    def plateau(z):
        # at a restricted optimum C_PP z_P = β_P, so −βᵀz + ½zᵀCz = −½ β_Pᵀ z_P
        P = qp.passive
        return -0.5 * float(b[P] @ z[P]) if P else 0.0

    def process(tau):
        before = set(qp.passive)
        for _ in range(3 * K + 10):
            v = 4.0 * qp.gradient()
            cand = ~qp.in_p & (s >= -stol) & (v > 4 * vtol)
            if not cand.any():
                break
            k = int(np.argmax(np.where(cand, v, -np.inf)))
            s[k] = 0.0
            try:
                qp.add(k)
            except UnboundedError as exc:
                raise InvalidParameterError(f"`beta`, `C`: {exc}") from None
        after = set(qp.passive)
        s[list(after)] = 0.0
        on, off = sorted(after - before), sorted(before - after)
        if on or off:
            z = qp.z.copy()
            val = plateau(z)
            act = tuple(sorted(after))
            for k in on:
                events.append(LimitEvent(tau, k, "on", act, val, float(z[k])))
                z_after.append(z)
            for k in off:
                events.append(LimitEvent(tau, k, "off", act, val, 0.0))
                z_after.append(z)

    tau = 0.0
    process(tau)
    while len(events) <= max_events:
        v = 4.0 * qp.gradient()
        inactive = ~qp.in_p
        cand = inactive & (v > 4 * vtol) & np.isfinite(s)
        if not cand.any():
            break
        dt = np.where(cand, -s / np.where(cand, v, 1.0), np.inf)
        j = int(np.argmin(dt))
        dtau = max(float(dt[j]), 0.0)
        tau += dtau
        fin = inactive & np.isfinite(s)
        s[fin] = np.minimum(s[fin] + v[fin] * dtau, 0.0)
        s[j] = 0.0
        path_tau.append(tau)
        path_s.append(s.copy())
        process(tau)
    else:
        raise InvalidParameterError(f"`limit` exceeded `max_events` = {max_events}")
    # extension for plotting
    v = 4.0 * qp.gradient()
    end = 1.25 * tau if tau > 0 else 1.0
    s_end = s.copy()
    fin = ~qp.in_p & np.isfinite(s)
    s_end[fin] = np.minimum(s[fin] + v[fin] * (end - tau), 0.0)
    path_tau.append(end)
    path_s.append(s_end)
    zf = qp.z.copy()
    if y2 is None:
        shift = -plateau(zf)
    else:
        shift = 0.5 * float(y2)
    events = [LimitEvent(e.tau, e.mode, e.kind, e.active, float(e.loss + shift), e.value) for e in events]
    return LimitResult(
        events,
        torch.as_tensor(zf),
        torch.as_tensor(np.array(path_tau)),
        torch.as_tensor(np.array(path_s)),
        float(shift),
        None,
        z_after,
    )
