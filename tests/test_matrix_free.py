"""from_module(matrix_free=True): the operator by directional derivatives equals the dense autodiff operator.

Every product (𝒜(M), 𝒜*(R), 𝒜(LLᵀ), 𝒜*(R)L, take, the data subspace, the zero-gradient terms) of the
matrix-free operator is compared with the dense ``(N, C, p, p)`` operator of the same module, to 1e-10, on
a CNN, nn.MultiheadAttention, nn.TransformerEncoderLayer, a mixture of experts (with and without the
zero-gradient condition) and a deep tanh MLP; planted errors make the comparison fail; and the CNN on all
1797 digits builds and runs without anything of size N·p².
"""

import gc

import pytest
import torch
from torch import nn

from helpers import TORCH_HAS_MHA_SWITCH
from nqf.dynamics import GD
from nqf.modules import UnitLayout, UnitSlice, attention_units, conv_units, from_module
from nqf.modules._matrix_free import MatrixFreeStructure
from nqf.modules._unit_function import UnitFunction
from nqf.networks import MixtureOfExperts

DT = torch.float64
ATOL = 1e-10


def _cnn(cin=1, m=3, H=4, C=2):
    torch.manual_seed(1)
    model = nn.Sequential(
        nn.Conv2d(cin, m, 3, padding=1, dtype=DT), nn.Tanh(), nn.Flatten(), nn.Linear(m * H * H, C, dtype=DT)
    )
    return model, conv_units(model, "0", "3"), torch.randn(6, cin, H, H, dtype=DT)


class _MHA(nn.Module):
    def __init__(self, E=4, H=2):
        super().__init__()
        self.attn = nn.MultiheadAttention(E, H, bias=True, batch_first=True, dtype=DT)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0].mean(1)


class _Encoder(nn.Module):
    def __init__(self, E=4, H=2, ff=6):
        super().__init__()
        self.enc = nn.TransformerEncoderLayer(E, H, ff, dropout=0.1, batch_first=True, dtype=DT)
        with torch.no_grad():
            self.enc.self_attn.in_proj_bias.normal_()
            self.enc.self_attn.out_proj.bias.normal_()

    def forward(self, x):
        return self.enc(x)[:, -1]


def _mha():
    torch.manual_seed(2)
    net = _MHA()
    return net, attention_units(net.attn, "attn."), torch.randn(5, 3, 4, dtype=DT)


def _encoder():
    torch.manual_seed(3)
    net = _Encoder()
    return net, attention_units(net.enc.self_attn, "enc.self_attn."), torch.randn(4, 3, 4, dtype=DT)


def _moe(act):
    torch.manual_seed(4)
    net = MixtureOfExperts(3, 3, 2, act)
    return net, net.units, torch.randn(6, 3, dtype=DT)


def _deep_mlp(D=3, m=4, h=5, C=2):
    """Three tanh layers; the units are the first layer's neurons (row, bias, next layer's column)."""
    torch.manual_seed(5)
    net = nn.Sequential(
        nn.Linear(D, m, dtype=DT),
        nn.Tanh(),
        nn.Linear(m, h, dtype=DT),
        nn.Tanh(),
        nn.Linear(h, h, dtype=DT),
        nn.Tanh(),
        nn.Linear(h, C, dtype=DT),
    )
    units = UnitLayout([UnitSlice("0.weight", axis=0), UnitSlice("0.bias", axis=0), UnitSlice("2.weight", axis=1)])
    return net, units, torch.randn(7, D, dtype=DT)


CASES = {
    "cnn": _cnn,
    "mha": _mha,
    "encoder": _encoder,
    "moe-tanh": lambda: _moe("tanh"),
    "moe-sigmoid": lambda: _moe("sigmoid"),
    "deep-mlp": _deep_mlp,
}


def _close(a, b):
    torch.testing.assert_close(a, b, rtol=0, atol=ATOL)


def _probes(op, seed=0):
    gen = torch.Generator().manual_seed(seed)
    S = torch.randn(op.p, op.p, generator=gen, dtype=DT)
    L = torch.randn(op.p, 3, generator=gen, dtype=DT)
    R = torch.randn(op.n_samples, op.n_outputs, generator=gen, dtype=DT)
    mu = torch.randn(op.p, generator=gen, dtype=DT)
    return S + S.T, L, R, mu


def _compare_products(dense, mf):
    """Every product of the two operators agrees to ATOL (the dense one is the reference)."""
    M, L, R, mu = _probes(dense)
    _close(mf(M), dense(M))
    _close(mf.adjoint(R), dense.adjoint(R))
    _close(mf.forward_factor(L), dense.forward_factor(L))
    _close(mf.adjoint_apply(R, L), dense.adjoint_apply(R, L))
    _close(mf.forward_unchecked(M), dense.forward_unchecked(M))
    _close(mf.adjoint_unchecked(R), dense.adjoint_unchecked(R))
    _close(mf.forward_factor(L), dense.forward_unchecked(L @ L.T))
    _close(mf.predict(M, mu), dense.predict(M, mu))


def _compare(dense, mf):
    assert isinstance(mf, MatrixFreeStructure) and not isinstance(dense, MatrixFreeStructure)
    assert (mf.p, mf.n_samples, mf.n_outputs) == (dense.p, dense.n_samples, dense.n_outputs)
    assert mf.satisfies_zgz == dense.satisfies_zgz and mf.layout == dense.layout
    _close(mf.offset, dense.offset)
    _close(mf.dense(), dense.dense())
    _compare_products(dense, mf)
    if dense.linear is not None:
        assert mf.linear is not None
        _close(mf.linear, dense.linear)
    assert (mf.cross is None) == (dense.cross is None)
    if dense.cross is not None:
        assert isinstance(mf.cross, MatrixFreeStructure)
        _close(mf.cross.dense(), dense.cross.dense())
        _compare_products(dense.cross, mf.cross)
    idx = [3, 0, 2]
    sub_d, sub_f = dense.take(idx), mf.take(idx)
    assert sub_f.n_samples == 3 and isinstance(sub_f, MatrixFreeStructure)
    _close(sub_f.dense(), dense.dense()[idx])
    _compare_products(sub_d, sub_f)


def _same_span(U, V):
    """Equal dimensions and all principal angles zero (cosines one)."""
    assert U.shape == V.shape, (U.shape, V.shape)
    if U.shape[1]:
        cos = torch.linalg.svdvals(U.T @ V)
        assert float(cos.min()) > 1 - 1e-8, cos


@pytest.mark.parametrize("name", list(CASES))
def test_matrix_free_equals_dense(name):
    if name in ("mha", "encoder") and not TORCH_HAS_MHA_SWITCH:
        pytest.skip("torch < 2.3: nqf refuses attention (tests/test_torch_compat.py)")
    net, units, X = CASES[name]()
    dense = from_module(net, units, X, matrix_free=False)
    mf = from_module(net, units, X, matrix_free=True)
    if name == "moe-sigmoid":  # σ(0) ≠ 0: the linear and the cross term are carried
        assert not dense.satisfies_zgz and dense.linear is not None and dense.cross is not None
    else:
        assert dense.satisfies_zgz
    assert float(dense.dense().abs().max()) > 1e-3
    _compare(dense, mf)
    _same_span(mf.data_subspace(), dense.data_subspace(method="dense"))


def test_data_subspace_smaller_than_p():
    """Two samples in R⁶: A_{n,c} pairs (x_n, 1) with the fixed gradient g_c of f_c in the second layer's input.

    So the span is (x_n, 1) for n = 1, 2 plus g_c for c = 1, 2: 4 of p = 12, found by the range finder.
    """
    net, units, X = _deep_mlp(D=6)
    X = X[:2]
    dense = from_module(net, units, X, matrix_free=False)
    mf = from_module(net, units, X, matrix_free=True)
    U = dense.data_subspace(method="dense")
    assert (U.shape[1], dense.p) == (4, 12)
    _same_span(mf.data_subspace(), U)
    _same_span(mf.data_subspace(method="dense"), U)


def test_default_is_dense_below_the_budget():
    net, units, X = _cnn()
    op = from_module(net, units, X)
    assert not isinstance(op, MatrixFreeStructure)


def test_zgz_require_refuses_matrix_free_too():
    from nqf.errors import NormalFormError

    net, units, X = _moe("sigmoid")
    with pytest.raises(NormalFormError, match="zero-gradient condition fails"):
        from_module(net, units, X, matrix_free=True, zgz="require")


def test_to_and_chunking():
    net, units, X = _deep_mlp()
    ref = from_module(net, units, X, matrix_free=False)
    mf = from_module(net, units, X, matrix_free=True, chunk_size=2)
    _compare_products(ref, mf)
    mf32 = mf.to(torch.float32)
    assert mf32.dtype == torch.float32 and isinstance(mf32, MatrixFreeStructure)
    L = torch.randn(mf.p, 2, dtype=DT)
    torch.testing.assert_close(mf32.forward_factor(L.float()).double(), ref.forward_factor(L), rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------------------- planted errors
class _Kinked(nn.Module):
    """Two-layer net with an arbitrary elementwise function and per-unit scales (a buffer)."""

    def __init__(self, fn, scales=(1.0, 1.0, 1.0, 1.0)):
        super().__init__()
        self.l1 = nn.Linear(3, len(scales), bias=False, dtype=DT)
        self.l2 = nn.Linear(len(scales), 2, bias=False, dtype=DT)
        self.fn = fn
        self.register_buffer("c", torch.tensor(scales, dtype=DT))

    def forward(self, x):
        return self.l2(self.c * self.fn(self.l1(x)))

    units = UnitLayout([UnitSlice("l2.weight", axis=1), UnitSlice("l1.weight", axis=0)])


def test_checks_run_on_the_matrix_free_path():
    """The smoothness, truncation-order and symmetry checks refuse the same modules as on the dense path."""
    from nqf.errors import NormalFormError

    X = torch.randn(6, 3, dtype=DT)
    seq = nn.Sequential(nn.Linear(3, 4, dtype=DT), nn.ReLU(), nn.Linear(4, 1, dtype=DT))
    relu_units = UnitLayout([UnitSlice("2.weight", axis=1), UnitSlice("0.weight", axis=0)])
    with pytest.raises(NormalFormError, match="not three times differentiable"):
        from_module(seq, relu_units, X, matrix_free=True)
    with pytest.raises(NormalFormError, match="does not hold to second order"):  # |u·x|: A = 0, error ~ s²
        from_module(_Kinked(torch.abs), _Kinked.units, X, matrix_free=True)
    with pytest.raises(NormalFormError, match="units are not interchangeable"):
        from_module(_Kinked(torch.tanh, (1.0, 3.0, 1.0, 1.0)), _Kinked.units, X, matrix_free=True)
    assert isinstance(from_module(_Kinked(torch.tanh), _Kinked.units, X, matrix_free=True), MatrixFreeStructure)


def test_wrong_factor_one_half_is_caught(monkeypatch):
    net, units, X = _cnn()
    dense = from_module(net, units, X, matrix_free=False)
    mf = from_module(net, units, X, matrix_free=True)
    original = MatrixFreeStructure._weighted_forward
    monkeypatch.setattr(MatrixFreeStructure, "_weighted_forward", lambda self, V, lam: 2 * original(self, V, lam))
    with pytest.raises(AssertionError):
        _compare_products(dense, mf)
    monkeypatch.setattr(MatrixFreeStructure, "_weighted_forward", original)
    original_adj = MatrixFreeStructure._adjoint_columns
    monkeypatch.setattr(MatrixFreeStructure, "_adjoint_columns", lambda self, *a, **k: 2 * original_adj(self, *a, **k))
    with pytest.raises(AssertionError):
        _compare_products(dense, mf)


def test_perturbed_reduced_copy_is_caught():
    """A matrix-free operator of a copy whose fixed (non-unit) layer is perturbed does not match."""
    net, units, X = _deep_mlp()
    dense = from_module(net, units, X, matrix_free=False)
    bad = from_module(net, units, X, matrix_free=True)
    assert isinstance(bad, MatrixFreeStructure)
    module = bad.fn.module
    with torch.no_grad():
        module.get_submodule("4").weight.mul_(1 + 1e-6)
    bad.fn = UnitFunction(module, bad.fn.layout, bad.fn.output)
    with pytest.raises(AssertionError):
        _compare_products(dense, bad)


# ------------------------------------------------------------------------------------------- memory
def _rss_kib(field):
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith(field))


def _tensors_held(op):
    out = [op.X, op.offset] + ([op.linear] if op.linear is not None else [])
    out += list(op.fn.params.values()) + list(op.fn.base.values()) + list(op.fn.buffers.values())
    return out


@pytest.mark.slow
def test_digits_cnn_without_n_p_squared_memory():
    """All 1797 digits (8×8), Conv2d(1, 16, 3) + Tanh + Flatten + Linear(1024, 10): p = 650, C = 10.

    The dense array would be N·C·p² = 7.6·10⁹ entries (61 GB), and N·p² alone is 6.1 GB.  The default
    from_module picks the matrix-free operator; building it (with all checks) and one forward_factor and one
    adjoint_apply with rank-8 factors must add less than 1 GiB of peak resident memory (Linux VmHWM, reset
    through /proc/self/clear_refs), and no tensor the operator holds has N·p² entries.
    """
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pytest.skip("needs Linux /proc/self/clear_refs to reset the peak resident memory")
    from sklearn.datasets import load_digits

    X = torch.as_tensor(load_digits().data, dtype=DT).reshape(-1, 1, 8, 8) / 16.0
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1, dtype=DT), nn.Tanh(), nn.Flatten(), nn.Linear(16 * 64, 10, dtype=DT)
    )
    gc.collect()
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    before = _rss_kib("VmRSS")
    op = from_module(model, conv_units(model, "0", "3"), X)
    assert isinstance(op, MatrixFreeStructure) and op.satisfies_zgz
    N, p = op.n_samples, op.p
    assert (N, p, op.n_outputs) == (1797, 650, 10)
    L = torch.randn(p, 8, dtype=DT) * 0.1
    y = op.forward_factor(L)
    G = op.adjoint_apply(torch.randn(N, 10, dtype=DT), L)
    used = (_rss_kib("VmHWM") - before) * 1024
    assert y.shape == (N, 10) and G.shape == (p, 8)
    assert max(t.numel() for t in _tensors_held(op)) < N * p
    assert used < 2**30, f"matrix-free from_module + products used {used / 2**20:.0f} MiB"
    # spot check against the dense Hessian of a few samples
    few = op.take([0, 900, 1796])
    A = few.dense()
    torch.testing.assert_close(few.forward_factor(L), torch.einsum("ncij,ik,jk->nc", A, L, L), rtol=0, atol=ATOL)


# ------------------------------------------------------------------------------ no forward-mode rules
class _TanhWithoutJvp(torch.autograd.Function):
    """tanh with a backward rule only: forward-mode AD raises NotImplementedError."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return torch.tanh(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * (1 - y * y)


class _NoJvp(nn.Module):
    def forward(self, x):
        return _TanhWithoutJvp.apply(x)


def test_layer_without_forward_mode_falls_back_to_reverse_over_reverse():
    torch.manual_seed(6)
    net = nn.Sequential(nn.Linear(3, 4, dtype=DT), _NoJvp(), nn.Linear(4, 4, dtype=DT), _NoJvp(), nn.Linear(4, 2))
    net = net.to(DT)
    units = UnitLayout([UnitSlice("0.weight", axis=0), UnitSlice("0.bias", axis=0), UnitSlice("2.weight", axis=1)])
    X = torch.randn(5, 3, dtype=DT)
    with pytest.raises(NotImplementedError):
        torch.func.jvp(_TanhWithoutJvp.apply, (X,), (X,))
    dense = from_module(net, units, X, matrix_free=False)
    mf = from_module(net, units, X, matrix_free=True)
    assert isinstance(mf, MatrixFreeStructure) and mf.reverse
    _compare(dense, mf)


# ------------------------------------------------------------------------------------- the dynamics
@pytest.mark.parametrize("name", ["deep-mlp", "moe-sigmoid"])
def test_simulate_with_matrix_free_operator_matches_dense(name):
    """The closed dynamics see the matrix-free operator only through the protocol: same losses to round-off."""
    from nqf.dynamics import simulate

    net, units, X = CASES[name]()
    dense = from_module(net, units, X, matrix_free=False)
    mf = from_module(net, units, X, matrix_free=True)
    gen = torch.Generator().manual_seed(7)
    y = torch.randn(dense.n_samples, dense.n_outputs, generator=gen, dtype=DT)
    W0 = 0.1 * torch.randn(dense.p, 3, generator=gen, dtype=DT)
    runs = [simulate(op, y, W0=W0, optimizer=GD(0.05), steps=15, form="weights") for op in (dense, mf)]
    assert runs[0].loss.shape == runs[1].loss.shape and runs[0].loss.numel() > 1
    torch.testing.assert_close(runs[1].loss, runs[0].loss, rtol=1e-9, atol=1e-12)
    if dense.satisfies_zgz:
        runs = [simulate(op, y, M0=W0 @ W0.T, optimizer=GD(0.05), steps=15) for op in (dense, mf)]
        torch.testing.assert_close(runs[1].loss, runs[0].loss, rtol=1e-9, atol=1e-12)
