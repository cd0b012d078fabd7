r"""``nqf.predict``: the predicted staircase of an operator at ``ε``, by the reduction that applies.

One door for the library's central question — *when does the loss drop, and to
what level* — whatever the reduction (docs/theory.md §4):

================== ========================================================= =================================
method             when                                                      times
================== ========================================================= =================================
``lotka-volterra`` commuting structure matrices (``auto`` picks it when the  exact logistic (diagonal ``C``) or
                   dense ``N·C·p²`` array fits, :data:`LV_MAX_ENTRIES`)       the ε → 0 limit (interacting)
``limit``          commuting, the ε → 0 limit of the modes explicitly        ``τ_k ln(1/ε)``
``svd-modes``      a two-layer MLP operator on whitened inputs               exact half-saturation of each mode
``saddle-sequence`` anything else (``auto``): the greedy low-rank saddles     exact offset / O(1) recursion /
                                                                             leading order, per drop
================== ========================================================= =================================
"""

from __future__ import annotations

import dataclasses
import time

import torch

from .._validation import as_tensor, eps_value, int_param, one_of
from ..errors import InvalidParameterError, InvalidTypeError, ShapeError
from ..structure import StructureOperator, channel_split, commutes
from ._staircase import PredictionCost, Staircase

__all__ = ["predict", "LV_MAX_ENTRIES"]

#: Largest dense Lotka–Volterra structure array (``N·C·p²`` entries) that ``method="auto"`` builds.
LV_MAX_ENTRIES = 2e7
_METHODS = ("auto", "lotka-volterra", "limit", "svd-modes", "saddle-sequence")


def _mlp_inputs(op) -> tuple[torch.Tensor, float]:
    """Inputs ``X`` and ``σ'(0)`` of a bias-free two-layer MLP operator (:func:`nqf.structure.mlp`)."""
    from ..structure import BilinearStructure, OneHotKronKernel

    k = getattr(op, "kernel", None)
    if not (
        isinstance(op, BilinearStructure)
        and isinstance(k, OneHotKronKernel)
        and k.q == 1
        and not k.append_one
        and op.left == slice(0, op.n_outputs)
        and getattr(op, "linear", None) is None
    ):
        raise InvalidParameterError(
            "`method` 'svd-modes' needs the operator of a bias-free two-layer MLP with σ(0) = 0 "
            f"(nqf.structure.mlp(X, activation)); found {type(op).__name__} with layout {getattr(op, 'layout', '?')!r}"
        )
    return k.F[:, 0, :], float(k.scale)


def predict(
    op: StructureOperator,
    y,
    eps: float,
    *,
    method: str = "auto",
    commuting: bool | None = None,
    M0=None,
    max_rank: int | None = None,
    init: str = "isotropic",
    chain: list | None = None,
    subspace: bool = False,
    log=None,
) -> Staircase:
    r"""Predicted staircase of the NQF of ``op`` with targets ``y`` from ``M(0) = εI``.

    Parameters
    ----------
    op : StructureOperator
    y : array_like, shape (N,) or (N, C)
        Targets (minus ``f(0)`` when ``op`` carries no offset).
    eps : float in (0, 1)
        Initial scale.
    method : {"auto", "lotka-volterra", "limit", "svd-modes", "saddle-sequence"}
        ``"auto"``: Lotka–Volterra when the data commute and the dense reduction fits
        (:data:`LV_MAX_ENTRIES`), else the saddle sequence (with its commuting rule when
        the data commute).  See the module docstring.
    commuting : bool, optional
        Whether the structure matrices commute (default: :func:`nqf.structure.commutes`, two random adjoints).
    M0 : array_like, shape (p, p), optional
        Initial order parameter of the Lotka–Volterra reduction and the saddle sequence (default ``εI``; a
        rank-deficient start ``εΠ`` for a width below ``p``).  Refused with ``"svd-modes"`` (its start is
        ``init``).
    max_rank : int, optional
        The largest rank ``M = W Wᵀ`` can reach: the number of units ``m`` (``nqf.analyze`` passes it).
        The saddle sequence stops at this rank and the SVD modes at this many modes, with a note, so the
        staircase never predicts a level the model cannot reach.  The Lotka–Volterra reductions are not
        bounded by it: with commuting data the loss depends on ``M`` only through its diagonal in the
        common eigenbasis, which an ``M`` of any rank ``≥ 1`` reaches (``M = w wᵀ``, ``w_j² = z_j``).
    init : {"isotropic", "balanced"}
        Start of the SVD-mode reduction (``M(0) = εI`` or one unit per mode); ``"balanced"`` is refused with
        another method.
    chain : list, optional
        Heteroclinic chain of the saddle sequence, reused for its O(1) times; refused with a method that does not
        use it (also when ``"auto"`` picks the Lotka–Volterra reduction).
    subspace : bool
        Saddle sequence only: time every drop by the NQF restricted to the span of the saddles and their escape
        directions (:meth:`nqf.reductions.saddles.SaddleSequence.subspace_times`, rule ``"subspace flow"``)
        instead of leading order with its O(1) corrections (``"auto"`` then takes the saddle sequence).  Refused
        with another method.
    log : callable, optional
        A progress meter (as diffrax's ``progress_meter``): ``log(line)`` receives a line after the saddle search,
        before the clock runs: the drops found, the search's time, and the time of the O(1) clock of the later
        drops, between one drop's and all of theirs (:func:`nqf.reductions.saddles.clock_cost`).  What each part
        took is in the result, :attr:`Staircase.cost`.

    Returns
    -------
    Staircase
        When ``op``'s units are ``k`` channels each (:func:`nqf.structure.channel_split`: attention heads, whose
        ``d_h`` value–output channels enter the quadratic form as units of their own), the staircase is that of
        the channel operator: started from ``M' = Σ_i P_i M(0) P_iᵀ``, bounded by ``k · max_rank`` channels,
        its ``directions`` channel directions (strength ``qᵀ M' q``), with a note saying so.

    Raises
    ------
    NQFError
        An unknown method, ``eps`` outside (0, 1), a keyword the method does not use (``init``, ``M0``,
        ``chain``, ``subspace``), non-commuting data for
        ``"lotka-volterra"``/``"limit"``, an operator that is not a two-layer MLP for
        ``"svd-modes"``, inputs that are not whitened.
    """
    if not isinstance(op, StructureOperator):
        raise InvalidTypeError(f"`op` must be a StructureOperator; found {type(op).__name__}")
    one_of("method", method, _METHODS)
    e = eps_value(eps)
    one_of("init", init, ("isotropic", "balanced"))
    if max_rank is not None:
        max_rank = int_param("max_rank", max_rank, minimum=1)
    if not isinstance(subspace, bool):
        raise InvalidTypeError(f"`subspace` must be a bool; found {type(subspace).__name__}")
    if subspace and method not in ("auto", "saddle-sequence"):
        raise InvalidParameterError(
            f"`subspace` times the drops of the saddle sequence; method {method!r} does not use it (pass "
            "method='saddle-sequence' or 'auto', or leave subspace=False)"
        )
    _refuse_unused(method, M0=M0, init=init, chain=chain)
    if M0 is not None:
        M0 = _checked_M0(M0, op.p)
    Y = as_tensor("y", y, ndim=(1, 2), dtype=torch.float64)
    opts = dict(method=method, commuting=commuting, init=init, chain=chain, subspace=subspace, log=log)
    split = None if method == "svd-modes" else channel_split(op)
    if split is None:
        return _predict(op, Y, e, M0=M0, max_rank=max_rank, **opts)
    start = e * torch.eye(op.p, dtype=torch.float64) if M0 is None else M0
    rank = None if max_rank is None else split.rank(max_rank)
    st = _predict(split.op, Y, e, M0=split.reduce(start), max_rank=rank, **opts)
    note = (
        f"channels: each unit's quadratic form is {split.k} identical copies (I_{split.k} ⊗ A', e.g. an attention "
        f"head's value–output channels), so the NQF is that of the {split.k}"
        + (f" × {int(max_rank)} = {split.k * int(max_rank)}" if max_rank is not None else " × m")
        + f" channels, p' = {split.op.p} (nqf.structure.channel_split); directions are channel directions"
    )
    return dataclasses.replace(st, notes=(note, *st.notes))


def _predict(op, Y, e: float, *, method, commuting, M0, max_rank, init, chain, subspace, log) -> Staircase:
    """:func:`predict` on checked arguments, for an operator whose units are one channel each."""
    if method == "svd-modes":
        from .svd_modes import two_layer_modes

        X, sigma1 = _mlp_inputs(op)
        return _bounded(two_layer_modes(X, Y, sigma1=sigma1, eps=e, init=init).staircase(), max_rank)
    if commuting is None and method == "auto":
        commuting = commutes(op)
    dense_entries = op.n_samples * op.n_outputs * op.p**2
    lv_auto = method == "auto" and commuting and dense_entries <= LV_MAX_ENTRIES and not subspace
    if method in ("lotka-volterra", "limit") or lv_auto:
        if chain is not None:
            raise InvalidParameterError(
                "`chain` is the saddle sequence's heteroclinic chain; 'auto' chose the Lotka–Volterra reduction "
                "for these commuting data, which does not use it (pass method='saddle-sequence')"
            )
        from ..dynamics import initial_state
        from .lv import reduce

        M = initial_state(op.p, eps=e).M0 if M0 is None else M0
        lv = reduce(op, Y, M)
        return lv.staircase(e, limit=True if method == "limit" else None)
    from .saddles import clock_cost, saddle_sequence

    rule = "auto" if commuting is None else "commuting" if commuting else "generic"
    t0 = time.perf_counter()
    seq = saddle_sequence(op, Y, rule=rule, max_rank=_checked_rank(max_rank))
    K, spent = len(seq) - 1, time.perf_counter() - t0
    low, high = clock_cost(seq) if chain is None and not subspace else (0.0, 0.0)
    if log is not None:
        later = f"; O(1) clock of drops 2–{K}: {low:.2g}–{high:.2g} s" if high > 0 else ""
        log(f"saddle search: {K} drops in {spent:.1f} s{later}")
    t0 = time.perf_counter()
    st = seq.staircase(e, chain=chain, M0=M0, subspace=subspace)
    if subspace and log is not None:
        log(f"subspace flow (the drop times): {time.perf_counter() - t0:.1f} s")
    took = time.perf_counter() - t0
    cost = (
        PredictionCost(search=spent, subspace=took)
        if subspace
        else PredictionCost(search=spent, clock=took, clock_estimate=(low, high) if chain is None else None)
    )
    st = dataclasses.replace(st, cost=cost)
    if commuting and method == "auto":
        note = (
            "commuting data too large for the dense Lotka–Volterra reduction: saddle sequence with "
            "the commuting rule (equal to the Lotka–Volterra ε → 0 limit)"
        )
        st = dataclasses.replace(st, notes=(note, *st.notes))
    if max_rank is not None and not st.global_minimum and int(st.ranks[-1]) >= int(max_rank):
        note = (
            f"width: M = W Wᵀ has rank at most {int(max_rank)} (the number of units); the saddle sequence stops "
            f"there, at L = {float(st.levels[-1]):.4g}, above the NQF's global minimum"
        )
        st = dataclasses.replace(st, notes=(note, *st.notes))
    return st


def _refuse_unused(method: str, *, M0, init: str, chain) -> None:
    """A keyword the chosen method would silently ignore is refused, naming it and the method that uses it."""
    if init != "isotropic" and method != "svd-modes":
        raise InvalidParameterError(
            f"`init` is the start of the SVD-mode reduction; method {method!r} does not use it (pass "
            f"method='svd-modes', or give the start as M0); found init={init!r}"
        )
    if M0 is not None and method == "svd-modes":
        raise InvalidParameterError(
            "`M0`: the SVD-mode reduction starts from `init` ('isotropic': εI, 'balanced': one unit per mode) and "
            "does not take M0; use another method or leave M0 out"
        )
    if chain is not None and method not in ("auto", "saddle-sequence"):
        raise InvalidParameterError(
            f"`chain` is the saddle sequence's heteroclinic chain; method {method!r} does not use it"
        )


def _checked_rank(max_rank) -> int | None:
    if max_rank is None:
        return None
    from .._validation import positive_int

    return positive_int("max_rank", max_rank)


def _bounded(st: Staircase, max_rank) -> Staircase:
    """``st`` up to its last plateau of rank ``≤ max_rank``, with a note naming what was left out."""
    rank = _checked_rank(max_rank)
    if rank is None or int(st.ranks[-1]) <= rank:
        return st
    keep = int((st.ranks <= rank).sum())  # ranks grow along a staircase: plateaus 0 … keep−1
    K = keep - 1
    note = (
        f"width: M = W Wᵀ has rank at most {int(max_rank)} (the number of units), so the {st.n_drops - K} later "
        f"drop(s) (down to L = {float(st.levels[-1]):.4g}) cannot be reached; the staircase stops at "
        f"L = {float(st.levels[K]):.4g}"
    )
    return st._through(K, note)


def _checked_M0(M0, p: int) -> torch.Tensor:
    """``M0`` as a finite, symmetric ``p × p`` float64 tensor, or an error naming it."""
    M = as_tensor("M0", M0, ndim=2, dtype=torch.float64)
    if tuple(M.shape) != (p, p):
        raise ShapeError(f"`M0` must have shape (p, p) = ({p}, {p}); found {tuple(M.shape)}")
    if not bool(torch.isfinite(M).all()):
        raise InvalidParameterError("`M0` must be finite; found NaN or inf entries")
    if not torch.allclose(M, M.T, rtol=1e-10, atol=1e-12 * float(M.abs().max())):
        raise InvalidParameterError("`M0` must be symmetric (an order parameter M = W Wᵀ); found M0 ≠ M0ᵀ")
    return M
