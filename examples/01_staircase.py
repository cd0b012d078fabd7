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
# # A staircase, predicted and simulated
#
# A two-layer tanh MLP on whitened inputs with a linear teacher of singular values 2, 1 and 0.5. Near small
# initialisation its layer is a quadratic form; the NQF predicts each plateau and each drop. This notebook
# predicts the staircase (`nqf.predict`), simulates the closed dynamics (`nqf.simulate`), trains the real
# network from the same start (`nqf.train_network`) and draws the three together.
#
# `NQF_EXAMPLES_SMALL=1` (the default, what CI runs) uses 200 samples; set it to 0 for 2000.

# %%
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import torch

import nqf
from nqf.curves import compare_staircase
from nqf.dynamics import GD, initial_weights
from nqf.networks import TwoLayerMLP
from nqf.reductions.svd_modes import whiten
from nqf.structure import mlp

SMALL = os.environ.get("NQF_EXAMPLES_SMALL", "1") == "1"
N, D, C, WIDTH, EPS = (200 if SMALL else 2000), 6, 3, 16, 1e-6

g = torch.Generator().manual_seed(0)
X = whiten(torch.randn(N, D, generator=g, dtype=torch.float64))
teacher = torch.zeros(D, C, dtype=torch.float64)
teacher[0, 0], teacher[1, 1], teacher[2, 2] = 2.0, 1.0, 0.5
Y = X @ teacher

# %% [markdown]
# ## The prediction
# The SVD-mode reduction applies to a bias-free two-layer MLP on whitened inputs: one mode per singular value
# of the teacher, each switching on at its own time.

# %%
op = mlp(X, "tanh", n_outputs=C)
st = nqf.predict(op, Y, EPS, method="svd-modes")
print(st)
print(st.to_frame()[["k", "level", "rank", "time"]])

# %% [markdown]
# ## The closed dynamics and the real network, from the same start

# %%
lr, steps = 0.02, int(1.3 * float(st.times[-1]) / 0.02)
W0 = initial_weights(op.p, WIDTH, EPS, seed=0)  # W0 W0ᵀ = εI
sim = nqf.simulate(op, Y, W0=W0, optimizer=GD(lr), steps=steps)
net = TwoLayerMLP(D, WIDTH, C, "tanh")
real = nqf.train_network(net, net.units, X, Y, W0=W0, optimizer=GD(lr), steps=steps)
cmp = compare_staircase(real.t.numpy(), real.loss.numpy(), st)
print("drop times, predicted:", [round(float(t), 3) for t in st.times])
print("drop times, real     :", [round(float(t), 3) for t in cmp.times_measured])

# %% [markdown]
# The real network follows the prediction through the first two drops; at the third its weights are no
# longer small, tanh's cubic term acts, and it settles above the NQF's zero loss.

# %%
fig, ax = plt.subplots(figsize=(7, 4))
ax.plot(real.t, real.loss, label="real network (GD)", lw=2)
ax.plot(sim.t, sim.loss, "--", label="NQF, closed dynamics")
t = torch.linspace(0, float(real.t[-1]), 400).numpy()
ax.plot(t, st.loss_curve(t), ":", color="k", label="predicted staircase")
ax.set_xlabel("time t = η · steps")
ax.set_ylabel("loss L")
ax.set_title(f"tanh MLP, teacher singular values 2, 1, 0.5, ε = {EPS:g}")
ax.legend()
fig.tight_layout()
fig.savefig(os.environ.get("NQF_EXAMPLES_OUT", ".") + "/01_staircase.png", dpi=100)
