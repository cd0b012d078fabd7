"""Attention families: analytic structure operators vs autodiff of the real modules.

Exact truncation orders (derived in nqf.structure._attention): multi-head attention 4 (the head output is
W_O W_V x̄ times a softmax whose first correction is O(S) = O(‖W‖²), and f is even in W); query–key-only
attention 4 (f depends on W only through the degree-2 scores S; the next softmax term is O(S²)).
"""

import math

import numpy as np
import pytest
import torch
from torch import nn

from helpers import TORCH_HAS_MHA_SWITCH, loglog_slope
from nqf.errors import NonFiniteError, ShapeError
from nqf.modules._attention_layouts import attention_units
from nqf.modules._autodiff import from_module
from nqf.networks._attention import MultiHeadAttention, QKAttention
from nqf.structure._attention import (
    EyeKronKernel,
    HeadValueKernel,
    attention_token_weights,
    multi_head_attention,
    qk_attention,
)

pytestmark = pytest.mark.skipif(
    not TORCH_HAS_MHA_SWITCH, reason="torch < 2.3: nqf refuses nn.MultiheadAttention (tests/test_torch_compat.py)"
)

DT = torch.float64

# (N, T, D, H, d_head, d_key, C, causal, readout); H ≥ 2 because from_module needs two units.
MHA_SHAPES = [
    (5, 4, 3, 2, 2, 3, 2, False, "mean"),
    (5, 4, 3, 3, 2, 1, 2, True, "mean"),
    (4, 3, 1, 2, 1, 1, 1, True, "last"),  # D = 1, one output, d_h = d_k = 1
    (4, 1, 2, 2, 2, 2, 3, False, "last"),  # a single token
    (3, 1, 2, 2, 1, 2, 1, True, "mean"),  # a single token, causal
    (6, 5, 2, 2, 3, 2, 1, False, "last"),
    (6, 5, 4, 2, 2, 2, None, True, "last"),  # C defaults to D
]


def _x(N, T, D, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(N, T, D, generator=g, dtype=DT)


@pytest.mark.parametrize("shape", MHA_SHAPES)
def test_mha_analytic_equals_autodiff(shape):
    N, T, D, H, dh, dk, C, causal, readout = shape
    X = _x(N, T, D, 1)
    net = MultiHeadAttention(D, H, dh, dk, C, causal, readout)
    auto = from_module(net, net.units, X)
    op = multi_head_attention(X, dh, dk, C, causal, readout)
    C = D if C is None else C
    assert op.p == auto.p == C * dh + dh * D + 2 * dk * D
    assert op.n_outputs == C and auto.satisfies_zgz and op.satisfies_zgz
    torch.testing.assert_close(op.dense(), auto.dense(), rtol=0, atol=1e-10)
    torch.testing.assert_close(op.offset, auto.offset, rtol=0, atol=1e-12)
    assert float(auto.dense().abs().max()) > 1e-3  # non-trivial
    # Q and K blocks have zero rows/columns
    nOV = C * dh + dh * D
    assert float(auto.dense()[..., nOV:, :].abs().max()) < 1e-12


@pytest.mark.parametrize("shape", MHA_SHAPES)
def test_qk_analytic_equals_autodiff(shape):
    N, T, D, H, _, dk, C, causal, readout = shape
    C = 2 if C is None else C
    X = _x(N, T, D, 2)
    V = torch.randn(C, D, generator=torch.Generator().manual_seed(3), dtype=DT)
    net = QKAttention(D, H, dk, V, causal, readout=readout)
    auto = from_module(net, net.units, X)
    op = qk_attention(X, V, dk, H, causal, readout=readout)
    assert op.p == auto.p == 2 * dk * D
    assert auto.satisfies_zgz and op.satisfies_zgz
    torch.testing.assert_close(op.dense(), auto.dense(), rtol=0, atol=1e-10)
    torch.testing.assert_close(op.offset, auto.offset, rtol=0, atol=1e-12)
    if T == 1:
        assert float(op.dense().abs().max()) < 1e-14  # one token: softmax ≡ 1, A = 0 (up to round-off)
    else:
        assert float(auto.dense().abs().max()) > 1e-3


def test_qk_offset_scales_with_heads_and_A_does_not():
    X, V = _x(4, 3, 2, 4), torch.randn(2, 2, dtype=DT)
    ops = [qk_attention(X, V, 2, H) for H in (2, 3)]
    torch.testing.assert_close(ops[0].dense(), ops[1].dense(), rtol=0, atol=0)
    torch.testing.assert_close(ops[0].offset / 2, ops[1].offset / 3, rtol=1e-14, atol=1e-15)
    # mean readout, non-causal: f(0) = H · mean_s V x_s
    torch.testing.assert_close(ops[1].offset, 3 * X.mean(1) @ V.T, rtol=1e-13, atol=1e-14)


def test_token_weights_closed_forms():
    T = 4
    rho, P = attention_token_weights(T, causal=True, readout="mean")
    c = P.T @ rho
    exact = torch.tensor([sum(1.0 / (t + 1) for t in range(s, T)) / T for s in range(T)], dtype=DT)
    torch.testing.assert_close(c, exact, rtol=1e-15, atol=0)
    for causal in (False, True):
        rho, P = attention_token_weights(T, causal=causal, readout="last")
        torch.testing.assert_close(P.T @ rho, torch.full((T,), 1.0 / T, dtype=DT))
    torch.testing.assert_close(P.sum(1), torch.ones(T, dtype=DT))


# ----------------------------------------------------------------------------- nn.MultiheadAttention
class _TorchMHA(nn.Module):
    """Self-attention with PyTorch's module, mean or last-token readout."""

    def __init__(self, E, H, bias, causal, readout="mean", math_backend=False):
        super().__init__()
        self.attn = nn.MultiheadAttention(E, H, bias=bias, batch_first=True, dtype=DT)
        self.causal, self.readout, self.math_backend = causal, readout, math_backend

    def forward(self, x):
        T = x.shape[1]
        mask = torch.ones(T, T, dtype=torch.bool).triu(1) if self.causal else None
        if self.math_backend:  # fused SDPA path, forced onto the math kernel (forward-AD capable)
            from torch.nn.attention import SDPBackend, sdpa_kernel

            with sdpa_kernel(SDPBackend.MATH):
                out, _ = self.attn(x, x, x, need_weights=False, attn_mask=mask)
        else:
            out, _ = self.attn(x, x, x, need_weights=True, attn_mask=mask)
        return out.mean(1) if self.readout == "mean" else out[:, -1]


@pytest.mark.parametrize(
    "bias,causal,readout,math_backend",
    [
        (False, False, "mean", False),
        (True, False, "mean", False),
        (True, True, "mean", False),
        (False, True, "last", False),
        (True, False, "mean", True),
    ],
)
def test_torch_multihead_attention_matches_analytic(bias, causal, readout, math_backend):
    E, H, T, N = 6, 3, 4, 5
    net = _TorchMHA(E, H, bias, causal, readout, math_backend)
    if bias:  # non-zero biases: b_V enters A, b_Q/b_K do not, out_proj.bias only shifts f(0)
        with torch.no_grad():
            net.attn.in_proj_bias.normal_()
            net.attn.out_proj.bias.normal_()
    X = _x(N, T, E, 5)
    auto = from_module(net, attention_units(net.attn, "attn."), X)
    op = multi_head_attention(X, E // H, causal=causal, readout=readout, bias=bias)
    assert op.p == auto.p
    assert auto.satisfies_zgz
    torch.testing.assert_close(op.dense(), auto.dense(), rtol=0, atol=1e-10)
    off = net.attn.out_proj.bias.detach().expand(N, E) if bias else torch.zeros(N, E, dtype=DT)
    torch.testing.assert_close(auto.offset, off, rtol=0, atol=1e-12)


def _dense_head0_hessian(net, layout, X):
    """½ ∂²f/∂w_0² at W = 0, naively: reverse-over-reverse per sample on the unmodified module."""
    from torch.func import functional_call
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from nqf.modules._units import UnitScatter

    net = net.eval()
    sc = UnitScatter(net, layout)
    fast = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)  # PyTorch's native fast path has no double backward
    out = []
    try:
        with sdpa_kernel(SDPBackend.MATH):
            for n in range(X.shape[0]):

                def f(w, n=n):
                    W = torch.cat([w[:, None], torch.zeros(sc.p, sc.m - 1, dtype=DT)], 1)
                    return functional_call(net, sc(W), (X[n : n + 1],)).reshape(-1)

                def jac(fun, w, **kw):
                    return torch.autograd.functional.jacobian(fun, w, vectorize=True, **kw)

                out.append(0.5 * jac(lambda w: jac(f, w, create_graph=True), torch.zeros(sc.p, dtype=DT)))
    finally:
        torch.backends.mha.set_fastpath_enabled(fast)
    return torch.stack(out)


@pytest.mark.parametrize("bias,causal,readout", [(False, False, "mean"), (True, True, "mean"), (True, False, "last")])
def test_torch_mha_need_weights_false_matches_analytic(bias, causal, readout):
    """The fused SDPA path (no forward-mode AD) through from_module, plain need_weights=False."""

    class Fused(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = nn.MultiheadAttention(6, 3, bias=bias, batch_first=True, dtype=DT)

        def forward(self, x):
            T = x.shape[1]
            mask = torch.ones(T, T, dtype=torch.bool).triu(1) if causal else None
            out, w = self.attn(x, x, x, need_weights=False, attn_mask=mask, is_causal=causal)
            assert w is None
            return out.mean(1) if readout == "mean" else out[:, -1]

    net = Fused()
    if bias:
        with torch.no_grad():
            net.attn.in_proj_bias.normal_()
            net.attn.out_proj.bias.normal_()
    X = _x(5, 4, 6, 11)
    auto = from_module(net, attention_units(net.attn, "attn."), X)
    op = multi_head_attention(X, 2, causal=causal, readout=readout, bias=bias)
    assert auto.satisfies_zgz and float(op.dense().abs().max()) > 1e-2
    torch.testing.assert_close(auto.dense(), op.dense(), rtol=0, atol=1e-10)


class _Encoder(nn.Module):
    """nn.TransformerEncoderLayer with a token readout; its self-attention heads are the units."""

    def __init__(self, E=4, H=2, ff=6, norm_first=False, causal=False, readout="mean"):
        super().__init__()
        self.enc = nn.TransformerEncoderLayer(E, H, ff, dropout=0.1, batch_first=True, norm_first=norm_first, dtype=DT)
        self.causal, self.readout = causal, readout
        with torch.no_grad():
            self.enc.self_attn.in_proj_bias.normal_()
            self.enc.self_attn.out_proj.bias.normal_()

    def forward(self, x):
        T = x.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(T, dtype=DT) if self.causal else None
        y = self.enc(x, src_mask=mask, is_causal=self.causal)
        return y.mean(1) if self.readout == "mean" else y[:, -1]


def test_transformer_encoder_layer_reduces_to_attention_form():
    """Identity norms and a zero feed-forward output: the layer is x + MHA(x), so A is the analytic MHA form.

    The layer is built in training mode with dropout 0.1: from_module evaluates in eval mode (dropout off).
    """
    net = _Encoder(E=6, H=3)
    net.enc.norm1, net.enc.norm2 = nn.Identity(), nn.Identity()
    with torch.no_grad():
        net.enc.linear2.weight.zero_()
        net.enc.linear2.bias.zero_()
    X = _x(5, 4, 6, 12)
    auto = from_module(net, attention_units(net.enc.self_attn, "enc.self_attn."), X)
    op = multi_head_attention(X, 2, bias=True)
    torch.testing.assert_close(auto.dense(), op.dense(), rtol=0, atol=1e-10)
    # f(0) = x̄ + b_O (the residual stream plus the shared output bias)
    torch.testing.assert_close(auto.offset, X.mean(1) + net.enc.self_attn.out_proj.bias.detach(), rtol=0, atol=1e-12)


@pytest.mark.parametrize("norm_first,causal,readout", [(False, False, "mean"), (True, True, "last")])
def test_transformer_encoder_layer_matches_dense_autodiff(norm_first, causal, readout):
    """Full layer (LayerNorm, ReLU feed-forward, residuals): against the naive Hessian of PyTorch's own layer.

    Non-causal post-norm also against the chain rule: heads enter the residual stream as
    δ = Σ_h W_O^h (W_V^h x̄ + b_V^h) + O(‖w‖⁴), identical on every token, so A(x) = J̄(x) · A_MHA(x) with
    J̄ = mean_t ∂g/∂z at z_t = x_t + b_O, g the rest of the layer per token.
    """
    net = _Encoder(norm_first=norm_first, causal=causal, readout=readout)
    X = _x(2, 3, 4, 13)
    lay = attention_units(net.enc.self_attn, "enc.self_attn.")
    auto = from_module(net, lay, X)
    ref = _dense_head0_hessian(net, lay, X)
    assert float(ref.abs().max()) > 1e-2
    torch.testing.assert_close(auto.dense(), ref, rtol=0, atol=1e-10)
    if not norm_first and not causal:
        enc = net.enc.eval()

        def g(z):  # (E,) -> (E,): the layer after attention, for one token
            h = enc.norm1(z)
            return enc.norm2(h + enc.linear2(enc.activation(enc.linear1(h))))

        z = X + enc.self_attn.out_proj.bias.detach()
        J = torch.stack(
            [torch.stack([torch.autograd.functional.jacobian(g, z[n, t]) for t in range(3)]).mean(0) for n in range(2)]
        )  # (N, E, E)
        chain = torch.einsum("nce,neij->ncij", J, multi_head_attention(X, 2, bias=True).dense())
        torch.testing.assert_close(auto.dense(), chain, rtol=0, atol=1e-10)


def test_transformer_encoder_stack_heads_of_each_layer():
    """Two-layer nn.TransformerEncoder + linear head: each layer's heads (found by name) vs the naive Hessian.

    Layer 0's heads are read out through all of layer 1 (its attention included), layer 1's through the head.
    """
    from nqf.modules import select_units

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            layer = nn.TransformerEncoderLayer(4, 2, 6, batch_first=True, activation="gelu", dtype=DT)
            self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = nn.Linear(4, 2, dtype=DT)

        def forward(self, x):
            return self.head(self.enc(x).mean(1))

    net = Net()
    X = _x(2, 3, 4, 15)
    for name in ("enc.layers.0", "enc.layers.1.self_attn"):
        layout = select_units(net, name).layout
        auto = from_module(net, layout, X)
        ref = _dense_head0_hessian(net, layout, X)
        assert auto.satisfies_zgz and float(ref.abs().max()) > 1e-2
        torch.testing.assert_close(auto.dense(), ref, rtol=0, atol=1e-10)


def test_wrong_attention_layout_is_caught():
    """Heads without their value rows: each W_O^h meets a different fixed W_V^h, so the units differ."""
    from nqf.errors import NormalFormError
    from nqf.modules import UnitLayout, UnitSlice

    net = _TorchMHA(6, 3, False, False)
    X = _x(4, 3, 6, 14)
    with pytest.raises(NormalFormError, match="units are not interchangeable"):
        from_module(net, UnitLayout([UnitSlice("attn.out_proj.weight", axis=1, size=2)]), X)
    # a head size that is not d_h mixes heads: also not interchangeable
    wrong = UnitLayout(
        [UnitSlice("attn.out_proj.weight", axis=1, size=3), UnitSlice("attn.in_proj_weight", axis=0, size=3, offset=12)]
    )
    with pytest.raises(NormalFormError, match="units are not interchangeable"):
        from_module(net, wrong, X)


def _rss_kib(field):
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith(field))


def test_mha_p256_memory_under_one_gigabyte():
    """nn.MultiheadAttention(16, 4) heads: p = 16·4 + 3·4·16 = 256, C = 16 outputs; from_module adds < 1 GiB.

    Peak resident memory of this process during the call (Linux VmHWM, reset just before through
    /proc/self/clear_refs) minus the resident memory before it.  A (N, C, p, p) is 128 MiB here (N = 16);
    measured ≈ 360 MiB.  Differentiating the full module with all 16 samples in one chunk
    (``reduce=False, chunk_size=16``) adds ≈ 1.13 GiB (measured), so this check fails for that implementation.
    """
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # reset the peak-RSS counter VmHWM
    except OSError:
        pytest.skip("needs Linux /proc/self/clear_refs to reset the peak resident memory")

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = nn.MultiheadAttention(16, 4, bias=False, batch_first=True, dtype=DT)

        def forward(self, x):
            return self.attn(x, x, x, need_weights=False)[0].mean(1)

    net = Net()
    X = _x(16, 8, 16, 16)
    import gc

    gc.collect()
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    before = _rss_kib("VmRSS")
    op = from_module(net, attention_units(net.attn, "attn."), X)
    used = (_rss_kib("VmHWM") - before) * 1024
    assert op.p == 256
    torch.testing.assert_close(op.dense(), multi_head_attention(X, 4).dense(), rtol=0, atol=1e-10)
    assert used < 2**30, f"from_module used {used / 2**20:.0f} MiB"


def test_attention_units_slices_separate_projections():
    E, H = 4, 2
    mha = nn.MultiheadAttention(E, H, kdim=3, vdim=5, add_bias_kv=True, dtype=DT)
    lay = attention_units(mha).resolve(dict(mha.named_parameters()))
    W = lay.get_W(mha)
    dh = E // H
    h = 1
    sl = slice(h * dh, (h + 1) * dh)
    expect = torch.cat(
        [
            mha.out_proj.weight[:, sl].reshape(-1),
            mha.v_proj_weight[sl].reshape(-1),
            mha.in_proj_bias[2 * E + h * dh : 2 * E + (h + 1) * dh],
            mha.q_proj_weight[sl].reshape(-1),
            mha.k_proj_weight[sl].reshape(-1),
            mha.in_proj_bias[sl],
            mha.in_proj_bias[E + h * dh : E + (h + 1) * dh],
            mha.bias_k[..., sl].reshape(-1),
            mha.bias_v[..., sl].reshape(-1),
        ]
    ).detach()
    assert lay.n_units == H and W.shape == (expect.numel(), H)
    torch.testing.assert_close(W[:, h], expect, rtol=0, atol=0)
    with pytest.raises(TypeError, match="`mha` must be a torch.nn.MultiheadAttention"):
        attention_units(nn.Linear(2, 2))


# ----------------------------------------------------------------------------- operator identities
def _ops():
    X = _x(7, 5, 3, 6)
    V = torch.randn(2, 3, dtype=DT)
    return [
        multi_head_attention(X, 2, 3, 4, causal=True),
        multi_head_attention(X, 2, 1, 1, readout="last", bias=True),
        qk_attention(X, V, 2, 3, causal=True),
        qk_attention(X, V[:1], 3, 2, readout="last"),
    ]


@pytest.mark.parametrize("k", range(4))
def test_adjoint_dense_take_to(k):
    op = _ops()[k]
    g = torch.Generator().manual_seed(k)
    M = torch.randn(op.p, op.p, generator=g, dtype=DT)
    M = M + M.T
    R = torch.randn(op.n_samples, op.n_outputs, generator=g, dtype=DT)
    R = R[:, 0] if op.n_outputs == 1 else R
    y, G = op(M), op.adjoint(R)
    lhs, rhs = float((y * R).sum()), float((M * G).sum())
    assert abs(lhs - rhs) <= 1e-12 * (abs(lhs) + float(y.abs().sum() * R.abs().max()))
    torch.testing.assert_close(G, G.T, rtol=0, atol=0)
    A = op.dense()
    dense_y = torch.einsum("...ij,ij->...", A, M)
    torch.testing.assert_close(y, dense_y, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(A, A.transpose(-1, -2), rtol=0, atol=0)
    dense_adj = torch.einsum("n...,n...ij->ij", R, A)
    torch.testing.assert_close(G, dense_adj, rtol=1e-12, atol=1e-12)
    idx = torch.tensor([4, 0, 2])
    torch.testing.assert_close(op.take(idx).dense(), A[idx], rtol=0, atol=0)
    torch.testing.assert_close(op.take(idx).offset, op.offset[idx], rtol=0, atol=0)
    op32 = op.to(torch.float32)
    torch.testing.assert_close(op32(M.float()), y.float(), rtol=1e-4, atol=1e-4)


def test_structured_storage_scales():
    """No N × p × p array: the MHA kernel stores x̄ (N, D), the QK kernel Z (N, C, D, D)."""
    N, T, D = 20000, 6, 16
    X = torch.randn(N, T, D, dtype=DT)
    op = multi_head_attention(X, 8, n_outputs=16)  # p = 128 + 128 + 256 = 512; dense would be 42 GB
    assert op.p == 512 and isinstance(op.kernel, HeadValueKernel) and op.kernel.xbar.shape == (N, D)
    M = torch.randn(op.p, op.p, dtype=DT)
    y = op(M)
    assert y.shape == (N, 16)
    n = torch.tensor([17])
    torch.testing.assert_close(y[n], torch.einsum("ncij,ij->nc", op.take(n).dense(), 0.5 * (M + M.T)))
    qk = qk_attention(X[:2000], torch.randn(3, D, dtype=DT), 4, 2)
    assert isinstance(qk.kernel, EyeKronKernel) and qk.kernel.Z.shape == (2000, 3, D, D)
    assert qk.adjoint(torch.randn(2000, 3, dtype=DT)).shape == (qk.p, qk.p)


# ----------------------------------------------------------------------------- truncation order
def _truncation_errors(net, op, X, scales, seed=0):
    lay = net.units
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(op.p, lay.n_units, generator=g, dtype=DT) / math.sqrt(lay.n_units)
    errs = []
    for s in scales:
        lay.set_W(net, s * W)
        with torch.no_grad():
            f = net(X)
        nf = op.predict(s**2 * W @ W.T)
        nf = nf[:, None] if nf.ndim == 1 else nf
        errs.append(float((f - nf).norm()))
    return np.array(errs)


SCALES = np.geomspace(0.1, 0.01, 5)


@pytest.mark.parametrize("causal,readout", [(False, "mean"), (True, "mean"), (True, "last")])
def test_mha_truncation_order_is_four(causal, readout):
    X = _x(6, 5, 3, 7)
    net = MultiHeadAttention(3, 3, 2, 2, 2, causal, readout)
    op = multi_head_attention(X, 2, 2, 2, causal, readout)
    e = _truncation_errors(net, op, X, SCALES)
    assert abs(loglog_slope(SCALES, e) - 4.0) < 0.3, e


@pytest.mark.parametrize("causal,readout", [(False, "mean"), (True, "mean"), (False, "last")])
def test_qk_truncation_order_is_four(causal, readout):
    X = _x(6, 5, 3, 8)
    V = torch.randn(2, 3, dtype=DT)
    net = QKAttention(3, 3, 2, V, causal, readout=readout)
    op = qk_attention(X, V, 2, 3, causal, readout=readout)
    e = _truncation_errors(net, op, X, SCALES)
    assert abs(loglog_slope(SCALES, e) - 4.0) < 0.3, e


def test_single_token_qk_is_exact():
    X, V = _x(5, 1, 3, 9), torch.randn(2, 3, dtype=DT)
    net = QKAttention(3, 2, 2, V)
    e = _truncation_errors(net, qk_attention(X, V, 2, 2), X, [1.0, 3.0])
    assert e.max() < 1e-13


# ----------------------------------------------------------------------------- bad input
def test_bad_input():
    X = torch.randn(3, 4, 2, dtype=DT)
    with pytest.raises(ShapeError, match=r"`X` must have 3 dimensions"):
        multi_head_attention(X[0], 2)
    with pytest.raises(ShapeError, match=r"`X` must have shape \(N, T, D\)"):
        multi_head_attention(X[:, :0], 2)
    Xn = X.clone()
    Xn[0, 1, 1] = float("nan")
    with pytest.raises(NonFiniteError, match="`X` must be finite"):
        multi_head_attention(Xn, 2)
    with pytest.raises(NonFiniteError, match="`X` must be finite"):
        qk_attention(Xn, torch.ones(1, 2), 2, 2)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="`d_head` must be a positive integer"):
            multi_head_attention(X, bad)
        with pytest.raises(ValueError, match="`d_head` must be a positive integer"):
            MultiHeadAttention(2, 2, bad)
    with pytest.raises(ValueError, match="`d_key` must be a positive integer"):
        qk_attention(X, torch.ones(1, 2), 0, 2)
    with pytest.raises(ValueError, match="`n_heads` must be a positive integer"):
        qk_attention(X, torch.ones(1, 2), 1, 0)
    with pytest.raises(ValueError, match=r"`readout` must be one of 'mean', 'last'; found 'max'"):
        multi_head_attention(X, 2, readout="max")
    with pytest.raises(ValueError, match="`readout` must be one of"):
        MultiHeadAttention(2, 2, 1, readout="first")
    with pytest.raises(ShapeError, match=r"`V` must have shape \(C, 2\)"):
        qk_attention(X, torch.ones(2, 3), 1, 2)
    with pytest.raises(ShapeError, match=r"`V` must have shape \(C, 2\)"):
        QKAttention(2, 2, 1, torch.ones(2, 3))
    with pytest.raises(ShapeError, match=r"`x` must have shape \(B, T, 3\)"):
        MultiHeadAttention(3, 2, 1)(torch.randn(4, 3, dtype=DT))
    with pytest.raises(ShapeError, match=r"`x` must have shape \(B, T, 2\)"):
        QKAttention(2, 2, 1, torch.ones(1, 2))(torch.randn(4, 3, 3, dtype=DT))
