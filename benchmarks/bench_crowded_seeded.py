"""Crowded drops (issue 22) against the real network's clock (issue 20): is the real network's slower decay over
the crowded window of the digits autoencoder a seeding effect?

The ``scaling-real`` experiment's autoencoder (its default parameters: 300 digits, 61 pixels, ε = 1e-3,
width 128, the same step, horizon and ``W(0)``): the exponent fitted over the crowded window (the experiment's
window rule) and the grid points in the predicted band, for the NQF, the real tanh network (plain GD) and the
seeded NQF (``nqf.dynamics.seeded_nqf``: the NQF plus the module's extra gradient in the unlearned directions).

Run: ``python benchmarks/bench_crowded_seeded.py``.
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from nqf.app._experiments import REGISTRY
from nqf.app._experiments._scaling_real import digits_case
from nqf.curves import compare_crowded, crowded_prediction, stable_learning_rate
from nqf.dynamics import Save, initial_weights, seeded_nqf, simulate, train_network
from nqf.networks import TwoLayerMLP
from nqf.reductions import predict
from nqf.structure import mlp


def main(seed: int = 0) -> None:
    torch.set_num_threads(1)
    P = REGISTRY["scaling-real"].Params()
    X, Y = digits_case("autoencoder", P.n_samples, seed)
    p = X.shape[1] + Y.shape[1]
    op = mlp(X, "tanh", n_outputs=Y.shape[1])
    st = predict(op, Y, P.eps)
    cp = crowded_prediction(st, n_grid=P.n_grid, max_decades=P.max_decades)
    lr = stable_learning_rate(st.rates, P.lr_fraction)
    steps = int(math.ceil(1.2 * cp.window[1] / lr)) + 1
    m = max(P.width, p)
    W0 = initial_weights(p, m, P.eps, seed=seed)
    run = {"lr": lr, "steps": steps, "save_every": max(1, steps // P.save_points), "save_M": False, "save_W": False}

    def net():
        return TwoLayerMLP(X.shape[1], m, Y.shape[1], "tanh", dtype=torch.float64)

    runs = {
        "NQF": lambda: simulate(op, Y, W0=W0, **run),
        "real network": lambda: train_network(n := net(), n.units, X, Y, W0=W0, **run),
        "seeded NQF": lambda: seeded_nqf(
            op,
            n := net(),
            n.units,
            X,
            Y,
            W0=W0,
            lr=lr,
            steps=steps,
            save=Save(every=run["save_every"], M=False, W=False),
        ),
    }
    print(f"digits autoencoder, ε = {P.eps:g}, width {m}; crowded window t ∈ [{cp.window[0]:.3g}, {cp.window[1]:.3g}]")
    print(f"mode sum (prediction): α = {cp.window_exponent:.3f}")
    for name, go in runs.items():
        t0 = time.process_time()
        tr = go()
        t, L = tr.t.numpy()[1:], tr.loss.numpy()[1:]
        ok = np.isfinite(L)
        c = compare_crowded(cp, t[ok], L[ok], n_boot=P.n_boot, seed=seed)
        fit = c.fit
        alpha = "—" if fit is None else f"{fit.exponent:.3f} [{fit.ci[0]:.3f}, {fit.ci[1]:.3f}]"
        inside, cpu = int(np.sum(c.inside)), time.process_time() - t0
        print(f"{name:>14}: α = {alpha}, {inside}/{len(c.inside)} grid points in the band ({cpu:.1f} s CPU)")


if __name__ == "__main__":
    main()
