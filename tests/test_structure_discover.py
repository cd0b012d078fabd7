"""Automatic unit discovery (find_units / select_units), unit-weight helpers and from_module on found layouts.

Truth: the analytic operators (nqf.structure.mlp, conv1d, multi_head_attention), the layouts written by hand
from each layer's documented parameter shapes, and direct reads of the module's parameters.
"""

import json
import math
import pickle

import pytest
import torch
from torch import nn

from helpers import TORCH_HAS_MHA_SWITCH
from nqf.errors import NormalFormError, NoUnitsError
from nqf.modules import (
    UnitCandidate,
    UnitLayout,
    UnitSlice,
    find_units,
    from_module,
    select_units,
)
from nqf.networks import TwoLayerMLP
from nqf.networks._moe import MixtureOfExperts
from nqf.structure import conv1d, mlp, multi_head_attention

DT = torch.float64


def _mlp(D=3, m=8, C=2, act=nn.Tanh, bias=True):
    return nn.Sequential(nn.Linear(D, m, bias=bias, dtype=DT), act(), nn.Linear(m, C, dtype=DT))


def test_sequential_tanh_mlp_found_and_matches_analytic():
    seq = _mlp()
    (cand,) = find_units(seq)
    assert cand.kind == "mlp-hidden" and cand.names == ("0", "2") and cand.n_units == 8 and cand.p == 2 + 3 + 1
    assert cand.smooth and select_units(seq) is not None
    assert cand.layout.slices == (UnitSlice("2.weight", 1), UnitSlice("0.weight", 0), UnitSlice("0.bias", 0))
    X = torch.randn(6, 3, dtype=DT)
    op = from_module(seq, cand.layout, X)
    torch.testing.assert_close(op.dense(), mlp(X, "tanh", bias=True, n_outputs=2).dense(), rtol=0, atol=1e-12)


def test_wide_mlp_from_module_matches_analytic():
    """Width 2048: from_module differentiates a two-unit copy; the operator must not change."""
    seq = _mlp(D=5, m=2048, C=1, bias=False)
    X = torch.randn(20, 5, dtype=DT)
    op = from_module(seq, select_units(seq).layout, X)
    torch.testing.assert_close(op.dense(), mlp(X, "tanh").dense(), rtol=0, atol=1e-12)
    torch.testing.assert_close(op.offset, seq[2].bias.detach().expand(20, 1), rtol=0, atol=1e-12)


def test_nested_and_named_selection():
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(
                nn.Linear(3, 6, bias=False, dtype=DT),
                nn.GELU(),
                nn.Dropout(0.2),
                nn.Linear(6, 5, bias=False, dtype=DT),
                nn.Tanh(),
                nn.Linear(5, 1, bias=False, dtype=DT),
            )

        def forward(self, x):
            return self.body(x)

    model = Model()
    found = find_units(model)
    assert [c.names for c in found] == [("body.0", "body.3"), ("body.3", "body.5")]
    with pytest.raises(NoUnitsError, match=r"2 layers of interchangeable units found: `body.0`.*`body.3`.*--units"):
        select_units(model)
    assert select_units(model, "body.0").names == found[0].names
    assert select_units(model, "body.5").names == found[1].names
    with pytest.raises(NoUnitsError, match=r"`units` names layer 'head'.*`body.0`"):
        select_units(model, "head")
    # first hidden layer of a deep net (dropout off in eval mode): f = a₃·tanh(Σ_i W₂[:, i] gelu(u_i·x)), and
    # tanh'(0) = 1, tanh''(0) = 0, so to second order f = Σ_c a₃[c] (two-layer gelu MLP with 5 outputs)_c
    X = torch.randn(5, 3, dtype=DT)
    op = from_module(model, found[0].layout, X)
    a3 = model.body[5].weight.detach()[0]
    expect = torch.einsum("c,ncij->nij", a3, mlp(X, "gelu", n_outputs=5).dense())
    assert op.satisfies_zgz
    torch.testing.assert_close(op.dense(), expect, rtol=0, atol=1e-12)


def test_custom_activation_module_and_linear_network():
    """A user's parameter-free activation module is taken as elementwise; no activation = linear hidden units."""

    class Sin(nn.Module):
        def forward(self, x):
            return torch.sin(x)

    X = torch.randn(5, 3, dtype=DT)
    for middle, act in (([Sin()], "sin"), ([nn.Identity()], "linear"), ([], "linear")):
        seq = nn.Sequential(nn.Linear(3, 6, bias=False, dtype=DT), *middle, nn.Linear(6, 1, bias=False, dtype=DT))
        cand = select_units(seq)
        assert cand.kind == "mlp-hidden" and cand.n_units == 6
        assert ("taken as elementwise" in cand.description) == (act == "sin")
        torch.testing.assert_close(from_module(seq, cand.layout, X).dense(), mlp(X, act).dense(), rtol=0, atol=1e-12)


def test_relu_mlp_found_but_flagged_and_refused():
    seq = _mlp(act=nn.ReLU)
    cand = select_units(seq)
    assert not cand.smooth and "NON-SMOOTH (ReLU)" in cand.description and "tanh" in cand.description
    with pytest.raises(NormalFormError, match=r"ReLU, which is not three times differentiable.*Use a smooth"):
        from_module(seq, cand.layout, torch.randn(4, 3, dtype=DT))


def test_no_units_and_unknown_layers():
    for model in (
        nn.Sequential(nn.Linear(3, 4)),
        nn.Sequential(nn.Linear(3, 4), nn.Softmax(-1), nn.Linear(4, 2)),
        nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4), nn.Linear(4, 2)),
    ):
        assert find_units(model) == []
        with pytest.raises(
            NoUnitsError,
            match=r"no interchangeable units found in Sequential: looked for hidden "
            r"neurons between two nn.Linear.*heads of nn.MultiheadAttention",
        ):
            select_units(model)
    with pytest.raises(TypeError, match="`module` must be a torch.nn.Module"):
        find_units(lambda x: x)


@pytest.mark.skipif(not TORCH_HAS_MHA_SWITCH, reason="torch < 2.3: nqf refuses attention (tests/test_torch_compat.py)")
def test_attention_heads_of_transformer_layers():
    enc = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(6, 3, 8, batch_first=True, dtype=DT), 2, enable_nested_tensor=False
    )
    found = find_units(enc)
    assert [c.names for c in found] == [("layers.0", "layers.0.self_attn"), ("layers.1", "layers.1.self_attn")]
    assert all(c.kind == "attention-heads" and c.n_units == 3 for c in found)
    # p = W_O (6×2) + W_V (2×6) + b_V (2) + W_Q, W_K (2×6 each) + b_Q, b_K (2 each)
    assert found[0].p == 12 + 12 + 2 + 24 + 4
    assert select_units(enc, "layers.1.self_attn").names == found[1].names
    assert select_units(enc, "layers.1").names == found[1].names
    layer = nn.TransformerEncoderLayer(6, 3, 8, batch_first=True, dtype=DT)
    (cand,) = find_units(layer)
    assert cand.names == ("self_attn", "") and "part of the fixed readout" in cand.description

    class Attn(nn.Module):  # mean readout of self-attention: the analytic form applies
        def __init__(self):
            super().__init__()
            self.attn = nn.MultiheadAttention(6, 3, batch_first=True, dtype=DT)

        def forward(self, x):
            return self.attn(x, x, x, need_weights=False)[0].mean(1)

    net = Attn()
    X = torch.randn(4, 3, 6, dtype=DT)
    op = from_module(net, select_units(net).layout, X)
    torch.testing.assert_close(op.dense(), multi_head_attention(X, 2, bias=True).dense(), rtol=0, atol=1e-10)


def test_conv_channels_found_and_match_analytic():
    model = nn.Sequential(
        nn.Conv1d(2, 5, 3, bias=False, dtype=DT), nn.Tanh(), nn.Flatten(), nn.Linear(5 * 4, 2, bias=False, dtype=DT)
    )
    (cand,) = find_units(model)
    assert cand.kind == "conv-channels" and cand.n_units == 5 and cand.p == 2 * 4 + 2 * 3
    X = torch.randn(4, 2, 6, dtype=DT)
    op = from_module(model, cand.layout, X)
    torch.testing.assert_close(op.dense(), conv1d(X, 3, 1, 0, "tanh", "position", 2).dense(), rtol=0, atol=1e-12)
    # conv → tanh → conv: the channels of the first are read by the second's input-channel axis
    cc = nn.Sequential(nn.Conv1d(2, 5, 3, dtype=DT), nn.Tanh(), nn.Conv1d(5, 4, 2, dtype=DT))
    (cand,) = find_units(cc)
    assert cand.layout.slices[0] == UnitSlice("2.weight", axis=1, size=1) and cand.p == 4 * 2 + 2 * 3 + 1


def test_library_modules_use_their_own_layout():
    net = MixtureOfExperts(3, 4, 2)
    (cand,) = find_units(net)
    assert cand.kind == "experts" and cand.layout.slices == net.units.slices and cand.n_units == 4
    wrapped = nn.Sequential(TwoLayerMLP(3, 5, 2), nn.Tanh())
    (cand,) = find_units(wrapped)
    assert cand.kind == "mlp-hidden" and cand.names == ("0",)
    assert [s.param for s in cand.layout.slices] == ["0.readout.weight", "0.input.weight"]


def test_wrong_unit_choice_is_caught():
    """A layout that leaves each unit's readout weight fixed: the units differ, from_module refuses."""
    seq = _mlp(bias=False)
    X = torch.randn(5, 3, dtype=DT)
    with pytest.raises(NormalFormError, match="units are not interchangeable"):
        from_module(seq, UnitLayout([UnitSlice("0.weight", axis=0)]), X)
    # the readout's rows (outputs) are not units of the hidden layer either
    with pytest.raises(NormalFormError, match="units are not interchangeable"):
        from_module(seq, UnitLayout([UnitSlice("2.weight", axis=0)]), X)


def test_unit_weights_roundtrip_and_small_init():
    seq = _mlp(D=3, m=8, C=2)
    layout = select_units(seq).layout
    W = layout.get_W(seq)
    assert W.shape == (6, 8)
    # independent read: column i = (readout column i, input row i, bias i)
    torch.testing.assert_close(W[:, 3], torch.cat([seq[2].weight[:, 3], seq[0].weight[3], seq[0].bias[3:4]]).detach())
    eps = 1e-6
    Q = torch.linalg.qr(torch.randn(8, 6, dtype=DT))[0].T  # (p, m) with orthonormal rows
    bias_before = seq[2].bias.detach().clone()
    layout.set_W(seq, math.sqrt(eps) * Q)
    W2 = layout.get_W(seq)
    torch.testing.assert_close(W2 @ W2.T, eps * torch.eye(6, dtype=DT), rtol=0, atol=1e-18)
    torch.testing.assert_close(seq[0].weight[5].detach(), math.sqrt(eps) * Q[2:5, 5], rtol=0, atol=0)
    torch.testing.assert_close(seq[2].bias.detach(), bias_before, rtol=0, atol=0)  # not a unit: untouched
    with pytest.raises(ValueError, match="`W` must have shape"):
        layout.set_W(seq, torch.zeros(5, 8, dtype=DT))


def test_candidate_result_type():
    cand = select_units(_mlp())
    assert isinstance(cand, UnitCandidate) and len(repr(cand)) < 400
    d = json.loads(json.dumps(cand.to_dict()))
    assert d["kind"] == "mlp-hidden" and d["layout"][0] == dict(param="2.weight", axis=1, size=1, offset=0)
    back = pickle.loads(pickle.dumps(cand))
    assert back.names == cand.names and back.layout.slices == cand.layout.slices
    with pytest.raises(AttributeError):
        cand.kind = "x"
