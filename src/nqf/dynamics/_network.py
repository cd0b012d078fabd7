r"""Training the real network beside the NQF run (docs/theory.md §6).

Same conventions as :func:`~nqf.dynamics.simulate`: ``L = (1/N) Σ_n ℓ(f_n, y_n)``
(MSE: ``ℓ = ½ Σ_c (f_c − y_c)²``), ``W ← W − η ∇_W L``, time ``t = η · step``,
the same minibatches for the same seed (:func:`~nqf.dynamics._loop.minibatch_indices`),
weight decay ``(λ/2)‖W‖²`` and heavy-ball momentum in the ``torch.optim.SGD``
convention.

Only the units are trained: the unit weights ``W`` (p × m) are written into the
module's own parameters with fixed index maps before each forward (in place, as a
plain torch loop's optimizer does), the module runs as itself, and plain
``torch.autograd`` differentiates its unit parameters; the gradient is gathered
back into ``W``'s layout.  Every parameter entry that is not part of a unit (other
layers, biases outside the unit layout, fixed attention values) is never written and
keeps its value in ``module``.  The update is the one of
:func:`~nqf.dynamics._loop.training_loop` (shared with :func:`~nqf.dynamics.simulate`).
The module holds the current ``W`` during the run and the final ``W`` after it.
"""

from __future__ import annotations

import contextlib

import torch

from .._memory import check_saved_memory
from .._validation import check_inputs, divergence_threshold_value, steps_value
from ..errors import InvalidTypeError
from ..modules import UnitLayout, UnitScatter  # noqa: F401  (re-exported; one implementation)
from ._initial import initial_state
from ._loop import training_loop
from ._loss import Loss, as_loss
from ._optim import Optimizer, optimizer_object
from ._save import Recorder, Save, as_save
from ._trajectory import Trajectory

__all__ = ["train_network", "UnitScatter"]

#: Full-batch runs on more samples than this evaluate the loss and its gradient in chunks of this many
#: samples (the sum of the chunks' weighted means: the same loss and gradient, activations of one chunk
#: in memory instead of all N; a tanh MLP of width 512 on 10⁵ samples: 4 × 400 MB arrays otherwise).
CHUNK_SAMPLES = 4096
#: Below this many multiply-adds a step (``N · p · m``) the run uses one torch thread: the parallel regions of
#: small kernels cost more than they gain, and with a busy second core their threads spin (attention of width
#: 8 on digits, N · p · m = 5·10⁵: 530 ms a step with two threads on the shared 2-core machine, 31 ms with one;
#: the issue's 257 s of system time).  Larger runs keep the thread count the caller set.
SMALL_STEP_MACS = 2**26


def train_network(
    module: torch.nn.Module,
    units: UnitLayout,
    X,
    y,
    *,
    W0,
    optimizer: Optimizer,
    steps: int,
    loss: str | Loss = "mse",
    output=None,
    seed: int = 0,
    save: Save | None = None,
    divergence_threshold: float = 1e8,
) -> Trajectory:
    r"""Train the units of a real ``nn.Module`` with the NQF conventions.

    Parameters
    ----------
    module : torch.nn.Module
        The network (e.g. :class:`nqf.networks.TwoLayerMLP`); its non-unit
        parameters are held fixed.  Its final unit weights are written back.
    units : UnitLayout
        The unit axis (``module.units`` for nqf networks), ``p`` and ``m``.
    X : torch.Tensor, shape (N, ...)
        Inputs (on the module's device).
    y : array_like, shape (N,) or (N, C)
        Targets, as for :func:`~nqf.dynamics.simulate`.
    W0 : array_like, shape (p, m)
        Initial unit weights, written with the layout so that ``M(0) = W0 W0ᵀ``
        matches an NQF run started from the same ``W0``/``M0``.
    optimizer, steps, loss, seed, save, divergence_threshold
        As in :func:`~nqf.dynamics.simulate` (an :class:`~nqf.dynamics.Optimizer`, a :class:`~nqf.dynamics.Loss`
        or its name, a :class:`~nqf.dynamics.Save`).
    output : callable, optional
        Maps the module's raw output to the ``(N, C)`` (or ``(N,)``) predictions
        (e.g. pick one token); default: the output itself, a trailing axis of
        size 1 squeezed for a single target.

    Returns
    -------
    Trajectory
        ``t``, ``step``, full-data ``loss``, ``W`` (K, p, m) and ``M = W Wᵀ``
        (K, p, p); ``info["f0"]`` holds the network output at ``W = 0`` (N, C).
    """
    loss = as_loss(loss)
    if not isinstance(module, torch.nn.Module):
        raise InvalidTypeError(f"`module` must be a torch.nn.Module; found {type(module).__name__}")
    X = check_inputs("X", X)
    N = int(X.shape[0])
    steps = steps_value(steps)
    keep = as_save(save).resolve(steps)
    opt = optimizer_object(optimizer)
    opt.check_samples(N)
    save_every = keep.every
    assert save_every is not None  # resolved
    divergence_threshold = divergence_threshold_value(divergence_threshold)
    scatter = UnitScatter(module, units)
    ref = next(iter(scatter.base.values()))
    dt, dev = ref.dtype, ref.device
    X = X.to(device=dev, dtype=dt) if X.is_floating_point() else X.to(dev)  # float32 data, a float64 module
    W = initial_state(scatter.p, W0=W0, width=scatter.m, dtype=dt, device=dev).W0
    assert W is not None  # W0 given: the parser returns it
    itemsize = torch.empty((), dtype=dt).element_size()
    check_saved_memory(
        steps,
        save_every,
        itemsize * ((scatter.p * scatter.m if keep.W else 0) + (scatter.p**2 if keep.M else 0)) + 16,
        device=dev,
    )

    obj = _Objective(module, scatter, output, X, loss)
    with torch.no_grad():
        f0 = obj.predict(torch.zeros_like(W), X)
    obj.yt = loss.prepare(y, N, f0.shape[1], dt, dev)
    rec = Recorder(keep.count(steps))

    def store(k, params, Lfull):
        Wd = params[0].detach()
        rec.add(k, Lfull, W=Wd.clone() if keep.W else None, M=Wd @ Wd.T if keep.M else None)

    threads = torch.get_num_threads()
    if N * scatter.p * scatter.m < SMALL_STEP_MACS:
        torch.set_num_threads(1)
    try:
        with obj.training():
            out = _loop(W, opt, steps, N, seed, save_every, divergence_threshold, obj, store)
    finally:
        torch.set_num_threads(threads)
    W = out.params[0]
    units.set_W(module, W.detach())
    info = {"form": "network", **opt.to_dict(), "steps": steps, **loss.to_dict(), "seed": seed}
    info.update(keep.to_dict(), width=scatter.m, f0=f0)
    return rec.trajectory(lr=opt.lr, dtype=dt, device=dev, status=out.status, message=out.message, info=info)


def _loop(W, opt, steps, N, seed, save_every, divergence_threshold, obj, store):
    """:func:`~nqf.dynamics._loop.training_loop` on the unit weights with the objective ``obj``."""
    return training_loop(
        [W],
        opt,
        steps=steps,
        n_samples=N,
        batch_size=opt.batch_size,
        seed=seed,
        save_every=save_every,
        divergence_threshold=divergence_threshold,
        evaluate=obj.evaluate,
        full_loss=obj.full_loss,
        save=store,
        gradient=obj.gradient,
    )


class _Objective:
    """The loss of the real module as a function of the unit weights: the batch loss with what its gradient needs
    (``evaluate``/``gradient`` of :func:`~nqf.dynamics._loop.training_loop`) and the full-data loss; full batches of
    more than :data:`CHUNK_SAMPLES` samples in chunks.

    A step is what a plain torch loop does: ``W`` is written into the module's own parameters (in place, no graph),
    the module runs as itself and autograd differentiates its unit parameters; the gradient is gathered back into
    ``W``'s layout (the index maps of :attr:`UnitScatter.rows`).  No :func:`torch.func.functional_call` and no
    differentiable scatter per step (iris, width 64: 1.37× a plain torch loop with them, 1.04–1.15× without;
    benchmarks/bench_training_loop.py).
    Entries outside the units are never written, so they keep their values.  Used inside :meth:`training`, which
    lets autograd track the unit parameters only and restores every ``requires_grad`` flag afterwards.
    """

    def __init__(self, module, scatter, output, X, loss):
        self.module, self.scatter, self.output, self.X, self.loss = module, scatter, output, X, loss
        self.yt: torch.Tensor = torch.empty(0)
        N = self.N = int(X.shape[0])
        self.chunks = (
            [slice(a, min(a + CHUNK_SAMPLES, N)) for a in range(0, N, CHUNK_SAMPLES)] if N > CHUNK_SAMPLES else []
        )
        named = dict(module.named_parameters())
        self.params = [named[n] for n in scatter.rows]
        self.p, self.m = scatter.p, scatter.m
        # per parameter: flat indices into W and, in the same order, into the parameter (one index_select and one
        # index_copy_ per parameter and direction instead of advanced indexing)
        self.plan = []
        for w_rows, idx in scatter.rows.values():
            src = (w_rows.reshape(-1, 1) * scatter.m + torch.arange(scatter.m, device=w_rows.device)).reshape(-1)
            self.plan.append((src, idx.reshape(-1)))

    @contextlib.contextmanager
    def training(self):
        """Autograd on the unit parameters only (flags restored on exit, also on an error)."""
        flags = [(q, q.requires_grad) for q in self.module.parameters()]
        try:
            for q, _ in flags:
                q.requires_grad_(False)
            for q in self.params:
                q.requires_grad_(True)
            yield self
        finally:
            for q, flag in flags:
                q.requires_grad_(flag)

    def load(self, W: torch.Tensor) -> None:
        """Write ``W`` into the module's unit entries (in place)."""
        flat = W.detach().reshape(-1)
        with torch.no_grad():
            for q, (src, dst) in zip(self.params, self.plan, strict=True):
                q.view(-1).index_copy_(0, dst, flat.index_select(0, src).to(q.dtype))

    def _run(self, xb):
        out = self.module(xb)
        if self.output is not None:
            out = self.output(out)
        return out.reshape(out.shape[0], -1)

    def predict(self, Wt, xb):
        self.load(Wt)
        return self._run(xb)

    def _grad_W(self, L) -> torch.Tensor:
        grads = torch.autograd.grad(L, self.params)
        out = torch.empty(self.p * self.m, dtype=grads[0].dtype, device=grads[0].device)
        for g, (src, dst) in zip(grads, self.plan, strict=True):
            out.index_copy_(0, src, g.reshape(-1).index_select(0, dst))
        return out.reshape(self.p, self.m)

    def evaluate(self, params, idx):
        self.load(params[0])
        X, yt, N = self.X, self.yt, self.N
        if idx is None and self.chunks:  # full batch in chunks
            Lsum, grad = torch.zeros((), dtype=params[0].dtype, device=params[0].device), None
            for sl in self.chunks:
                Lc = self.loss.value(self._run(X[sl]), yt[sl]) * ((sl.stop - sl.start) / N)
                g = self._grad_W(Lc)
                grad = g if grad is None else grad + g
                Lsum += Lc.detach()
            return Lsum, grad
        xb, yb = (X, yt) if idx is None else (X[idx.to(X.device)], yt[idx.to(yt.device)])
        Lb = self.loss.value(self._run(xb), yb)
        # the gradient now: the loop may evaluate the full-data loss (which rewrites the parameters) before it asks
        return Lb.detach(), self._grad_W(Lb)

    def full_loss(self, params) -> float:
        X, yt = self.X, self.yt
        self.load(params[0])
        with torch.no_grad():
            if not self.chunks:
                return float(self.loss.value(self._run(X), yt))
            parts = (float(self.loss.value(self._run(X[sl]), yt[sl])) * (sl.stop - sl.start) for sl in self.chunks)
            return sum(parts) / self.N

    @staticmethod
    def gradient(params, ctx, idx):
        return [ctx]
