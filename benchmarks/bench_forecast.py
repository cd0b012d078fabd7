"""Issue 35's acceptance: nqf.forecast against a plain user loop on the digits MLP, and nqf.watch's overhead.

The user's loop (float32, as users run it): ``nn.Sequential(Linear(64, 256), Tanh(), Linear(256, 10))`` with
PyTorch's default initialisation scaled by ``--scales`` (1e-3 and 1e-5), every parameter trained by
``torch.optim.SGD`` on ``nn.MSELoss()`` against one-hot targets, inputs standardised; full-batch GD at
lr 0.5, minibatch SGD (batch 64, lr 0.5) and SGD with momentum 0.9 (batch 64, lr 0.05).  The full-batch loss is
evaluated after every step; each drop's measured step is its midpoint crossing (:meth:`nqf.app.Forecast.judge`).
Printed per case: the forecast's CPU seconds, and per drop the predicted and measured steps, the error and
whether the forecast trusts the drop.

Then what the forecast leaves out, measured: minibatch noise (SGD 64 over ``--seeds`` sampling seeds against
GD) and Adam (lr 1e-3 and 1e-2 from the same start: where it passes the predicted midpoints, how many drops
:func:`nqf.curves.detect_steps` finds, where its loss ends).

Then the monitor: the same loop (SGD, batch 64) timed per step with and without ``monitor.update(step,
loss)`` after every step, best of ``--repeat`` blocks, and the ratio printed (issue 35: at most 1 %).

Run: ``python benchmarks/bench_forecast.py [--scales 1e-3 1e-5] [--repeat 5]`` (about two minutes).
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

import nqf  # noqa: E402

CASES = {
    "GD": dict(lr=0.5, batch=None, momentum=0.0),
    "SGD 64": dict(lr=0.5, batch=64, momentum=0.0),
    "SGD 64 + momentum 0.9": dict(lr=0.05, batch=64, momentum=0.9),
}


def digits():
    d = load_digits()
    X = (d.data - d.data.mean(0)) / np.where(d.data.std(0) > 0, d.data.std(0), 1.0)
    return torch.tensor(X, dtype=torch.float32), torch.eye(10)[d.target]


def make_net(scale: float, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Tanh(), torch.nn.Linear(256, 10))
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(scale)
    return net


def user_loop(net, X, Y, steps: int, *, lr, batch, momentum, seed: int = 1, monitor=None):
    """The user's loop; the full-batch loss after every step (index k: the loss after k steps)."""
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=momentum)
    loss_fn = torch.nn.MSELoss()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        full = [float(loss_fn(net(X), Y))]
    for k in range(steps):
        idx = torch.randint(0, X.shape[0], (batch,), generator=g) if batch else slice(None)
        opt.zero_grad()
        loss = loss_fn(net(X[idx]), Y[idx])
        loss.backward()
        opt.step()
        with torch.no_grad():
            full.append(float(loss_fn(net(X), Y)))
        if monitor is not None:
            monitor.update(k + 1, full[-1])
    return np.array(full)


def case(scale: float, name: str, X, Y) -> dict:
    """One acceptance case: the forecast (and its CPU seconds), the loop's full-batch loss, the judgement."""
    c = CASES[name]
    net = make_net(scale)
    t0 = time.process_time()
    fc = nqf.forecast(net, X, Y, lr=c["lr"], momentum=c["momentum"], batch_size=c["batch"])
    cpu = time.process_time() - t0
    L = user_loop(net, X, Y, int(1.3 * np.nanmax(fc.steps)) + 20, **c)
    return {"forecast": fc, "cpu": cpu, "loss": L, "judgement": fc.judge(np.arange(L.size), L)}


def overhead(X, Y, repeat: int) -> tuple[float, float]:
    """Seconds per step of the SGD-64 loop without and with ``monitor.update`` (the update alone, best of blocks)."""
    net = make_net(1e-3)
    monitor = nqf.watch(net, X, Y, lr=0.5, batch_size=64)
    opt = torch.optim.SGD(net.parameters(), lr=0.5)
    loss_fn = torch.nn.MSELoss()
    g = torch.Generator().manual_seed(0)
    best_step, best_update = np.inf, np.inf
    step = 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        losses = []
        for _ in range(200):
            idx = torch.randint(0, X.shape[0], (64,), generator=g)
            opt.zero_grad()
            loss = loss_fn(net(X[idx]), Y[idx])
            loss.backward()
            opt.step()
            losses.append(loss.item())
        best_step = min(best_step, (time.perf_counter() - t0) / 200)
        t0 = time.perf_counter()
        for v in losses:
            step += 1
            monitor.update(step, v)
        best_update = min(best_update, (time.perf_counter() - t0) / len(losses))
    return best_step, best_update


def noise(X, Y, seeds: int) -> None:
    """Minibatch noise: the first three drops of SGD 64 (lr 0.5) over ``seeds`` sampling seeds, against GD."""
    fc = nqf.forecast(make_net(1e-3), X, Y, lr=0.5, batch_size=64)
    runs = []
    for seed in range(seeds):
        L = user_loop(make_net(1e-3), X, Y, 400, lr=0.5, batch=64, momentum=0.0, seed=seed)
        runs.append(fc.judge(np.arange(L.size), L).measured[:3])
    L = user_loop(make_net(1e-3), X, Y, 400, lr=0.5, batch=None, momentum=0.0)
    gd = fc.judge(np.arange(L.size), L).measured[:3]
    m, sd = np.mean(runs, 0), np.std(runs, 0)
    print(
        f"\nminibatch noise (scale 1e-3, lr 0.5, {seeds} sampling seeds): drops 1–3 of SGD 64 at "
        f"{', '.join(f'{a:.1f} ± {b:.1f}' for a, b in zip(m, sd, strict=True))}; GD at "
        f"{', '.join(f'{g:.1f}' for g in gd)}; predicted {', '.join(f'{p:.1f}' for p in fc.steps[:3])}"
    )


def adam(X, Y) -> None:
    """Adam from the same start: where its loss passes the predicted midpoints, and the plateaus it shows."""
    for lr in (1e-3, 1e-2):
        net = make_net(1e-3)
        fc = nqf.forecast(net, X, Y, optimizer="adam", lr=lr)
        opt = torch.optim.Adam(net.parameters(), lr=lr)
        loss_fn = torch.nn.MSELoss()
        full = []
        for _ in range(3000):
            opt.zero_grad()
            loss_fn(net(X), Y).backward()
            opt.step()
            with torch.no_grad():
                full.append(float(loss_fn(net(X), Y)))
        L = np.array(full)
        crossed = fc.judge(np.arange(1, L.size + 1), L).measured
        drops = nqf.curves.detect_steps(np.arange(1, L.size + 1), L).times.size
        print(
            f"\nAdam lr {lr:g} (scale 1e-3): the predicted midpoints passed at steps "
            f"{', '.join(f'{c:.1f}' for c in crossed)} (GD: 78–375); drops detected {drops}; loss at step 3000 "
            f"{L[-1]:.2g} (the NQF's last level {fc.levels[-1]:.3g})"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scales", type=float, nargs="+", default=[1e-3, 1e-5])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seeds", type=int, default=8)
    args = ap.parse_args()
    torch.set_num_threads(1)
    X, Y = digits()
    worst = 0.0
    for scale in args.scales:
        for name in CASES:
            r = case(scale, name, X, Y)
            fc, j = r["forecast"], r["judgement"]
            print(
                f"\nscale {scale:g}, {name}: forecast {r['cpu']:.2f} s CPU, {fc.n_drops} drops ({fc.staircase.method})"
            )
            for k in range(fc.n_drops):
                tag = "trusted" if fc.trusted[k] else f"not trusted: {fc.reasons[k]}"
                print(
                    f"  drop {k + 1}: predicted {fc.steps[k]:8.1f}  measured {j.measured[k]:8.1f}  "
                    f"error {j.errors[k]:+6.1%}  ({tag})"
                )
                if fc.trusted[k] and np.isfinite(j.errors[k]):
                    worst = max(worst, abs(j.errors[k]))
            print(f"  all drops: largest |error| {np.nanmax(np.abs(j.errors)):.1%}")
    print(f"\nlargest |error| of a trusted drop: {worst:.1%} (acceptance: 10 %)")
    noise(X, Y, args.seeds)
    adam(X, Y)
    step, update = overhead(X, Y, args.repeat)
    print(
        f"\nmonitor.update: {update * 1e6:.1f} µs per call; the SGD-64 step {step * 1e3:.2f} ms; "
        f"overhead {update / step:.3%} (acceptance: ≤ 1 %)"
    )


if __name__ == "__main__":
    main()
