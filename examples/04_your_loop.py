# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Your own loop: the forecast, the monitor, and the log judged afterwards
#
# A user's loop on the digits data bundled with scikit-learn: a tanh MLP of width 256 from PyTorch's default
# initialisation scaled by 1e-3, every parameter trained by minibatch SGD (batch 64, lr 0.05, momentum 0.9) on
# `torch.nn.MSELoss` against one-hot targets. `nqf.watch` forecasts the staircase from the model's own weights
# in this loop's steps before the first step; `monitor.update` reads the loss as the run goes; the run's CSV
# log is judged afterwards with `forecast.judge` (what `nqf compare --log` does on the command line).

# %%
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch
from sklearn.datasets import load_digits

import nqf

torch.manual_seed(0)
torch.set_num_threads(1)
d = load_digits()
X = torch.tensor((d.data - d.data.mean(0)) / np.where(d.data.std(0) > 0, d.data.std(0), 1.0), dtype=torch.float32)
Y = torch.eye(10)[d.target]
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Tanh(), torch.nn.Linear(256, 10))
with torch.no_grad():
    for p in model.parameters():
        p.mul_(1e-3)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

monitor = nqf.watch(model, X, Y, optimizer=opt, batch_size=64)
fc = monitor.forecast
for line in fc.lines()[:4]:
    print(line)

# %% [markdown]
# ## The run, with the monitor beside it
# The monitor reads the full-batch loss every step (a minibatch's own loss would need `smoothing=`); a line is
# printed whenever the run changes plateau or phase.

# %%
loss_fn = torch.nn.MSELoss()
g = torch.Generator().manual_seed(1)
rows, seen = [], None
for step in range(int(1.3 * np.nanmax(fc.steps)) + 20):
    with torch.no_grad():
        full = float(loss_fn(model(X), Y))
    rows.append((step, full))
    status = monitor.update(step, full)
    if (status.phase, status.plateau) != seen:
        print(status.text)
        seen = (status.phase, status.plateau)
    idx = torch.randint(0, X.shape[0], (64,), generator=g)
    opt.zero_grad()
    loss_fn(model(X[idx]), Y[idx]).backward()
    opt.step()

out = os.environ.get("NQF_EXAMPLES_OUT", ".")
with open(f"{out}/04_run.csv", "w") as fh:  # the log a loop writes
    fh.write("step,loss\n" + "".join(f"{s},{v}\n" for s, v in rows))

# %% [markdown]
# ## Afterwards: the log judged against the forecast
# Each drop's measured step is the log's midpoint crossing; the first drop is trusted, the later ones crowd
# (docs/watch.md, "Measured").

# %%
log = nqf.app.read_loss_log(f"{out}/04_run.csv")
judged = fc.judge(log.steps, log.loss)
for line in judged.lines():
    print(line)

fig, ax = plt.subplots(figsize=(8, 4.4), constrained_layout=True)
ax.plot(log.steps, log.loss, lw=1.8, label="the run (full-batch loss)")
ax.plot(log.steps, fc.loss_curve(log.steps), "--", color="k", lw=1.2, label="forecast")
ax.axvline(fc.steps[0], color="C3", ls="--", lw=1.0, label=f"drop 1 predicted (step {fc.steps[0]:.0f})")
ok = np.isfinite(judged.measured)
mids = 0.5 * (fc.levels[:-1] + fc.levels[1:])
ax.plot(judged.measured[ok], mids[ok], "o", color="C2", label="measured drops (midpoint crossings)")
ax.set_xlabel("step (SGD, batch 64, lr 0.05, momentum 0.9)")
ax.set_ylabel("MSELoss")
ax.set_title("digits, width 256, PyTorch's initialisation × 1e-3: the run against its forecast", fontsize=9)
ax.legend(fontsize=8)
fig.savefig(f"{out}/04_your_loop.png", dpi=100)
