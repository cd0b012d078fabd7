"""The structure operator `nqf analyze` uses (issue 24, deliverables 1–2): analytic where the family is
recognised, read out by the rest of the network (nqf.structure.ReadoutStructure), else autodiff.

Independent truth: the module's own dense autodiff operator (nqf.modules.from_module, matrix_free=False), on
all samples, to 1e-10; planted errors (a wrong readout Jacobian, a mask the analytic family does not model)."""

import pytest
import torch
from torch import nn

from helpers import TORCH_HAS_MHA_SWITCH
from nqf.app._study import choose_units
from nqf.app._study._operators import structure_of
from nqf.modules import from_module
from nqf.structure import ReadoutStructure, mlp

DT = torch.float64


def _same_as_autodiff(module, X, units=None, expect=None):
    module = module.to(DT)
    found = choose_units(module, units)
    op, f0, how = structure_of(module, found, X)
    if expect is not None:
        assert how == expect, how
    ref = from_module(module, found.layout, X, matrix_free=False)
    A, Ar = op.dense(), ref.dense()
    scale = float(Ar.abs().max())
    assert scale > 1e-6
    assert float((A - Ar).abs().max()) <= 1e-10 * scale
    torch.testing.assert_close(f0, ref.offset.reshape(f0.shape), rtol=0, atol=1e-12)
    gen = torch.Generator().manual_seed(1)
    L = torch.randn(found.p, 3, generator=gen, dtype=DT)
    R = torch.randn(X.shape[0], op.n_outputs, generator=gen, dtype=DT)
    torch.testing.assert_close(op.forward_factor(L), ref.forward_factor(L), rtol=1e-10, atol=1e-12 * scale)
    torch.testing.assert_close(op.adjoint_apply(R, L), ref.adjoint_apply(R, L), rtol=1e-10, atol=1e-12 * scale)
    return op, how


def test_deep_mlp_first_layer_is_an_mlp_read_out_by_the_rest():
    torch.manual_seed(0)
    X = torch.randn(30, 5, dtype=DT)
    deep = nn.Sequential(nn.Linear(5, 6), nn.Tanh(), nn.Linear(6, 4), nn.Tanh(), nn.Linear(4, 3))
    op, _ = _same_as_autodiff(deep, X, units="0", expect="analytic mlp + readout")
    assert isinstance(op, ReadoutStructure) and op.J.shape == (30, 3, 4)


def test_cnn_with_a_layer_after_the_readout():
    torch.manual_seed(1)
    X = torch.randn(12, 1, 5, 5, dtype=DT)
    cnn = nn.Sequential(
        nn.Conv2d(1, 3, 3, padding=1), nn.Tanh(), nn.Flatten(), nn.Linear(75, 4), nn.Tanh(), nn.Linear(4, 2)
    )
    _same_as_autodiff(cnn, X, units="0", expect="analytic conv2d + readout")
    plain = nn.Sequential(nn.Conv2d(1, 3, 3, padding=1), nn.Tanh(), nn.Flatten(), nn.Linear(75, 2, bias=False))
    _same_as_autodiff(plain, X, expect="analytic conv2d")


class _Attn(nn.Module):
    def __init__(self, causal: bool = False):
        super().__init__()
        self.att = nn.MultiheadAttention(4, 2, batch_first=True)
        self.readout = nn.Linear(4, 3)
        self.causal = causal

    def forward(self, x):
        t = x.view(-1, 3, 4)
        mask = nn.Transformer.generate_square_subsequent_mask(3, dtype=t.dtype) if self.causal else None
        return self.readout(self.att(t, t, t, need_weights=False, attn_mask=mask)[0].mean(1))


@pytest.mark.skipif(not TORCH_HAS_MHA_SWITCH, reason="torch < 2.3: nqf refuses attention (tests/test_torch_compat.py)")
def test_attention_heads_read_out_through_the_token_mean():
    torch.manual_seed(2)
    X = torch.randn(10, 12, dtype=DT)
    _same_as_autodiff(_Attn(), X, expect="analytic attention + readout")


@pytest.mark.skipif(not TORCH_HAS_MHA_SWITCH, reason="torch < 2.3: nqf refuses attention (tests/test_torch_compat.py)")
def test_transformer_layer_heads_with_layer_norms_after_them():
    torch.manual_seed(3)
    X = torch.randn(6, 3, 4, dtype=DT)
    layer = nn.TransformerEncoderLayer(4, 2, dim_feedforward=8, dropout=0.0, batch_first=True)
    model = nn.Sequential(layer, nn.Flatten(), nn.Linear(12, 2))
    _same_as_autodiff(model, X, expect="analytic attention + readout")


@pytest.mark.skipif(not TORCH_HAS_MHA_SWITCH, reason="torch < 2.3: nqf refuses attention (tests/test_torch_compat.py)")
def test_a_causal_mask_is_not_taken_for_plain_attention():
    """The analytic family assumes no mask: with a causal one the operator is the module's own autodiff one."""
    torch.manual_seed(2)
    X = torch.randn(10, 12, dtype=DT)
    _same_as_autodiff(_Attn(causal=True), X, expect="autodiff (dense)")


def test_a_wrong_readout_jacobian_is_caught():
    """Planted error: the readout Jacobian of the deep MLP with its hidden outputs shifted by one."""
    torch.manual_seed(0)
    X = torch.randn(30, 5, dtype=DT)
    deep = nn.Sequential(nn.Linear(5, 6), nn.Tanh(), nn.Linear(6, 4), nn.Tanh(), nn.Linear(4, 3)).to(DT)
    found = choose_units(deep, "0")
    op, _, _ = structure_of(deep, found, X)
    wrong = ReadoutStructure(op.inner, torch.roll(op.J, 1, dims=2))
    ref = from_module(deep, found.layout, X, matrix_free=False).dense()
    assert float((wrong.dense() - ref).abs().max()) > 1e-3 * float(ref.abs().max())
    with pytest.raises(Exception, match="zero-gradient"):
        ReadoutStructure(mlp(X, "sigmoid", n_outputs=6), op.J)


def test_the_agreement_check_rejects_planted_errors():
    """The check that admits an analytic operator (derivatives of the module by plain autograd along random
    directions, to 1e-10): the right operator passes; a readout Jacobian shifted by one, or off by a factor
    1 + 1e-8 (100× the tolerance), does not."""
    from nqf.app._study._operators import _agrees

    torch.manual_seed(0)
    X = torch.randn(30, 5, dtype=DT)
    deep = nn.Sequential(nn.Linear(5, 6), nn.Tanh(), nn.Linear(6, 4), nn.Tanh(), nn.Linear(4, 3)).to(DT)
    found = choose_units(deep, "0")
    op, _, how = structure_of(deep, found, X)
    assert how == "analytic mlp + readout"
    sub = torch.arange(8)
    assert _agrees(op, deep, found, X, sub)
    assert not _agrees(ReadoutStructure(op.inner, torch.roll(op.J, 1, dims=2)), deep, found, X, sub)
    assert not _agrees(ReadoutStructure(op.inner, op.J * (1 + 1e-8)), deep, found, X, sub)


def test_choosing_the_operator_of_an_mlp_never_imports_torch_dynamo():
    """torch.func's transforms import torch._dynamo and sympy on first use (68 MB resident with torch 2.13);
    the agreement check of an analytic operator and a readout's Jacobian use plain autograd, so choosing the
    operator of an MLP, or of a deeper network's first layer, never loads them (fresh interpreter: the check
    is about the process's imports)."""
    import subprocess
    import sys

    code = (
        "import sys, torch\n"
        "from torch import nn\n"
        "from nqf.app._study import choose_units\n"
        "from nqf.app._study._operators import structure_of\n"
        "X = torch.randn(20, 4, dtype=torch.float64)\n"
        "net = nn.Sequential(nn.Linear(4, 16, bias=False), nn.Tanh(), nn.Linear(16, 3, bias=False)).double()\n"
        "op, f0, how = structure_of(net, choose_units(net, None), X)\n"
        "deep = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3)).double()\n"
        "op2, f02, how2 = structure_of(deep, choose_units(deep, '0'), X)\n"
        "print(how, '|', how2, '|', 'torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split("|")[0].strip() == "analytic mlp", out
    assert out.split("|")[1].strip() == "analytic mlp + readout", out  # the readout's Jacobian: plain autograd too
    assert out.split("|")[2].strip() == "False", out
