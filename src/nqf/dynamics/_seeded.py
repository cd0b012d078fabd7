r"""The seeded NQF: the NQF clock of the real network, with the seeds of the next orders (docs/theory.md §7).

Near ``W = 0`` a module is its quadratic form (the NQF); once a mode has switched on its
units carry ``O(1)`` weights and the rest of the Taylor series of the module
(``T₃``, ``T₄``, … of the normal form, here summed to all orders by evaluating the module
itself) has a gradient along the directions that are still unlearned.  That gradient does
not vanish when those directions' weights are zero: it *seeds* the later modes with an
``ε``-independent amplitude, and below some ``ε`` the real network's later drops come
earlier than the NQF's.

The seeded NQF follows the NQF's own dynamics in every direction that is learned and adds
the module's extra gradient only in the directions that are not::

    W ← W − η [ ∇L_NQF(W) + P_u(W) (∇L_module(W) − ∇L_NQF(W)) ]

with ``P_u = I − Q Qᵀ``, ``Q`` the eigenvectors of ``M = W Wᵀ`` whose eigenvalue exceeds
``learned_fraction`` times the largest (a learned direction; the default 0.05 is where a
unit's own cubic correction, of relative size ``‖w‖²``, reaches a few per cent of its
quadratic term).  The learned modes therefore keep the NQF's plateau levels and switches;
the unlearned ones receive the seeds, and their escape and the later drops come when the
seeds say.  The source is re-evaluated every ``refresh`` steps (it changes on the time scale
of a switch, ``1/ζ``, not of a step).

Measured against the real network trained by plain GD from the same ``W(0)``
(tests/test_seeded.py; docs/theory.md §7): every drop within 0.5 % on iris (tanh, width 64)
and 1.2 % on digits restricted to five classes for ε = 1e-4 … 1e-20, where the NQF is up to
86 % late.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .._validation import (
    check_inputs,
    divergence_threshold_value,
    float_param,
    int_param,
    steps_value,
    unit_fraction,
)
from ..errors import InvalidParameterError, InvalidTypeError, NormalFormError
from ..modules import UnitLayout, UnitScatter
from ..results import Result
from ..structure import StructureOperator
from ._bridge import bridged_loop
from ._factored import apply_G
from ._initial import initial_state
from ._loss import Loss, as_loss
from ._optim import as_optimizer
from ._save import Recorder, Save, as_save
from ._trajectory import Trajectory

__all__ = ["seeded_nqf", "Seeding", "unlearned_projector", "LEARNED_FRACTION"]

#: A direction of ``M`` counts as learned above this fraction of its largest eigenvalue.
LEARNED_FRACTION = 0.05


def unlearned_projector(W: torch.Tensor, learned_fraction: float = LEARNED_FRACTION) -> torch.Tensor:
    """``P_u = I − Q Qᵀ`` (p × p): the projector off the learned directions of ``M = W Wᵀ``.

    ``Q`` holds the eigenvectors of ``M`` whose eigenvalue exceeds ``learned_fraction`` times
    the largest.  At an isotropic start ``M = εI`` every direction counts as learned (there is
    nothing to seed yet); once a mode has switched on, the directions still at ``O(ε)`` are the
    unlearned ones.
    """
    M = W @ W.T
    ev, Q = torch.linalg.eigh(M)
    keep = ev > learned_fraction * ev.max()
    Ql = Q[:, keep]
    return torch.eye(M.shape[0], dtype=M.dtype, device=M.device) - Ql @ Ql.T


@dataclass(frozen=True)
class Seeding(Result):
    """How :func:`seeded_nqf` seeds the unlearned directions, and when it stops (docs/theory.md §7).

    Attributes
    ----------
    learned_fraction : float
        A direction of ``M`` is learned above this fraction of its largest eigenvalue (default 0.05).
    refresh : int
        Steps between evaluations of the module's extra gradient (default 10).
    bridge : bool
        Bridge plateaus in closed form: the GD steps of the still-small directions are taken at once, with the
        source and the residual held fixed, as long as the outputs of those directions and of the frozen rest move
        by at most 10⁻³ of the residual.  In practice the first plateau (drop times unchanged to 0.001 % on iris
        and digits 0–4); later ones are refused where the rest keeps moving.  The bridged steps are listed in
        ``info["bridges"]`` as ``(first step, steps)``.
    seed_until : float, optional
        From the first step whose loss is at most this value on, the seeds are off: the run goes on as the NQF's
        own GD, and the module is not evaluated again.  :func:`nqf.analyze` sets it past the last predicted drop,
        where there is nothing left to seed.  The step is ``info["seeds_off"]`` (``None``: never).  Default:
        seeded to the end.
    source : tuple ``(op_s, X_s, y_s)``, optional
        Compute the seeds on other samples: the module's extra gradient on ``X_s``, ``y_s`` against the NQF
        ``op_s`` of the same units on ``X_s`` (default: the data themselves).  For testing which properties of the
        data seed the later modes: a large Gaussian sample with the data's joint ``(x, y)`` mean and covariance
        leaves the seeds out (iris, ε = 1e-12: drop 2 at +33 % of the real network with 3·10⁴ Gaussian samples,
        +2 … +11 % with 3·10³; benchmarks/bench_corrections.py ``planted``).
    """

    learned_fraction: float = LEARNED_FRACTION
    refresh: int = 10
    bridge: bool = False
    seed_until: float | None = None
    source: tuple | None = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(
            self,
            "learned_fraction",
            unit_fraction("learned_fraction", self.learned_fraction, "of M's largest eigenvalue"),
        )
        object.__setattr__(self, "refresh", int_param("refresh", self.refresh, minimum=1))
        if not isinstance(self.bridge, bool):
            raise InvalidTypeError(f"`bridge` must be True or False; found {self.bridge!r}")
        if self.seed_until is not None:
            object.__setattr__(self, "seed_until", float_param("seed_until", self.seed_until))

    def to_dict(self) -> dict:
        out = {k: getattr(self, k) for k in ("learned_fraction", "refresh", "bridge", "seed_until")}
        return {**out, "source": self.source is not None}


def seeded_nqf(
    op: StructureOperator,
    module: torch.nn.Module,
    units: UnitLayout,
    X,
    y,
    *,
    W0,
    lr: float,
    steps: int,
    loss: str | Loss = "mse",
    output=None,
    seeding: Seeding | None = None,
    save: Save | None = None,
    divergence_threshold: float = 1e8,
) -> Trajectory:
    r"""GD of the seeded NQF (module docstring) from ``W0``: the NQF with the next orders' seeds.

    Parameters
    ----------
    op : StructureOperator
        The NQF of ``module``'s units on ``X`` (the zero-gradient condition must hold), with the
        unit layout of ``units`` (as :func:`nqf.modules.from_module` or a checked analytic operator).
    module : torch.nn.Module
        The real module; its parameters outside the units stay fixed.  It is only *evaluated*
        (its gradient along the seeded trajectory), never trained.
    units : UnitLayout
    X : torch.Tensor, shape (N, ...)
    y : array_like, shape (N,) or (N, C)
    W0 : array_like, shape (p, m)
        The initial unit weights (the same ``W(0)`` as the NQF and the real network).
    lr, steps
        Full-batch GD step and number of steps (time ``t = lr · step``).
    loss, output, divergence_threshold
        As in :func:`~nqf.dynamics.train_network`.
    seeding : Seeding, optional
        How the seeds are made and when they stop (:class:`Seeding`; default ``Seeding()``).
    save : Save, optional
        What is saved (:class:`~nqf.dynamics.Save`; default: about a thousand states, ``W`` and ``M``).

    Returns
    -------
    Trajectory
        ``loss`` is the NQF loss of the seeded weights (the predicted curve: the NQF's levels at
        the seeded times); ``W``/``M`` as saved; ``info["form"] = "seeded"``.
    """
    loss = as_loss(loss)
    if not isinstance(op, StructureOperator):
        raise InvalidTypeError(f"`op` must be a StructureOperator; found {type(op).__name__}")
    if not op.satisfies_zgz:
        raise NormalFormError(
            "`op` fails the zero-gradient condition (linear or cross-unit terms): the seeded NQF needs the "
            "closed form ∇L = 2𝒜*(r/N)W; found an operator with b or B terms"
        )
    if not isinstance(module, torch.nn.Module):
        raise InvalidTypeError(f"`module` must be a torch.nn.Module; found {type(module).__name__}")
    seeding = Seeding() if seeding is None else seeding
    if not isinstance(seeding, Seeding):
        raise InvalidTypeError(f"`seeding` must be a nqf.dynamics.Seeding; found {type(seeding).__name__}")
    X = check_inputs("X", X)
    N, steps = int(X.shape[0]), steps_value(steps)
    keep = as_save(save).resolve(steps)
    opt = as_optimizer("gd", lr=lr)
    scatter = UnitScatter(module, units)
    if scatter.p != op.p:
        raise InvalidParameterError(f"`units` must have unit dimension op.p = {op.p}; found p = {scatter.p}")
    dt = op.dtype
    W = initial_state(scatter.p, W0=W0, width=scatter.m, dtype=dt, device=op.device).W0
    assert W is not None
    X = X.to(device=op.device, dtype=dt)

    def module_fn(Wt, xb):
        return scatter.module_output(module, Wt, xb, output)

    with torch.no_grad():
        f0 = module_fn(torch.zeros_like(W), X)
    yt = loss.prepare(y, N, f0.shape[1], dt, op.device)
    nqf_fn = _nqf_steps(op, f0, yt, loss, N)
    rec = Recorder(keep.count(steps))
    extra = _extra_gradient(module_fn, loss, seeding.source, (op, X, yt, torch.zeros_like(W)), dt)
    out, bridges, seeds_off = _run(op, W, nqf_fn, extra, seeding, (opt.lr, steps, N, keep), divergence_threshold, rec)
    info = {"form": "seeded", "learned_fraction": seeding.learned_fraction, "refresh": seeding.refresh,
            **opt.to_dict(), "steps": steps}  # fmt: skip
    info["bridges"] = bridges
    info["seed_until"], info["seeds_off"] = seeding.seed_until, seeds_off
    info.update(loss.to_dict(), **keep.to_dict(), width=scatter.m, f0=f0)
    return rec.trajectory(lr=opt.lr, dtype=dt, device=op.device, status=out.status, message=out.message, info=info)


def _run(op, W, nqf_fn, extra, seeding: Seeding, run: tuple, threshold, rec: Recorder):
    """The seeded NQF's GD through :func:`bridged_loop` (every step taken without ``seeding.bridge``)."""
    lr, steps, N, keep = run
    loss_and_residual, gradient = nqf_fn

    def source_of(Wk, g_nqf):
        return unlearned_projector(Wk, seeding.learned_fraction) @ extra(Wk, g_nqf)

    def store(k, Wk, L):
        _store(rec, keep, k, Wk, L)

    return bridged_loop(
        W, op=op, lr=lr, steps=steps, n_samples=N, every=seeding.refresh, save_every=keep.every or steps,
        threshold=divergence_threshold_value(threshold), parts=(loss_and_residual, gradient, source_of), save=store,
        bridge=seeding.bridge, seed_until=seeding.seed_until,
    )  # fmt: skip


def _store(rec: Recorder, keep: Save, k: int, W: torch.Tensor, L: float) -> None:
    Wd = W.detach()
    rec.add(k, L, W=Wd if keep.W else None, M=Wd @ Wd.T if keep.M else None)  # the recorder copies W


def _grad(fn, W: torch.Tensor) -> torch.Tensor:
    with torch.enable_grad():
        V = W.detach().requires_grad_(True)
        (g,) = torch.autograd.grad(fn(V), V)
    return g.detach()


def _extra_gradient(module_fn, loss: Loss, source: tuple | None, own: tuple, dt):
    """``W, g_nqf ↦ ∇_W L_module − ∇_W L_NQF`` on the data (``own = (op, X, y, zero W)``, reusing ``g_nqf``) or on
    the samples of ``source = (op_s, X_s, y_s)``."""
    if source is None:
        X, yt = own[1], own[2]
        return lambda W, g_nqf: _grad(lambda V: loss.value(module_fn(V, X), yt), W) - g_nqf
    try:
        op_s, Xs, ys = source
    except (TypeError, ValueError):
        raise InvalidParameterError(
            f"`source` must be a tuple (op_s, X_s, y_s); found {type(source).__name__}"
            + (f" of length {len(source)}" if isinstance(source, (tuple, list)) else "")
        ) from None
    if not isinstance(op_s, StructureOperator) or op_s.p != own[0].p:
        found = f"p = {op_s.p}" if isinstance(op_s, StructureOperator) else type(op_s).__name__
        raise InvalidParameterError(f"`source`: op_s must be a StructureOperator with p = {own[0].p}; found {found}")
    Xs = check_inputs("source X_s", Xs).to(device=own[0].device, dtype=dt)
    with torch.no_grad():
        f0s = module_fn(own[3], Xs)
    yst = loss.prepare(ys, int(Xs.shape[0]), f0s.shape[1], dt, own[0].device)
    nqf_s = _nqf_predictions(op_s, f0s)

    def extra(W, _g_nqf):
        r_s = loss.residual(nqf_s(W), yst).reshape(Xs.shape[0], -1)
        return _grad(lambda V: loss.value(module_fn(V, Xs), yst), W) - 2.0 * apply_G(op_s, r_s, W, Xs.shape[0])

    return extra


def _nqf_predictions(op: StructureOperator, f0: torch.Tensor):
    def predict(Wt):
        return f0 + op.forward_factor(Wt).reshape(f0.shape)

    return predict


def _nqf_steps(op: StructureOperator, f0: torch.Tensor, yt: torch.Tensor, loss: Loss, N: int):
    """``(loss_and_residual, gradient)`` of the NQF: ``W ↦ (L, r)`` with ``r`` of shape ``(N, C)``, and
    ``(W, r) ↦ ∇_W L_NQF = 2 G(r) W``.  For MSE on a two-block operator (every two-layer MLP:
    :meth:`~nqf.structure.BilinearStructure.factor_blocks`) each is one pass over the rows and two small
    products, the passes of :func:`nqf.dynamics.simulate`'s hot path, written into buffers that the next call
    overwrites (the loop uses ``r`` and the gradient within its step); otherwise the operator's general
    ``forward_factor`` / ``adjoint_apply``."""
    blocks, passes = getattr(op, "factor_blocks", None), getattr(op, "factor_passes", None)
    p1 = None if blocks is None or passes is None or loss.name != "mse" else blocks()
    if p1 is None or passes is None:
        predict = _nqf_predictions(op, f0)

        def general(Wt):
            f = predict(Wt)
            return loss.value(f, yt), loss.residual(f, yt).reshape(N, -1)

        return general, lambda Wt, r: 2.0 * apply_G(op, r, Wt, N)
    forward, adjoint, scale = passes(f0 - yt)  # MSE: the forward pass gives r = f − y
    half_over_n, g_scale = 0.5 / N, scale / N
    p = op.p
    buffers: dict = {}

    def _buffers(Wt):
        if buffers.get("m") != Wt.shape[1]:
            buffers.update(m=Wt.shape[1], Bt=Wt.new_empty(p - p1, p1), r=Wt.new_empty(N, yt.shape[1]),
                           Kbt=Wt.new_empty(p - p1, p1), g=Wt.new_empty(p, Wt.shape[1]))  # fmt: skip
        return buffers

    def loss_and_residual(Wt):
        b = _buffers(Wt)
        r = forward(torch.mm(Wt[p1:], Wt[:p1].T, out=b["Bt"]), b["r"])
        rv = r.view(-1)
        return torch.dot(rv, rv) * half_over_n, r

    def gradient(Wt, r):  # 2 G W = (σ'(0)/N) [K̄ W_r; K̄ᵀ W_l], the pass giving K̄ᵀ/σ'(0)
        b = _buffers(Wt)
        Kbt, g = adjoint(r, b["Kbt"]), b["g"]
        torch.mm(Kbt.T, Wt[p1:], out=g[:p1])
        torch.mm(Kbt, Wt[:p1], out=g[p1:])
        return g.mul_(g_scale)

    return loss_and_residual, gradient
