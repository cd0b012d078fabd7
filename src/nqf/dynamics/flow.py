r"""Gradient flow of the order parameter (the ``η → 0`` limit, docs/theory.md §3).

With ZGZ, ``dM/dt = −(S M + M S)`` with ``S = 2G + λI``, ``G = (1/N) 𝒜*(r)``;
without weight decay ``dM/dt = −2 (G M + M G)``.  Without ZGZ the flow of
``(M, μ)`` for width ``m`` is

    dM/dt = −(S M + M S) − (μ hᵀ + h μᵀ),   dμ/dt = −S μ − m h

(``h = (1/N) Σ r (b + 2Bμ)``, ``G`` from ``A − B``).  Time is the training time
``t = η · steps`` of the discrete runs.

Accuracy: the ODE is integrated with :func:`scipy.integrate.solve_ivp` on the
``p²`` (+ ``p``) entries in float64 on the CPU (the operator itself is applied on
its own device); the error is controlled by ``rtol``/``atol`` per component
(default ``1e-10``/``1e-12``, method ``"DOP853"``, an 8th-order explicit
Runge–Kutta method), so the result agrees with the exact flow to roughly
``rtol · |M| + atol`` per entry over times where the flow is not stiff.  For very
small initial scales or long plateaus the flow is stiff: use ``method="Radau"``
or ``"LSODA"``.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.integrate import solve_ivp

from .._validation import as_tensor, check_shape
from ..structure.operator import StructureOperator
from .losses import check_loss, loss_value, prepare_targets, residual
from .simulate import _fwd, _grad, check_psd
from .trajectory import DIVERGED, FINISHED, Trajectory

__all__ = ["gradient_flow"]


def gradient_flow(op: StructureOperator, y, *, M0=None, W0=None, t_span, t_eval=None, rtol: float = 1e-10,
                  atol: float = 1e-12, method: str = "DOP853", loss: str = "mse", weight_decay: float = 0.0,
                  max_step: float = np.inf) -> Trajectory:
    r"""Integrate the gradient flow ``dM/dt = −2(GM + MG)`` (plus weight decay / non-ZGZ terms).

    Parameters
    ----------
    op : StructureOperator
    y : array_like, shape (N,) or (N, C)
    M0 : array_like, shape (p, p), optional
        Symmetric PSD initial order parameter (ZGZ only).
    W0 : array_like, shape (p, m), optional
        Initial weights; ``M(0) = W0 W0ᵀ`` (and ``μ(0) = W0 1``, needed without ZGZ).
        Exactly one of ``M0``/``W0``.
    t_span : (float, float)
        Training-time interval ``(t0, t1)``.
    t_eval : array_like, shape (K,), optional
        Times at which to store the solution (default: the solver's own steps).
    rtol, atol : float
        Tolerances passed to ``solve_ivp``.
    method : str
        Any ``solve_ivp`` method (``"DOP853"``, ``"RK45"``, ``"Radau"``, ``"BDF"``, ``"LSODA"``).
    loss : {"mse", "logistic", "cross_entropy"}
    weight_decay : float
        λ (``G → G + λ/2 I``).
    max_step : float
        Largest solver step.

    Returns
    -------
    Trajectory
        ``t`` (K,), ``loss`` (K,), ``M`` (K, p, p), ``mu`` (K, p) without ZGZ;
        ``step`` is ``None``; ``status``/``message`` are those of ``solve_ivp``
        (a failed integration keeps the states computed so far), ``info``
        holds ``nfev``.
    """
    if not isinstance(op, StructureOperator):
        raise TypeError(f"`op` must be a StructureOperator; found {type(op).__name__}")
    check_loss(loss)
    if (M0 is None) == (W0 is None):
        raise ValueError("exactly one of `M0` (p×p order parameter) and `W0` (p×m weights) must be given; found "
                         + ("both" if M0 is not None else "neither"))
    if weight_decay < 0:
        raise ValueError(f"`weight_decay` must be non-negative; found {weight_decay!r}")
    try:
        t0, t1 = (float(v) for v in t_span)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"`t_span` must be a pair (t0, t1); found {t_span!r}") from exc
    if not t1 > t0:
        raise ValueError(f"`t_span` must have t1 > t0; found {t_span!r}")
    y = prepare_targets(y, loss, op.n_samples, op.n_outputs, op.dtype, op.device)
    p, N, dt, dev = op.p, op.n_samples, op.dtype, op.device
    if W0 is not None:
        W0 = as_tensor("W0", W0, ndim=2, dtype=dt, device=dev)
        check_shape("W0", W0, (p, None))
        M_init, m = W0 @ W0.T, W0.shape[1]
        mu_init = None if op.satisfies_zgz else W0.sum(1)
    else:
        if not op.satisfies_zgz:
            raise ValueError("this operator has a linear/cross term (no zero-gradient condition): pass `W0` "
                             "(the flow of (M, μ) depends on the width m)")
        M_init = as_tensor("M0", M0, ndim=2, dtype=dt, device=dev)
        check_shape("M0", M_init, (p, p))
        M_init = check_psd("M0", M_init)
        m, mu_init = None, None
    if t_eval is not None:
        t_eval = np.asarray(t_eval, dtype=float).reshape(-1)
        if t_eval.size and (t_eval.min() < t0 or t_eval.max() > t1):
            raise ValueError(f"`t_eval` must lie within `t_span` {t_span}; found [{t_eval.min()}, {t_eval.max()}]")
    eye = torch.eye(p, dtype=dt, device=dev)
    has_mu = mu_init is not None

    def unpack(z):
        zt = torch.as_tensor(z, dtype=dt).to(dev)
        M = zt[:p * p].reshape(p, p)
        return 0.5 * (M + M.T), (zt[p * p:] if has_mu else None)

    def rhs(_t, z):
        M, mu = unpack(z)
        r = residual(_fwd(op, M, mu), y, loss)
        G, h = _grad(op, r, mu, N)
        S = 2.0 * G + weight_decay * eye
        dM = -(S @ M + M @ S)
        parts = [dM]
        if has_mu:
            dM -= torch.outer(mu, h) + torch.outer(h, mu)
            parts = [dM, -(S @ mu) - m * h]
        return torch.cat([q.reshape(-1) for q in parts]).cpu().numpy()

    z0 = torch.cat([M_init.reshape(-1)] + ([mu_init] if has_mu else [])).cpu().numpy().astype(np.float64)
    sol = solve_ivp(rhs, (t0, t1), z0, method=method, t_eval=t_eval, rtol=rtol, atol=atol, max_step=max_step)
    Ms, mus, losses = [], [], []
    for j in range(sol.y.shape[1]):
        M, mu = unpack(sol.y[:, j])
        Ms.append(M)
        if has_mu:
            mus.append(mu)
        losses.append(float(loss_value(_fwd(op, M, mu), y, loss)))
    status = FINISHED if sol.status >= 0 else DIVERGED
    return Trajectory(t=torch.as_tensor(sol.t, dtype=dt).to(dev), loss=torch.tensor(losses, dtype=dt, device=dev),
                      step=None, M=torch.stack(Ms) if Ms else torch.zeros(0, p, p, dtype=dt, device=dev),
                      mu=torch.stack(mus) if mus else None, status=status, message=str(sol.message),
                      info=dict(form="gradient_flow", method=method, rtol=rtol, atol=atol, nfev=int(sol.nfev),
                                loss=loss, weight_decay=weight_decay, width=m))
