"""The search for the saddle sequence: generic rule (descents) and commuting rule (the Lotka–Volterra limit).

See the package docstring (:mod:`nqf.reductions.saddles`) and docs/theory.md §4.3, §4.6.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import torch

from ..._validation import one_of, unit_fraction
from ...errors import InvalidParameterError, InvalidTypeError, NonCommutingError, NotClosedError
from ...structure import StructureOperator, commutator_defect
from ..lv import limit
from ._orbit import Heteroclinic
from ._problem import LossProblem, complement, compress, descend, float64_problem, orth
from ._results import Saddle, SaddleSequence

__all__ = ["saddle_sequence"]

_COMMUTE_RTOL = 1e-9  # largest relative commutator of two random adjoints taken as round-off (float64)
#: Largest ``escape rate × offset`` of the first drop taken as exact: beyond ``ln(1/u)`` (``u`` the float64 unit
#: round-off) of growth past the orbit's normalisation, directions the orbit did not seed have grown from
#: round-off to O(1): the orbit lingers at an intermediate saddle and the crossing time measures round-off.
_MAX_OFFSET_GROWTH = math.log(1.0 / float(np.finfo(np.float64).eps))


def _saddle_at(prob: LossProblem, V: torch.Tensor, index: int, tau: float):
    """The :class:`Saddle` at ``M = V Vᵀ`` with its rates; also the complement basis and eigenvectors."""
    p = prob.p
    M = V @ V.T
    G = prob.G(M)
    Qc = complement(orth(V), p)
    H = -(Qc.T @ G @ Qc)
    h, U = torch.linalg.eigh(0.5 * (H + H.T))
    h, U = h.flip(0), U.flip(1)
    lam = float(h[0]) if h.numel() else 0.0
    sad = Saddle(
        index=index,
        M=M,
        V=V.clone(),
        rank=V.shape[1],
        loss=prob.loss(M),
        G=G,
        stationarity=float(torch.linalg.norm(G @ M)),
        rates=h,
        escape_rate=4.0 * lam,
        tau=tau,
    )
    return sad, lam, Qc, U


def saddle_sequence(
    op: StructureOperator,
    y,
    *,
    max_rank: int | None = None,
    tol: float = 1e-9,
    rule: str = "auto",
    gtol: float = 1e-12,
    rank_rtol: float = 1e-10,
    degeneracy_rtol: float = 1e-9,
    first_level: float = 0.5,
    maxiter: int = 2000,
) -> SaddleSequence:
    r"""The greedy low-rank saddle sequence of the NQF flow and its ε → 0 clock.

    Loss and time convention: ``L = (1/2N) ‖f_0 + 𝒜(M) − y‖²`` (MSE, summed over
    outputs), ``G = 𝒜^*(r)/N``, gradient flow ``Ṁ = −2 (G M + M G)``,
    ``t = η · steps``; initial scale ``M(0) = ε I``.  See the module docstring
    for the derivation of the escape rates and times.

    Parameters
    ----------
    op : StructureOperator
        Structure operator satisfying the zero-gradient condition (the flow
        closes on ``M`` only then).
    y : array_like, shape (N,) or (N, C)
        Targets.
    max_rank : int, optional
        Stop after reaching this rank (default ``p``).
    tol : float
        Stop when ``λ_max(−G(M_k)) ≤ tol · scale`` with ``scale = max(1, ‖G(0)‖₂)``.
    rule : {"auto", "commuting", "generic"}
        Log-magnitude bookkeeping of the small directions.  ``"auto"``:
        ``"commuting"`` if :func:`nqf.structure.commutes` passes, else ``"generic"``.
        ``"commuting"`` takes the plateaus and their order from the Lotka–Volterra
        ε → 0 limit :func:`nqf.reductions.lv.limit` (coefficients computed
        matrix-free, ``p`` forward applications; nothing dense is built).
    gtol : float
        Gradient-norm target of the factored descent, relative to ``scale``.
    rank_rtol : float
        Eigenvalues of ``M_k`` below ``rank_rtol · λ_max(M_k)`` are dropped.
    degeneracy_rtol : float
        Top rates within this relative distance escape together.
    first_level : float
        Fraction of the first drop at which the first-escape offset is read.
    maxiter : int
        Iteration cap of each descent.

    Returns
    -------
    SaddleSequence

    Raises
    ------
    NotClosedError
        If ``op`` lacks the zero-gradient condition.
    NonCommutingError
        ``rule="commuting"`` on data whose structure matrices do not commute.
    ShapeError
        If ``y`` does not match the operator's outputs.
    """
    if not isinstance(op, StructureOperator):
        raise InvalidTypeError(f"`op` must be a StructureOperator; found {type(op).__name__}")
    if not op.satisfies_zgz:
        raise NotClosedError(
            "`op` has a linear or cross-unit term (the zero-gradient condition fails): the flow "
            "does not close on M alone, so the saddle sequence of L(M) does not describe it"
        )
    one_of("rule", rule, ("auto", "commuting", "generic"))
    first_level = unit_fraction("first_level", first_level, "of the first drop")
    prob = float64_problem(op, y)  # the descent and eigenproblems run in float64 on the CPU
    op, p = prob.op, prob.p
    max_rank = p if max_rank is None else int(max_rank)
    if max_rank < 0:
        raise InvalidParameterError(f"`max_rank` must be ≥ 0; found {max_rank}")
    if rule != "generic":
        defect = commutator_defect(op)
        if rule == "auto":
            rule = "commuting" if defect <= _COMMUTE_RTOL else "generic"
        elif defect > _COMMUTE_RTOL:
            raise NonCommutingError(
                f"`rule`='commuting' but the structure matrices do not commute: relative "
                f"commutator of two random adjoints {defect:.3e} > {_COMMUTE_RTOL:g} "
                "(nqf.structure.commutator_defect); use rule='generic' or 'auto'"
            )
    G0 = prob.G(torch.zeros(p, p, dtype=op.dtype))
    scale = max(1.0, float(torch.linalg.eigvalsh(G0).abs().max()))
    run = _commuting if rule == "commuting" else _generic
    saddles, lam, message, notes = run(
        prob,
        max_rank=max_rank,
        tol=tol * scale,
        gtol=gtol * scale,
        rank_rtol=rank_rtol,
        degeneracy_rtol=degeneracy_rtol,
        maxiter=maxiter,
    )
    orbit, first_offset, notes = _first_orbit(prob, saddles, first_level, notes)
    return SaddleSequence(
        saddles=tuple(saddles),
        global_minimum=lam <= tol * scale,
        certificate=lam,
        rule=rule,
        first_offset=first_offset,
        first_level=first_level,
        message=message,
        notes=tuple(notes),
        _orbit=orbit,
        _problem=prob,
    )


def _first_orbit(prob: LossProblem, saddles: list, first_level: float, notes: list):
    """The heteroclinic orbit from ``M = 0`` and the first drop's offset (NaN, with a warning among the notes,
    when the orbit lingers past the largest accepted offset); ``(None, NaN, notes)`` without an escape."""
    orbit, first_offset = None, math.nan
    Q0 = saddles[0].escape_direction
    if len(saddles) >= 2 and Q0 is not None:
        L0, L1, rate = saddles[0].loss, saddles[1].loss, saddles[0].escape_rate
        # integrated to halfway between the read level and the next saddle, and no further than an offset
        # that would be refused (below): deeper levels extend the orbit when they are read
        orbit = Heteroclinic(
            prob,
            saddles[0].V,
            Q0,
            rate / 4.0,
            L0 - 0.5 * (1.0 + first_level) * (L0 - L1),
            delta=1e-14,
            rtol=1e-12,
            atol_scale=1e-15,
            s_max=4000.0 / rate,
            s_stop=_MAX_OFFSET_GROWTH / rate,
            n_grid=401,
        )
        first_offset = orbit.crossing(L0 - first_level * (L0 - L1), extend=False)
        if not (math.isfinite(first_offset) and rate * first_offset <= _MAX_OFFSET_GROWTH):
            seen = f"at {first_offset:.3g}" if math.isfinite(first_offset) else f"not by {orbit.s_hi:.3g}"
            notes = [
                *notes,
                f"warning: the first heteroclinic orbit crosses the midpoint {seen} time units past its "
                f"normalisation (escape rate × offset > ln(1/u) = {_MAX_OFFSET_GROWTH:.0f}): it lingers at an "
                "intermediate saddle whose escape is seeded by round-off, not by ε; drop 1 is given at leading order",
            ]
            first_offset = math.nan
    return orbit, first_offset, notes


def _generic(prob: LossProblem, *, max_rank, tol, gtol, rank_rtol, degeneracy_rtol, maxiter):
    """Generic rule: escape along the top eigenvector of ``−P G P``, descend, sorted-exponent clock."""
    p = prob.p
    e_sorted = np.ones(p)  # sorted exponents of the complement
    saddles: list[Saddle] = []
    V = torch.zeros(p, 0, dtype=torch.float64)
    tau, message, notes = 0.0, "", []
    while True:
        sad, lam, Qc, U = _saddle_at(prob, V, len(saddles), tau)
        r = V.shape[1]
        if lam <= tol or r >= max_rank:
            saddles.append(sad)
            message = (
                f"converged: λ_max(−G) = {lam:.3e} ≤ tol·scale = {tol:.3e}"
                if lam <= tol
                else f"stopped at `max_rank` = {max_rank}"
            )
            return saddles, lam, message, notes
        h = sad.rates
        m = int((h >= lam - degeneracy_rtol * abs(lam)).sum())
        if r + m > max_rank:  # a degenerate escape wider than the rank left: M = W Wᵀ grows in max_rank − r of them
            notes.append(
                f"saddle {len(saddles)}: the top escape rate is {m}-fold degenerate but M can gain only "
                f"{max_rank - r} more rank (`max_rank` = {max_rank}): the escape grows the first {max_rank - r} "
                "of those directions (which ones, within the degenerate space, a start of that rank decides)"
            )
            m = max_rank - r
        hn = h.numpy()
        n = min(len(e_sorted), len(hn))
        dtau = e_sorted[0] / (4.0 * lam)
        e_sorted = e_sorted[:n] - 4.0 * hn[:n] * dtau
        D = Qc @ U[:, :m]
        saddles.append(replace(sad, escape_direction=D, escape_mode_rate=4.0 * lam))
        tau += dtau
        # grow along the direction (best step on the ray) and descend
        G = sad.G
        AD = prob.apply(D @ D.T)
        curv = float((AD * AD).sum()) / prob.N
        slope = float(torch.trace(D.T @ (-G) @ D))
        zstar = slope / curv if curv > 0 else 1.0
        V0 = torch.cat([V, math.sqrt(max(zstar / m, 1e-12)) * D], 1)
        Vn, _ = descend(prob, V0, gtol, maxiter)
        Vn, rn = compress(Vn, rank_rtol)
        if rn < V0.shape[1] and rn > 0:  # a direction left: polish the smaller factor
            Vn, _ = descend(prob, Vn, gtol, maxiter)
            Vn, rn = compress(Vn, rank_rtol)
        lost = r + m - rn  # directions that left range(M): they start decaying from exponent 0
        e_sorted = np.sort(np.concatenate([np.zeros(max(lost, 0)), e_sorted[m:]]))
        if lost > 0:
            notes.append(
                f"saddle {len(saddles)}: {lost} direction(s) left range(M) under the generic rule; "
                "the clock after this point is not derived (a decaying direction is not in "
                "general position) and later taus are unreliable"
            )
        V = Vn


def _commuting(prob: LossProblem, *, max_rank, tol, gtol, rank_rtol, degeneracy_rtol, maxiter):
    """Commuting rule: the plateaus, their order and times are those of :func:`nqf.reductions.lv.limit`.

    In the shared eigenbasis ``U`` (eigenvectors of one random adjoint; for commuting
    data the joint eigenbasis with probability one) the mode strengths
    ``z_k = u_kᵀ M u_k`` follow the Lotka–Volterra system with
    ``β = aᵀỹ/N``, ``C = aᵀa/N``, ``a_{m,k} = 𝒜(u_k u_kᵀ)_m`` (docs/theory.md §4.1),
    built from ``p`` forward applications.  Each event time of the ε → 0 limit is
    a saddle ``M = Σ_S z_k u_k u_kᵀ`` (its restricted optimum); the modes switching
    on next are its escape directions.
    """
    op, p, N = prob.op, prob.p, prob.N
    gen = torch.Generator().manual_seed(1)
    R = torch.randn(op.n_samples, op.n_outputs, generator=gen, dtype=torch.float64)
    _, U = torch.linalg.eigh(op.adjoint_unchecked(R))
    a = torch.stack([op.forward_unchecked(torch.outer(U[:, k], U[:, k])).reshape(-1) for k in range(p)], 1)
    ytil = (prob.y - prob.f0).reshape(-1)
    res = limit((a.T @ ytil / N).numpy(), (a.T @ a / N).numpy(), y2=float(ytil @ ytil) / N)
    # plateaus: the state after all events at the same τ; its escape: the modes switching on at the next τ
    taus, on, states = [0.0], [], [np.zeros(p)]  # on[j]: the modes switching on when plateau j ends
    for e, z in zip(res.events, res.z_after, strict=True):
        if e.tau != taus[-1]:
            taus.append(e.tau)
            states.append(z)
            on.append([])
        states[-1] = z
        if e.kind == "on":
            on[-1].append(e.mode)
    saddles: list[Saddle] = []
    for j, (tau, z) in enumerate(zip(taus, states, strict=True)):
        zmax = float(z.max()) if z.size else 0.0
        act = np.flatnonzero(z > rank_rtol * zmax) if zmax > 0 else np.zeros(0, int)
        V = U[:, act] * torch.from_numpy(np.sqrt(z[act]))
        sad, lam, _, _ = _saddle_at(prob, V, j, float(tau))
        if lam <= tol or sad.rank >= max_rank or j == len(taus) - 1:
            saddles.append(sad)
            break
        D = U[:, on[j]]
        hm = -torch.einsum("ik,ij,jk->k", D, sad.G, D)
        saddles.append(replace(sad, escape_direction=D, escape_mode_rate=4.0 * float(hm.max())))
    last = saddles[-1]
    lam = float(last.escape_rate) / 4.0
    message = (
        f"converged: λ_max(−G) = {lam:.3e} ≤ tol·scale = {tol:.3e}"
        if lam <= tol
        else f"stopped at `max_rank` = {max_rank}"
        if last.rank >= max_rank
        else f"the ε → 0 limit ended (KKT of the Lotka–Volterra modes) with λ_max(−G) = {lam:.3e}"
    )
    return saddles, lam, message, []
