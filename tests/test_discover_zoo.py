"""Units of the model zoo (issue 32, deliverables 1–2): found by following the forward, refusals that name the
blocking layer, experts combined by a gate, batch norm folded or refused, kinks on the readout path measured.

Independent truth: the same network written with the steps nqf already knew (a Sequential with
AdaptiveAvgPool1d, a Conv1d of kernel 1 for a token-wise Linear), the analytic operators of nqf.structure
(conv1d, mlp), second derivatives of the *original* module (not the stacked copy) by plain autograd, and the
feed-forward pre-activations of a transformer layer computed by hand from its weights.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from helpers import TORCH_HAS_MHA_SWITCH, ZOO_FILE, load_zoo
from nqf.app._cli import app
from nqf.app._study import choose_units
from nqf.app._study._checks import check_smooth
from nqf.errors import NormalFormError, NoUnitsError
from nqf.modules import find_units, from_module, refused_units, select_units
from nqf.structure import conv1d, mlp

DT = torch.float64
ZOO = load_zoo()


def _close(a, b, rel=1e-10):
    scale = float(b.abs().max())
    assert scale > 1e-8
    assert float((a - b).abs().max()) <= rel * scale, float((a - b).abs().max()) / scale


# ----------------------------------------------------------------------------- deliverable 1: follow the forward
class _MeanVariant(ZOO.SeqConv):
    """The zoo's Conv1d model with the position mean written another way."""

    def __init__(self, how):
        super().__init__(3, channels=5)
        self.how = how

    def forward(self, x):
        h = torch.tanh(self.conv(x.reshape(x.shape[0], 8, 8)))
        pooled = {
            "torch.mean": lambda: torch.mean(h, 2),
            "sum": lambda: h.sum(-1) / 8,
            "over channels": lambda: h.mean(1),
        }
        return self.head(pooled[self.how]())


def test_mean_pooled_conv1d_subclass_is_found_and_equals_the_sequential_and_analytic():
    torch.manual_seed(0)
    net = ZOO.conv1d_mean(64, 3).to(DT)
    (c,) = find_units(net)
    assert c.kind == "conv-channels" and c.names == ("conv", "head") and c.n_units == 16
    assert c.p == 3 + 8 * 3 + 1 and "x.mean(dim=-1)" in c.description and c.activation == "tanh"
    X = torch.randn(12, 64, dtype=DT)
    op = from_module(net, c.layout, X)
    seq = nn.Sequential(net.conv, nn.Tanh(), nn.AdaptiveAvgPool1d(1), nn.Flatten(), net.head)
    Xc = X.reshape(12, 8, 8)
    ref = from_module(seq, select_units(seq).layout, Xc)
    _close(op.dense(), ref.dense())
    _close(op.dense(), conv1d(Xc, 3, 1, 1, "tanh", "mean", 3, bias=True).dense())
    for how in ("torch.mean", "sum"):
        (v,) = find_units(_MeanVariant(how).to(DT))
        assert v.names == ("conv", "head") and v.n_units == 5, how


def test_pooling_over_the_unit_axis_is_refused_naming_the_call():
    net = _MeanVariant("over channels")
    assert find_units(net) == []
    (r,) = refused_units(net)
    assert r.layer == "conv" and "x.mean(1)" in r.reason and "pools over the units' axis" in r.reason


class _Tokens(nn.Module):
    """A Linear on each of T tokens, tanh, the units' axis moved before the tokens, flattened, read out."""

    def __init__(self, D=3, m=4, T=5, C=2, transpose=True):
        super().__init__()
        self.fc, self.out, self.T, self.transpose = nn.Linear(D, m), nn.Linear(m * T, C, bias=False), T, transpose

    def forward(self, x):
        h = torch.tanh(self.fc(x.reshape(x.shape[0], self.T, -1)))
        return self.out((h.transpose(1, 2) if self.transpose else h).flatten(1))


def test_transpose_and_flatten_give_blocks_and_match_the_conv_form():
    torch.manual_seed(1)
    net = _Tokens().to(DT)
    (c,) = find_units(net)
    assert c.names == ("fc", "out") and c.n_units == 4 and c.p == 2 * 5 + 3 + 1
    X = torch.randn(7, 15, dtype=DT)
    conv = nn.Conv1d(3, 4, 1, dtype=DT)
    with torch.no_grad():
        conv.weight.copy_(net.fc.weight[:, :, None])
        conv.bias.copy_(net.fc.bias)
    seq = nn.Sequential(conv, nn.Tanh(), nn.Flatten(), net.out)
    ref = from_module(seq, select_units(seq).layout, X.reshape(7, 5, 3).transpose(1, 2))
    _close(from_module(net, c.layout, X).dense(), ref.dense())
    strided = _Tokens(transpose=False)
    assert find_units(strided) == []
    assert "strided" in refused_units(strided)[0].reason


def test_residual_block_is_still_found():
    net = ZOO.residual_mlp(6, 2).to(DT)
    (c,) = find_units(net)
    assert c.names == ("up", "down") and c.n_units == 32 and refused_units(net) == []


# ----------------------------------------------------------------------------- deliverable 2: experts and a gate
def _hand_moe(D=5, C=2, E=3, hidden=3):
    torch.manual_seed(2)
    return ZOO.HandMoE(D, C, n_experts=E, hidden=hidden).to(DT)


def test_hand_moe_experts_are_found_and_chosen_by_default():
    net = _hand_moe()
    found = find_units(net)
    assert [c.kind for c in found] == ["experts"] + ["mlp-hidden"] * 3
    c = select_units(net)
    assert c.names == ("experts", "gate") and c.n_units == 3 and c.stacked == "experts"
    assert c.p == (5 * 3 + 3) + 3 * 2 + 5  # one expert's parameters + a gate row of D
    assert select_units(net, "experts.1.0").names == ("experts.1.0", "experts.1.2")
    f = choose_units(net)
    assert f.kind == "experts" and f.module is not None and f.p == c.p
    assert "experts.stacked.0.weight" in dict(f.module.named_parameters())
    X = torch.randn(6, 5, dtype=DT)
    torch.testing.assert_close(f.module(X), net(X), rtol=0, atol=0)
    zoo_moe = select_units(ZOO.moe(64, 10))
    assert zoo_moe.kind == "experts" and zoo_moe.p == (64 * 16 + 16 + 16 * 10) + 64


def _second_derivative_on_original(net, v_pieces, X):
    """½ d²/ds² of the original module with expert 0's parameters and gate row 0 at s·v (others zero)."""
    s = torch.zeros((), dtype=DT, requires_grad=True)
    params = {k: torch.zeros_like(p) for k, p in net.named_parameters()}
    for k, piece in v_pieces.items():
        if k == "gate.weight":
            params[k] = params[k].index_put((torch.tensor([0]),), (s * piece)[None])
        else:
            params[k] = s * piece
    out = torch.func.functional_call(net, params, (X,))
    want = torch.empty(out.shape, dtype=DT)
    for n in range(out.shape[0]):
        for c in range(out.shape[1]):
            (g,) = torch.autograd.grad(out[n, c], s, create_graph=True)
            (h,) = torch.autograd.grad(g, s, retain_graph=True)
            want[n, c] = 0.5 * h
    return want


def test_hand_moe_operator_equals_the_original_modules_derivatives():
    net = _hand_moe()
    c = select_units(net)
    stacked = c.prepare(net)
    X = torch.randn(5, 5, dtype=DT)
    op = from_module(stacked, c.layout, X)
    names = [s.param for s in c.layout.slices]
    assert names[-1] == "gate.weight"
    gen = torch.Generator().manual_seed(3)
    v = torch.randn(c.p, generator=gen, dtype=DT)
    pieces, start = {}, 0
    for name, p in net.experts[0].named_parameters():
        pieces[f"experts.0.{name}"] = v[start : start + p.numel()].reshape(p.shape)
        start += p.numel()
    pieces["gate.weight"] = v[start:]
    want = _second_derivative_on_original(net, pieces, X)
    got = torch.einsum("ncij,i,j->nc", op.dense(), v, v)
    _close(got, want)
    assert op.satisfies_zgz


def test_experts_that_differ_are_refused():
    """Structurally parallel experts whose outputs are weighted by their index: found, and from_module's
    permutation check refuses them; experts of different shapes are not found at all."""

    class Weighted(ZOO.HandMoE):
        def forward(self, x):
            g = torch.softmax(self.gate(x), dim=-1)
            return sum((e + 1) * g[:, e : e + 1] * ex(x) for e, ex in enumerate(self.experts))

    torch.manual_seed(4)
    net = Weighted(5, 2, n_experts=3, hidden=3).to(DT)
    c = select_units(net)
    assert c.kind == "experts"
    with pytest.raises(NormalFormError, match="not interchangeable"):
        from_module(c.prepare(net), c.layout, torch.randn(6, 5, dtype=DT))
    odd = _hand_moe()
    odd.experts[1] = nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 2, bias=False)).to(DT)
    assert [c.kind for c in find_units(odd)] == ["mlp-hidden"] * 3


# ----------------------------------------------------------------------------- batch norm
def test_fresh_batchnorm_is_folded_and_scales_the_input_part():
    torch.manual_seed(5)
    net = ZOO.batchnorm_mlp(4, 2).to(DT).eval()
    (c,) = find_units(net)
    assert c.names == ("0", "3") and "BatchNorm1d `1`" in c.description and "folded" in c.description
    X = torch.randn(9, 4, dtype=DT)
    s = 1.0 / (1.0 + net[1].eps) ** 0.5
    S = torch.diag(torch.tensor([1.0, 1.0] + [s] * 5, dtype=DT))  # readout column untouched, input row and bias × s
    ref = torch.einsum("ij,ncjk,kl->ncil", S, mlp(X, "tanh", bias=True, n_outputs=2).dense(), S)
    _close(from_module(net, c.layout, X).dense(), ref)


@pytest.mark.parametrize("bias", [True, False])
def test_folded_batchnorm_and_dropout_keep_the_analytic_mlp_operator(bias):
    """A batch norm of one scale s (here 1/√2, not the fresh ≈ 1) between the layers is the analytic MLP operator on
    the input part scaled by s, equal to the module's own autodiff operator; so is a dropout in eval mode.
    Planted: the operator that ignores s differs from the module's (so the agreement check can fail)."""
    from nqf.app._study._operators import structure_of

    torch.manual_seed(6)
    X = torch.randn(12, 4, dtype=DT)
    net = ZOO.batchnorm_mlp(4, 2).to(DT).eval()
    if not bias:
        net[0].bias = None
    net[1].running_var.fill_(2.0)
    found = choose_units(net)
    op, _, how = structure_of(net, found, X)
    assert how == "analytic mlp"
    ref = from_module(net, found.layout, X, matrix_free=False).dense()
    _close(op.dense(), ref)
    unscaled = mlp(X, "tanh", bias=bias, n_outputs=2).dense()
    assert float((unscaled - ref).abs().max()) > 0.1 * float(ref.abs().max())
    drop = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Dropout(0.3), nn.Linear(6, 2, bias=False)).to(DT).eval()
    dfound = choose_units(drop)
    dop, _, dhow = structure_of(drop, dfound, X)
    assert dhow == "analytic mlp"
    _close(dop.dense(), from_module(drop, dfound.layout, X, matrix_free=False).dense())


@pytest.mark.parametrize("what", ["bias", "weight", "stats"])
def test_batchnorm_that_is_not_one_scale_is_refused_naming_it(what):
    net = ZOO.batchnorm_mlp(4, 2)
    with torch.no_grad():
        if what == "bias":
            net[1].bias.fill_(0.3)
        elif what == "weight":
            net[1].weight[0] = 2.0
        else:
            net[1] = nn.BatchNorm1d(32, track_running_stats=False)
    assert find_units(net) == []
    expect = {"bias": "shifts the 32 pre-activations", "weight": "unequally", "stats": "track_running_stats=False"}
    with pytest.raises(NoUnitsError, match=rf"refused `0`: BatchNorm1d `1`.*{expect[what]}"):
        select_units(net)


# ----------------------------------------------------------------------------- refusals
@pytest.mark.parametrize(
    "name,layer,words",
    [
        ("layernorm_mlp", "0", ["LayerNorm `1` normalises across the 32 hidden units", "move it before `0`"]),
        ("rnn", "rnn", ["RNN `rnn`", "recurrent weights (weight_hh)", "feed-forward layer of units"]),
        ("skip_readout", "hidden", ["Linear `readout`", "skip input `x`", "no zero-gradient", "residual block"]),
    ],
)
def test_refusals_name_the_blocking_layer(name, layer, words):
    net = ZOO.__dict__[name](64, 10)
    assert find_units(net) == []
    (r,) = refused_units(net)
    assert r.layer == layer and all(w in r.reason for w in words), r.reason
    with pytest.raises(NoUnitsError) as err:
        select_units(net)
    assert r.reason in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(NormalFormError, match="no interchangeable units") as err2:
        choose_units(net)
    assert r.reason in str(err2.value)


def test_cli_list_units_shows_refusals():
    res = CliRunner().invoke(app, ["analyze", "--model", f"{ZOO_FILE}:transformer", "--data", "digits", "--list-units"])
    if TORCH_HAS_MHA_SWITCH:
        assert res.exit_code == 0, res.output
        assert (
            "1 layer(s) not offered as units:" in res.output
            and "refused `embed`: TransformerEncoderLayer" in res.output
        )
    else:  # torch 2.2: attention refused in one line
        assert res.exit_code == 2 and "needs torch ≥ 2.3" in res.output, res.output
    res = CliRunner().invoke(app, ["analyze", "--model", f"{ZOO_FILE}:rnn", "--data", "digits", "--list-units"])
    assert res.exit_code == 2 and "refused `rnn`: RNN `rnn`" in res.output


# ----------------------------------------------------------------------------- check_smooth and the transformer
def _pre_activation_by_hand(net, X):
    """The feed-forward pre-activations of the zoo transformer with every head at zero (post-norm layer)."""
    enc = net.encoder
    h = net.embed(X.reshape(X.shape[0], 8, 8))
    x1 = enc.norm1(h + enc.self_attn.out_proj.bias)
    return enc.linear1(x1)


@pytest.mark.skipif(not TORCH_HAS_MHA_SWITCH, reason="torch < 2.3: nqf refuses attention (tests/test_torch_compat.py)")
def test_transformer_relu_feed_forward_is_measured_not_hidden():
    torch.manual_seed(6)
    net = ZOO.transformer(64, 3).to(DT).eval()
    row = check_smooth(net)
    assert row.status == "warn" and row.value != "no non-smooth layer" and "relu" in row.value
    found = choose_units(net)
    X = torch.randn(40, 64, dtype=DT)
    row = check_smooth(net, found=found, X=X)
    with torch.no_grad():
        d = float(_pre_activation_by_hand(net, X).abs().min())
    assert row.status == "warn" and f"min |pre-activation| = {d:.3g}" in row.value and "`encoder`" in row.value
    with torch.no_grad():  # one feed-forward unit identically at the kink: refused
        net.encoder.linear1.weight[0] = 0.0
        net.encoder.linear1.bias[0] = 0.0
    with pytest.raises(NormalFormError, match="`encoder`.*at its kink at zero unit weights"):
        check_smooth(net, found=found, X=X)
