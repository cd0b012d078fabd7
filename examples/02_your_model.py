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
# # Your model on your data
#
# `nqf.analyze` takes a PyTorch module as you wrote it and a data set, finds its layer of interchangeable
# units, predicts the plateaus and drops, simulates the NQF, trains the real network from the same start and
# says how far to trust the prediction. Here: a module subclass on the wine data bundled with scikit-learn.

# %%
import os

import matplotlib

matplotlib.use("Agg")
import torch
from torch import nn

import nqf
from nqf.app import load_dataset

SMALL = os.environ.get("NQF_EXAMPLES_SMALL", "1") == "1"


class Net(nn.Module):
    """A hidden tanh layer and a readout: its 24 hidden neurons are the interchangeable units."""

    def __init__(self, d_in: int, n_out: int, width: int = 24):
        super().__init__()
        self.hidden = nn.Linear(d_in, width)
        self.readout = nn.Linear(width, n_out, bias=False)

    def forward(self, x):
        return self.readout(torch.tanh(self.hidden(x)))


data = load_dataset("wine")
print(data)
a = nqf.analyze(Net(data.n_features, data.n_outputs), data, eps=1e-4 if SMALL else 1e-8)
print(a)

# %% [markdown]
# ## The table and the verdict
# One row per plateau: the predicted level and drop time beside the NQF's and the real network's, as a
# pandas DataFrame (`pip install 'nqf[frames]'`); then the verdict, in words and numbers.

# %%
df = a.to_frame()
print(df[["k", "level_predicted", "level_real", "time_predicted", "time_real", "time_error_real"]])
for sentence in a.verdict.text[:3]:
    print("-", sentence)

# %%
fig = a.plot()
fig.savefig(os.environ.get("NQF_EXAMPLES_OUT", ".") + "/02_your_model.png", dpi=100)
