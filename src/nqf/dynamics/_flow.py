r"""Gradient flow of the order parameter (the ``η → 0`` limit, docs/theory.md §3).

With ZGZ, ``dM/dt = −(S M + M S)`` with ``S = 2G + λI``, ``G = (1/N) 𝒜*(r)``;
without weight decay ``dM/dt = −2 (G M + M G)``.  Without ZGZ the flow of
``(M, μ)`` for width ``m`` is

    dM/dt = −(S M + M S) − (μ hᵀ + h μᵀ),   dμ/dt = −S μ − m h

(``h = (1/N) Σ r (b + 2Bμ)``, ``G`` from ``A − B``).  Time is the training time
``t = η · steps`` of the discrete runs.

Coordinates and accuracy: the flow is integrated on a factor ``M = L Lᵀ``
(``L`` of shape ``p × r``, the same factor as the order-parameter form of
:func:`~nqf.dynamics.simulate`, :mod:`nqf.dynamics._factored`):

    dL/dt = −S L − h cᵀ,   μ = L c,

which is positive semidefinite by construction.  The error of each column of
``L`` is controlled relative to that column's own norm (``atol`` per column
``= rtol · ‖l_j‖``), and whenever a column norm has changed by a factor 8 the
integration is restarted from ``L O`` with the columns rotated onto the
eigenvectors of ``M`` (one-sided Jacobi; with ZGZ, ``L O`` solves the same
flow).  So every eigendirection of ``M`` — also one of size ``10⁻³⁰`` next to
``O(1)`` ones — is integrated to relative accuracy ``~rtol``: the default
``rtol = 1e-10`` gives the exact flow to ``~1e-8`` relative for any initial
scale.  The default method ``"LSODA"`` switches between Adams (non-stiff) and
BDF (stiff, once modes saturate); explicit ``"DOP853"`` is accurate at its
steps but its dense output (at ``t_eval``) is noisy for saturated modes.  The ODE runs in float64 on the
CPU (the operator itself is applied on its own device).
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.integrate import solve_ivp

from .._validation import as_tensor, check_flow_scalars
from ..errors import InvalidParameterError, InvalidTypeError
from ..structure import StructureOperator
from ._factored import factor_from_matrix, factor_from_weights, gradient_terms, orthogonalize_columns, predictions
from ._initial import initial_state
from ._loss import Loss, as_loss
from ._polish import POLISH_MAX_RANK
from ._trajectory import DIVERGED, FINISHED, Trajectory

__all__ = ["gradient_flow", "integrate_factor"]

#: The ``solve_ivp`` keywords :func:`integrate_factor` passes on.
IVP_OPTIONS = ("t_eval", "events", "dense_output", "max_step")
RESTART_FACTOR = 8.0  # restart from the polished factor when a column norm changed by this factor


def gradient_flow(
    op: StructureOperator,
    y,
    *,
    M0=None,
    W0=None,
    t_span,
    t_eval=None,
    rtol: float = 1e-10,
    atol: float | None = None,
    method: str = "LSODA",
    loss: str | Loss = "mse",
    weight_decay: float = 0.0,
    max_step: float = np.inf,
) -> Trajectory:
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
    rtol : float
        Relative tolerance (per column of the factor ``L``, see the module docstring).
    atol : float, optional
        Absolute tolerance on the entries of ``L`` (units ``√M``).  Default: ``rtol``
        times each column's norm (scale-relative, valid for any ``ε``).
    method : str
        Any ``solve_ivp`` method (default ``"LSODA"``; ``"DOP853"``, ``"RK45"``, ``"Radau"``, ``"BDF"``).
    loss : Loss or {"mse", "logistic", "cross_entropy"}
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
        raise InvalidTypeError(f"`op` must be a StructureOperator; found {type(op).__name__}")
    loss = as_loss(loss)
    init = initial_state(op.p, M0=M0, W0=W0, dtype=op.dtype, device=op.device, zgz=op.satisfies_zgz)
    W0, m = init.W0, init.width
    mu_init = None if W0 is None or op.satisfies_zgz else W0.sum(1)
    atol_given = atol
    # non-finite spans, tolerances or rates would make the integrator run for ever: refused up front
    t0, t1, rtol, atol, weight_decay, max_step = check_flow_scalars(
        t_span, rtol, 1.0 if atol is None else atol, weight_decay, max_step
    )
    atol = None if atol_given is None else atol
    y = loss.prepare(y, op.n_samples, op.n_outputs, op.dtype, op.device)
    p, dt, dev = op.p, op.dtype, op.device
    if t_eval is not None:
        t_eval = as_tensor("t_eval", t_eval, ndim=(0, 1), dtype=torch.float64).cpu().numpy().reshape(-1)
        if t_eval.size and (t_eval.min() < t0 or t_eval.max() > t1):
            raise InvalidParameterError(
                f"`t_eval` must lie within `t_span` {t_span}; found [{t_eval.min()}, {t_eval.max()}]"
            )
    if W0 is not None:
        L0, c = factor_from_weights(W0, with_ones=mu_init is not None)
    else:
        L0, c = factor_from_matrix(init.M), None
    has_mu = c is not None
    polish = not has_mu and L0.shape[1] <= POLISH_MAX_RANK
    sol = _integrate(op, y, loss, weight_decay, L0, c, t0, t1, t_eval, rtol, atol, method, max_step, polish)
    Ms, mus, losses = [], [], []
    for L in sol["L"]:
        M = L @ L.T
        Ms.append(0.5 * (M + M.T))
        mu = L @ c if has_mu else None
        if has_mu:
            mus.append(mu)
        losses.append(float(loss.value(predictions(op, L, mu), y)))
    status = FINISHED if sol["status"] >= 0 else DIVERGED
    return Trajectory(
        t=torch.as_tensor(np.asarray(sol["t"]), dtype=dt).to(dev),
        loss=torch.tensor(losses, dtype=dt, device=dev),
        step=None,
        M=torch.stack(Ms) if Ms else torch.zeros(0, p, p, dtype=dt, device=dev),
        mu=torch.stack(mus) if mus else None,
        status=status,
        message=sol["message"],
        info=dict(
            form="gradient_flow",
            method=method,
            rtol=rtol,
            atol=atol,
            nfev=sol["nfev"],
            restarts=sol["restarts"],
            loss=loss.name,
            weight_decay=weight_decay,
            width=m,
            factor_rank=int(L0.shape[1]),
        ),
    )


def _integrate(op, y, loss, lam, L0, c, t0, t1, t_eval, rtol, atol, method, max_step, polish):
    """Integrate ``dL/dt = −S L − h cᵀ`` in segments; restart from the polished factor when a column
    norm has changed by ``RESTART_FACTOR``.  Returns the factors at the output times."""
    p, dt, dev = op.p, op.dtype, op.device
    r = L0.shape[1]
    L = orthogonalize_columns(L0) if polish else L0
    t, out_t, out_L = t0, [], []
    nfev, restarts, status, message = 0, 0, 0, "The solver successfully reached the end of the integration interval."
    if t_eval is None or (t_eval.size and t_eval[0] == t0):
        out_t.append(t0)
        out_L.append(L)
    while True:
        z0 = L.reshape(-1).cpu().numpy().astype(np.float64)
        norms = np.linalg.norm(z0.reshape(p, r), axis=0)
        tol_abs = atol if atol is not None else np.repeat((rtol * np.maximum(norms, 1e-300))[None, :], p, 0).ravel()
        events = None
        if polish:
            ref = np.log(np.maximum(norms, 1e-300))

            def grown(_t, z, ref=ref):
                n = np.linalg.norm(z.reshape(p, r), axis=0)
                return float(np.max(np.abs(np.log(np.maximum(n, 1e-300)) - ref))) - np.log(RESTART_FACTOR)

            grown.terminal = True
            grown.direction = 1
            events = [grown]
        te = None if t_eval is None else t_eval[(t_eval > t) & (t_eval <= t1)]
        sol = integrate_factor(
            op,
            y,
            L,
            (t, t1),
            rtol=rtol,
            atol=tol_abs,
            method=method,
            t_eval=te,
            events=events,
            max_step=max_step,
            loss=loss,
            weight_decay=lam,
            c=c,
        )
        nfev += int(sol.nfev)
        ts = np.asarray(sol.t, dtype=float).reshape(-1)
        Z = np.asarray(sol.y, dtype=float).reshape(z0.shape[0], ts.shape[0])
        if t_eval is None:  # the solver's own steps (the segment start is already stored)
            ts, Z = ts[1:], Z[:, 1:]
        for j in range(ts.shape[0]):
            out_t.append(float(ts[j]))
            out_L.append(torch.as_tensor(Z[:, j], dtype=dt).to(dev).reshape(p, r))
        if sol.status < 0:
            status, message = sol.status, str(sol.message)
            break
        if sol.status == 1 and sol.t_events[0].size:  # a column grew or shrank: polish and restart
            t = float(sol.t_events[0][0])
            L = orthogonalize_columns(torch.as_tensor(sol.y_events[0][0], dtype=dt).to(dev).reshape(p, r))
            restarts += 1
            if t_eval is None:
                out_t.append(t)
                out_L.append(L)
            continue
        break
    return dict(t=out_t, L=out_L, status=status, message=message, nfev=nfev, restarts=restarts)


def integrate_factor(
    op: StructureOperator,
    y: torch.Tensor,
    L0: torch.Tensor,
    t_span,
    *,
    rtol: float,
    atol,
    method: str = "LSODA",
    loss: str | Loss = "mse",
    weight_decay: float = 0.0,
    c=None,
    **ivp_options,
):
    """One ``solve_ivp`` run of the factored flow ``dL/dt = −S L − h cᵀ`` (``M = L Lᵀ``, ``μ = L c``).

    The integrator of :func:`gradient_flow` (which adds validation, column-relative
    tolerances and restarts) and of the saddle sequence's heteroclinic orbits
    (:mod:`nqf.reductions.saddles`, with terminal events and dense output).

    Parameters
    ----------
    op : StructureOperator
    y : torch.Tensor, shape (N, C)
        Prepared targets (:meth:`nqf.dynamics.Loss.prepare`).
    L0 : torch.Tensor, shape (p, r)
    t_span : (float, float)
    rtol, atol
        Passed to ``solve_ivp`` (``atol`` may be per entry of the flattened ``L``).
    method
        As in ``scipy.integrate.solve_ivp``.
    loss, weight_decay, c
        Loss, ``λ`` (``S = 2G + λI``) and the width vector ``c`` (non-ZGZ operators only).
    **ivp_options
        Any of ``t_eval``, ``events``, ``dense_output``, ``max_step`` (:data:`IVP_OPTIONS`), passed to
        ``solve_ivp``; event functions and the dense output see the flattened factor ``L.reshape(-1)``.  Any
        other keyword is refused (:class:`~nqf.errors.InvalidParameterError`), rather than handed to the solver,
        which would only warn.

    Returns
    -------
    scipy.integrate.OdeResult
    """
    unknown = sorted(set(ivp_options) - set(IVP_OPTIONS))
    if unknown:
        raise InvalidParameterError(
            f"`integrate_factor` passes only {IVP_OPTIONS} to solve_ivp; found {', '.join(map(repr, unknown))}"
        )
    p, r, N, dt, dev = op.p, L0.shape[1], op.n_samples, op.dtype, op.device
    cc = None if c is None else c.to(dtype=dt, device=dev)
    lam, loss = weight_decay, as_loss(loss)

    def rhs(_t, z):
        L = torch.as_tensor(z, dtype=dt).to(dev).reshape(p, r)
        mu = None if cc is None else L @ cc
        res = loss.residual(predictions(op, L, mu), y)
        GL, h = gradient_terms(op, res, L, mu, N)
        dL = -2.0 * GL
        if lam:
            dL = dL - lam * L
        if h is not None:
            assert cc is not None  # h comes from the bias part, which comes with c = Qᵀ1
            dL = dL - torch.outer(h, cc)
        return dL.reshape(-1).cpu().numpy()

    z0 = L0.reshape(-1).cpu().numpy().astype(np.float64)
    return solve_ivp(
        rhs,
        t_span,
        z0,
        method=method,
        rtol=rtol,
        atol=atol,
        **ivp_options,
    )
