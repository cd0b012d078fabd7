r"""Training the real network beside the NQF run (docs/theory.md §6).

Same conventions as :func:`~nqf.dynamics.simulate`: ``L = (1/N) Σ_n ℓ(f_n, y_n)``
(MSE: ``ℓ = ½ Σ_c (f_c − y_c)²``), ``W ← W − η ∇_W L``, time ``t = η · step``,
the same minibatches for the same seed (:func:`~nqf.dynamics.simulate.minibatch_indices`),
weight decay ``(λ/2)‖W‖²`` and heavy-ball momentum in the ``torch.optim.SGD``
convention.

Only the units are trained: the unit weights ``W`` (p × m) are the one leaf
tensor; they are scattered into the module's parameters with fixed index
maps and the forward pass runs through :func:`torch.func.functional_call`,
so every parameter entry that is not part of a unit (other layers, biases
outside the unit layout, fixed attention values) stays at its value in
``module``.  Gradients come from plain ``torch.autograd``; the update is
applied by hand.  After the run the final ``W`` is written into ``module``.
"""

from __future__ import annotations

import math

import torch
from torch.func import functional_call

from .._validation import (as_tensor, check_inputs, check_saved_memory, check_shape, divergence_message,
                           divergence_threshold_value)
from ..structure.units import UnitLayout, UnitScatter  # noqa: F401  (re-exported; one implementation)
from .losses import check_loss, loss_value, prepare_targets
from .simulate import check_run_args, minibatch_indices
from .trajectory import DIVERGED, FINISHED, Trajectory
from ..errors import InvalidTypeError

__all__ = ["train_network", "UnitScatter"]


def train_network(module: torch.nn.Module, units: UnitLayout, X, y, *, W0, lr: float, steps: int,
                  loss: str = "mse", output=None, optimizer: str = "gd", batch_size: int | None = None,
                  weight_decay: float = 0.0, momentum: float = 0.0, seed: int = 0,
                  save_every: int | None = None, adam_betas=(0.9, 0.999), adam_eps: float = 1e-8,
                  divergence_threshold: float = 1e8, save_W: bool = True, save_M: bool = True) -> Trajectory:
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
    lr, steps, loss, optimizer, batch_size, weight_decay, momentum, seed, save_every,
    adam_betas, adam_eps, divergence_threshold
        As in :func:`~nqf.dynamics.simulate`.
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
    check_loss(loss)
    if not isinstance(module, torch.nn.Module):
        raise InvalidTypeError(f"`module` must be a torch.nn.Module; found {type(module).__name__}")
    X = check_inputs("X", X)
    N = int(X.shape[0])
    lr, steps, batch_size, save_every = check_run_args(lr, steps, optimizer, batch_size, momentum,
                                                       weight_decay, N, save_every)
    divergence_threshold = divergence_threshold_value(divergence_threshold)
    scatter = UnitScatter(module, units)
    ref = next(iter(scatter.base.values()))
    dt, dev = ref.dtype, ref.device
    X = X.to(dev)
    W = as_tensor("W0", W0, ndim=2, dtype=dt, device=dev)
    check_shape("W0", W, (scatter.p, scatter.m))
    itemsize = torch.empty((), dtype=dt).element_size()
    check_saved_memory(steps, save_every, itemsize * ((scatter.p * scatter.m if save_W else 0)
                                                      + (scatter.p ** 2 if save_M else 0)) + 16, device=dev)

    def predict(Wt, xb):
        out = functional_call(module, scatter(Wt), (xb,))
        if output is not None:
            out = output(out)
        return out.reshape(out.shape[0], -1)

    with torch.no_grad():
        f0 = predict(torch.zeros_like(W), X)
    C = f0.shape[1]
    yt = prepare_targets(y, loss, N, C, dt, dev)
    V = torch.zeros_like(W) if momentum else None
    if optimizer == "adam":
        m1, m2 = torch.zeros_like(W), torch.zeros_like(W)
    rec = dict(step=[], loss=[], W=[], M=[])
    status, message, limit = FINISHED, f"finished {steps} steps", None
    batches = minibatch_indices(N, batch_size, steps, seed)
    for k in range(steps + 1):
        last = k == steps
        idx = None if last else next(batches)
        Wl = W.detach().requires_grad_(True)
        xb, yb = (X, yt) if idx is None else (X[idx.to(X.device)], yt[idx.to(dev)])
        f = predict(Wl, xb)
        Lb = loss_value(f, yb, loss)
        Lb_val = float(Lb.detach())
        want_save = last or k % save_every == 0
        if idx is None:
            Lfull = Lb_val
        elif want_save or limit is None:
            with torch.no_grad():
                Lfull = float(loss_value(predict(W, X), yt, loss))
        if limit is None:
            limit = divergence_threshold * max(Lfull, torch.finfo(dt).tiny)
        if not math.isfinite(Lb_val) or Lb_val > limit:
            status = DIVERGED
            message = divergence_message(step=k, t=k * lr, loss=Lb_val, limit=limit, lr=lr, saved=len(rec["step"]),
                                         curvature=None, momentum=momentum, optimizer=optimizer)
            break
        if want_save:
            rec["step"].append(k)
            rec["loss"].append(Lfull)
            if save_W:
                rec["W"].append(W.detach().clone())
            if save_M:
                rec["M"].append(W.detach() @ W.detach().T)
        if last:
            break
        (g,) = torch.autograd.grad(Lb, Wl)
        with torch.no_grad():
            if weight_decay:
                g = g + weight_decay * W
            if optimizer == "adam":
                b1, b2 = adam_betas
                m1.mul_(b1).add_(g, alpha=1 - b1)
                m2.mul_(b2).addcmul_(g, g, value=1 - b2)
                W = W - lr * (m1 / (1 - b1 ** (k + 1))) / ((m2 / (1 - b2 ** (k + 1))).sqrt() + adam_eps)
            elif momentum:
                V = momentum * V + g
                W = W - lr * V
            else:
                W = W - lr * g
    units.set_W(module, W.detach())
    step = torch.tensor(rec["step"], dtype=torch.long)
    return Trajectory(t=step.to(dtype=dt, device=dev) * lr, loss=torch.tensor(rec["loss"], dtype=dt, device=dev),
                      step=step, M=torch.stack(rec["M"]) if rec["M"] else None,
                      W=torch.stack(rec["W"]) if rec["W"] else None, status=status, message=message,
                      info=dict(form="network", optimizer=optimizer, lr=lr, steps=steps, batch_size=batch_size,
                                weight_decay=weight_decay, momentum=momentum, loss=loss, seed=seed,
                                save_every=save_every, width=scatter.m, f0=f0))
