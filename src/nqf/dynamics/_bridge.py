r"""The seeded NQF's plateaus bridged in closed form (``Seeding(bridge=True)``; docs/theory.md §7).

On a plateau most GD steps of the seeded NQF only grow (or shrink) the directions that are still small, and
for those the step is linear.  Split the unit weights ``W`` (p × m) into the block that moves and a frozen
part,

    V = P_b W P_⊥,        P_b = Q_b Q_bᵀ,   P_⊥ = I − R Rᵀ,

with ``Q_b`` the most eigendirections of ``M = W Wᵀ``, smallest first, whose outputs ``𝒜(Q_b Λ_b Q_bᵀ)`` stay
within half the bridge's budget, and ``R`` an orthonormal basis of the row space of the other directions'
weights (the unit combinations that carry them).  The frozen part ``W − V`` and ``V`` have orthogonal columns,
so ``M = (W − V)(W − V)ᵀ + V Vᵀ`` and, with the residual ``r`` held fixed, the NQF's gradient on the block is
exactly ``2 Ĝ V`` with ``Ĝ = P_b G(r) P_b``, ``G(r) = 𝒜*(r)/N``.  With the seeded source ``s`` held fixed too
(the stepped run refreshes it every ``refresh`` steps; bridges start and end on that grid), ``n`` GD steps of
size ``h`` give, in the eigenbasis ``Ĝ = Σ_i g_i u_i u_iᵀ``::

    a_i(n) = b_iⁿ a_i(0) − h c_i (1 − b_iⁿ) / (1 − b_i),     b_i = 1 − 2 h g_i,

``a_i = u_iᵀ V``, ``c_i = u_iᵀ s P_⊥`` — GD's own multiplier, so a bridged run keeps its step's delay
(:func:`nqf.curves.step_clock` extrapolates it).  At the start (the first plateau) all of ``W`` is small and
the block is ``W`` itself.

A bridge is as long as the outputs move by at most ``BRIDGE_TOLERANCE`` of the residual's norm (the order of
what the linearisation leaves out: the residual's own change and the growing mode's self-interaction), half of
it for each part: the block's outputs ``𝒜(V Vᵀ)`` (from the closed form) and the frozen part's, at the rate its
own update ``d`` would move them, ``‖𝒜(W_f dᵀ + d W_fᵀ)‖`` per unit time — and by at most ``BRIDGE_TOLERANCE`` of
the frozen part's own outputs: a part that is still growing (a mode in its switch) would otherwise lose the
bridge's steps of growth, a delay of the whole bridge (found on the demo's set-up at ε = 1e-6, width 16: drop 1
21 % late before this bound).  Never past the run's last step.  Saves
that fall inside a bridge are written from the closed form (at most ``BRIDGE_SAVES`` of them, evenly spaced).

Where it applies, measured: the first plateau (iris at ε = 1e-12 and 1e-20, digits 0–4 at 1e-12, width 64,
20 η: drop times equal to the stepped run's within 0.001 %; tests/test_bridge.py).  The later plateaus are
mostly *not* bridged: there the frozen part keeps moving — the seeds' share in the columns that carry the
learned directions follows the growing unlearned block (the source depends on it), so the frozen part's
outputs drift at 20–30× the budget (iris, digits 0–4) and the criterion refuses.
"""

from __future__ import annotations

import math

import torch

from .._validation import divergence_message
from ..structure import StructureOperator
from ._factored import apply_G
from ._loop import DivergenceCheck, LoopOutcome
from ._trajectory import DIVERGED, FINISHED

__all__ = ["BRIDGE_TOLERANCE", "BRIDGE_SAVES", "Bridge", "plan_bridge", "bridged_loop"]

#: A bridge ends where the moving block's outputs have changed by this fraction of the residual.
BRIDGE_TOLERANCE = 1e-3
#: At most this many saves written inside one bridge.
BRIDGE_SAVES = 32


class Bridge:
    """The closed form of ``n`` GD steps on a plateau (module docstring): ``state(n)`` gives ``W`` after them."""

    __slots__ = ("W_frozen", "basis", "a0", "c", "g", "h")

    def __init__(self, W_frozen: torch.Tensor, basis: torch.Tensor, a0: torch.Tensor, c: torch.Tensor,
                 g: torch.Tensor, h: float):  # fmt: skip
        self.W_frozen, self.basis, self.a0, self.c, self.g, self.h = W_frozen, basis, a0, c, g, h

    def block(self, n: int) -> torch.Tensor:
        """The moving block ``V`` after ``n`` steps (p × m)."""
        x = torch.log1p(-2.0 * self.h * self.g)  # log b_i (b_i > 0 is checked when the bridge is planned)
        bn = torch.exp(n * x)
        hg = 2.0 * self.h * self.g
        small = hg.abs() < 1e-12
        geom = torch.where(small, torch.full_like(hg, float(n)), -torch.expm1(n * x) / torch.where(small, 1.0, hg))
        a = bn[:, None] * self.a0 - (self.h * geom)[:, None] * self.c
        return self.basis @ a

    def state(self, n: int) -> torch.Tensor:
        """``W`` after ``n`` steps."""
        return self.W_frozen + self.block(n)


def plan_bridge(
    op: StructureOperator,
    W: torch.Tensor,
    r: torch.Tensor,
    update: torch.Tensor,
    source: torch.Tensor,
    *,
    h: float,
    n_samples: int,
    remaining: int,
    min_steps: int,
) -> tuple[Bridge, int] | None:
    """The bridge from ``W`` and its length, or ``None`` where none is taken (module docstring).

    ``r`` is the residual at ``W`` (N × C), ``update`` the whole step direction ``∇L_NQF + s``, ``source`` the
    seeded source ``s`` (already off the learned directions), ``remaining`` the steps left in the run; bridges
    shorter than ``min_steps`` are not taken.
    """
    r_norm = float(r.norm())
    if r_norm == 0.0 or not math.isfinite(r_norm):
        return None
    budget = 0.5 * BRIDGE_TOLERANCE * r_norm
    split = _small_directions(op, W, budget)
    if split is None:
        return None
    basis_u, R = split
    V = basis_u @ (basis_u.T @ W)
    moving_update = basis_u @ (basis_u.T @ update)
    s_block = source
    if R is not None:
        V, moving_update, s_block = (x - (x @ R) @ R.T for x in (V, moving_update, source))
    frozen = W - V
    G_u = basis_u.T @ apply_G(op, r, basis_u, n_samples)
    g, U = torch.linalg.eigh(0.5 * (G_u + G_u.T))
    if float((2.0 * h * g).max()) >= 1.0:  # a multiplier b_i ≤ 0: GD oscillates there
        return None
    drift = update - moving_update  # the frozen part's own update, held at zero by the bridge
    drift_out = 0.5 * (op.forward_factor(frozen + drift) - op.forward_factor(frozen - drift))  # 𝒜(W_f dᵀ + d W_fᵀ)
    speed = h * float(drift_out.norm())  # its outputs' change per step
    # at most BRIDGE_TOLERANCE of its own outputs too: a frozen part that still grows would lose the bridge's steps
    allowed = min(budget, BRIDGE_TOLERANCE * float(op.forward_factor(frozen).norm())) if R is not None else budget
    if speed * min_steps > allowed:
        return None
    basis = basis_u @ U
    bridge = Bridge(frozen, basis, basis.T @ V, basis.T @ s_block, g, h)
    limit = remaining if speed == 0.0 else min(remaining, int(allowed / speed))
    n = _length(op, bridge, V, budget, limit)
    return (bridge, n) if n >= min_steps else None


def _small_directions(op: StructureOperator, W: torch.Tensor, budget: float):
    """``(basis, R)`` of the moving block: the most eigendirections of ``M = W Wᵀ``, smallest first, whose outputs
    ``𝒜(Q_b Λ_b Q_bᵀ)`` stay within ``budget`` (bisection on their number), and ``R`` (m × r) the unit combinations
    that carry the others (``None`` when the block is all of ``W``); ``None`` when not even one direction is small."""
    p = W.shape[0]
    if float(op.forward_factor(W).norm()) <= budget:
        return torch.eye(p, dtype=W.dtype, device=W.device), None
    _, Q = torch.linalg.eigh(W @ W.T)  # ascending

    def small(j: int) -> bool:
        return float(op.forward_factor(Q[:, :j] @ (Q[:, :j].T @ W)).norm()) <= budget

    if not small(1):
        return None
    lo, hi = 1, p  # small(lo); not small(hi) (all of W is not)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if small(mid) else (lo, mid)
    R = torch.linalg.svd(Q[:, lo:].T @ W, full_matrices=False)[2].T
    return Q[:, :lo], R


def _length(op: StructureOperator, bridge: Bridge, V0: torch.Tensor, limit: float, remaining: int) -> int:
    """The largest ``n ≤ remaining`` whose block outputs ``𝒜(V Vᵀ)`` moved by at most ``limit``."""
    base = op.forward_factor(V0)

    def ok(n: int) -> bool:
        moved = op.forward_factor(bridge.block(n)) - base
        return bool(torch.isfinite(moved).all()) and float(moved.norm()) <= limit

    lo, hi = 0, 1
    while hi < remaining and ok(hi):
        lo, hi = hi, min(2 * hi, remaining)
    if hi >= remaining and ok(remaining):
        return remaining
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def bridged_loop(W, *, op, lr, steps, n_samples, every, save_every, threshold, parts, save, bridge=True,
                 seed_until=None):  # fmt: skip
    """GD of the seeded NQF with its plateaus bridged (module docstring); returns ``(LoopOutcome, bridges, seeds_off)``.

    ``parts`` is ``(loss_and_residual, gradient, source)``: ``W ↦ (L, r)`` of the NQF, ``(W, r) ↦ ∇L_NQF`` and
    ``(W, g_nqf) ↦ s`` (the seeded source, refreshed every ``every`` steps); ``save(k, W, L)`` stores a state.
    ``bridges`` lists ``(first step, steps bridged)``.  A plateau is tried at the source refreshes (a bridge spans a
    multiple of them), again after ``every`` steps, and after twice as many each time it is refused (reset by a
    bridge); with ``bridge=False`` none is tried and every step is taken.  From the first step whose loss is at
    most ``seed_until`` on, the source is off and not evaluated again (the NQF's own GD); that step is returned as
    the third element (``None`` if never).
    """
    loss_and_residual, gradient, source_of = parts
    check = DivergenceCheck(threshold, W.dtype)
    bridges: list[tuple[int, int]] = []
    k, wait, next_try, s = 0, every, every if bridge else steps + 1, None
    status, message, seeds_off, saved = FINISHED, f"finished {steps} steps", None, 0
    while True:
        L, r = loss_and_residual(W)
        value = float(L)
        if not check.armed:
            check.arm(value)
        if check.exceeded(value):
            status = DIVERGED
            message = divergence_message(
                step=k, t=k * lr, loss=value, limit=float(check.limit), lr=lr, saved=saved,
                curvature=None, momentum=0.0, optimizer="gd",
            )  # fmt: skip
            break
        if k == steps or k % save_every == 0:
            save(k, W, value)
            saved += 1
        if k == steps:
            break
        g = gradient(W, r)
        if seeds_off is None and seed_until is not None and value <= seed_until:
            seeds_off = k
        if seeds_off is None and k % every == 0:  # the refresh grid; bridges start and end on it
            s = source_of(W, g)
            if k >= next_try:
                plan = plan_bridge(
                    op, W, r, g + s, s, h=lr, n_samples=n_samples, remaining=steps - k, min_steps=2 * every,
                )  # fmt: skip
                if plan is None:
                    wait *= 2
                    next_try = k + wait
                else:
                    bridge_k, n = plan
                    n = n if n == steps - k else n - n % every
                    saved += _save_inside(bridge_k, k, n, save_every, loss_and_residual, save)
                    W, k = bridge_k.state(n), k + n
                    bridges.append((k - n, n))
                    wait = every
                    next_try = k + wait
                    continue
        if seeds_off is None:  # g is the step's own tensor (a buffer of ``gradient``): the source added in place
            assert s is not None  # set at step 0 (k % every == 0)
            g = g.add_(s)
        W = torch.add(W, g, alpha=-lr)
        k += 1
    return LoopOutcome(params=[W], status=status, message=message), bridges, seeds_off


def _save_inside(bridge: Bridge, k: int, n: int, save_every: int, loss_and_residual, save) -> int:
    """The saves strictly inside a bridge from ``k`` over ``n`` steps (at most ``BRIDGE_SAVES``, evenly spaced);
    returns how many."""
    first = (k // save_every + 1) * save_every
    due = list(range(first, k + n, save_every))
    if len(due) > BRIDGE_SAVES:
        due = [due[round(i * (len(due) - 1) / (BRIDGE_SAVES - 1))] for i in range(BRIDGE_SAVES)]
    for j in due:
        Wj = bridge.state(j - k)
        save(j, Wj, float(loss_and_residual(Wj)[0]))
    return len(due)
