"""The real network's training loop against a plain torch loop on the same problem (issue 34).

``nqf.train_network`` trains a module's units with full-batch GD and records the full-data loss at every
step; the plain loop is what a user writes: ``torch.optim.SGD`` over the module's parameters, the MSE
``½ Σ_c (f_c − y_c)²`` averaged over samples, the loss read out (``float``) at every step.  Both start from
the same ``W(0)`` (ε = 1e-12) and take the same steps; their loss curves must agree to round-off (checked
here, printed as the largest relative difference).  Runs come in pairs, each loop first in half of them (the
first of a pair is the slower on this machine: digits, 0.82–0.97 with the plain loop first and 0.91–1.38 with
nqf's first), one torch thread, and the ratio of the medians is printed.

    OMP_NUM_THREADS=1 python benchmarks/bench_training_loop.py
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import torch

from nqf.data import load_dataset
from nqf.dynamics import initial_weights, train_network
from nqf.networks import TwoLayerMLP

SETUPS = {"iris": (64, 4000, 0.02), "digits": (128, 400, 0.0133)}
REPEATS = 6  # even: each loop runs first in half of the pairs


def _problem(name: str):
    d = load_dataset(name)
    X = torch.as_tensor(np.asarray(d.X), dtype=torch.float64)
    Y = torch.as_tensor(np.asarray(d.Y), dtype=torch.float64)
    return X, Y


def _nqf(X, Y, width, W0, lr, steps):
    net = TwoLayerMLP(X.shape[1], width, Y.shape[1], "tanh")
    t0 = time.perf_counter()
    tr = train_network(net, net.units, X, Y, W0=W0, lr=lr, steps=steps, save_every=1, save_W=False, save_M=False)
    return time.perf_counter() - t0, tr.loss.numpy()


def _plain(X, Y, width, W0, lr, steps):
    net = TwoLayerMLP(X.shape[1], width, Y.shape[1], "tanh")
    net.units.set_W(net, torch.as_tensor(W0))
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    losses = []
    t0 = time.perf_counter()
    for k in range(steps + 1):
        L = 0.5 * ((net(X) - Y) ** 2).sum(1).mean()
        losses.append(float(L.detach()))
        if k == steps:
            break
        opt.zero_grad()
        L.backward()
        opt.step()
    return time.perf_counter() - t0, np.array(losses)


def main() -> None:
    torch.set_num_threads(1)
    print(
        f"{'set-up':8s} {'steps':>6s} {'train_network s':>16s} {'plain torch s':>14s} {'ratio':>6s} {'max |ΔL|/L':>11s}"
    )
    for name, (width, steps, lr) in SETUPS.items():
        X, Y = _problem(name)
        W0 = initial_weights(X.shape[1] + Y.shape[1], width, 1e-12, seed=0)
        a, b, diff = [], [], 0.0
        for i in range(REPEATS):  # each loop first in half of the pairs (module docstring)
            if i % 2:
                tb, Lb = _plain(X, Y, width, W0, lr, steps)
                ta, La = _nqf(X, Y, width, W0, lr, steps)
            else:
                ta, La = _nqf(X, Y, width, W0, lr, steps)
                tb, Lb = _plain(X, Y, width, W0, lr, steps)
            a.append(ta)
            b.append(tb)
            diff = max(diff, float(np.max(np.abs(La - Lb) / Lb)))
        ma, mb = statistics.median(a), statistics.median(b)
        print(f"{name:8s} {steps:6d} {ma:16.3f} {mb:14.3f} {ma / mb:6.2f} {diff:11.1e}")


if __name__ == "__main__":
    main()
