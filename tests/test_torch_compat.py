"""The lowest supported torch (2.2): what nqf refuses there, and says why (run in CI by .ci/lowest-torch).

On the tested torch these run by removing what torch 2.2 lacks: the switch of attention's fused fast path
(``torch.backends.mha``) and the reading of a saved TensorDataset without unpickling it."""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from nqf.errors import DataError, NormalFormError
from nqf.modules import find_units


def test_attention_is_refused_without_the_fast_path_switch(monkeypatch):
    layer = nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, batch_first=True)
    mlp = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    import nqf.modules._compat as compat

    if compat.has_mha_switch():
        assert find_units(layer)  # the tested torch: attention heads are found
        monkeypatch.setattr(compat, "has_mha_switch", lambda: False)  # what torch 2.2 has
    with pytest.raises(NormalFormError, match="needs torch ≥ 2.3") as err:
        find_units(layer)
    assert "`self_attn`" in str(err.value) and "\n" not in str(err.value)
    assert find_units(mlp)  # no attention: nothing refused


def test_math_attention_is_a_context_on_this_torch():
    from nqf.modules._compat import math_attention

    q = torch.randn(1, 2, 3, 4)
    with math_attention():
        out = nn.functional.scaled_dot_product_attention(q, q, q)
    assert out.shape == q.shape


def test_a_tensor_dataset_on_an_older_torch_is_refused_saying_so(tmp_path, monkeypatch):
    import nqf.app._data._files as files
    from nqf.app._data import load_dataset

    torch.save(TensorDataset(torch.randn(20, 3), torch.randint(0, 2, (20,))), tmp_path / "d.pt")
    monkeypatch.setattr(files, "_stand_in", lambda torch: contextlib.nullcontext())  # what torch < 2.6 does
    with pytest.raises(DataError, match="holds a TensorDataset, which this torch") as err:
        load_dataset(str(tmp_path / "d.pt"))
    assert "\n" not in str(err.value)
