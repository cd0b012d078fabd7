"""Convolution with channels as units: analytic A vs autodiff of real nn.Conv1d/nn.Conv2d modules.

Truncation orders (derived in nqf.structure._conv): a channel contributes
``a · σ(u·patch)``, whose Taylor terms beyond the quadratic one are
``a · σ^{(j)}(0) (u·patch)^j / j!`` of total degree ``j + 1`` in the unit.
So the remainder ``f(sW) − f(0) − s bᵀμ − s² Tr[M A]`` scales as

* ``s³`` when ``σ''(0) ≠ 0`` (gelu, centred softplus),
* ``s⁴`` when ``σ''(0) = 0`` and ``σ'''(0) ≠ 0`` (tanh, sin, erf, sigmoid).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from nqf.errors import NonFiniteError, NormalFormError, ShapeError
from nqf.modules._autodiff import from_module
from nqf.modules._conv_layouts import conv_units
from nqf.networks._conv import ConvNet1d, ConvNet2d
from nqf.structure._bilinear import BilinearStructure, OneHotKronKernel
from nqf.structure._conv import conv1d, conv2d, conv_output_size

DT = torch.float64


def _assert_matches(op, ref, tol=1e-10):
    """Analytic ``op`` equals autodiff ``ref``: A, offset f(0) = 0, linear term b, no cross term."""
    A, Ar = op.dense(), ref.dense()
    assert A.shape == Ar.shape
    scale = max(1.0, float(Ar.abs().max()))
    assert float((A - Ar).abs().max()) <= tol * scale
    assert float(ref.offset.abs().max()) <= tol and float(op.offset.abs().max()) == 0.0
    assert op.cross is None and ref.cross is None  # additive over channels: B = 0
    assert (op.linear is None) == (ref.linear is None)
    if op.linear is not None:
        assert float((op.linear - ref.linear).abs().max()) <= tol


def _check_adjoint_and_dense(op, gen):
    p, N, C = op.p, op.n_samples, op.n_outputs
    D = op.dense()
    assert D.shape == ((N, p, p) if C == 1 else (N, C, p, p))
    for _ in range(3):
        M = torch.randn(p, p, generator=gen, dtype=DT)
        M = M + M.T
        R = torch.randn(N, C, generator=gen, dtype=DT)
        if C == 1:
            R = R[:, 0]
        y, G = op(M), op.adjoint(R)
        lhs, rhs = float((y * R).sum()), float((M * G).sum())
        scale = float((y.abs() * R.abs()).sum()) + float((M.abs() * G.abs()).sum())
        assert abs(lhs - rhs) <= 1e-12 * scale
        y_dense = torch.einsum("...ij,ij->...", D, M)
        assert float((y_dense - y).abs().max()) <= 1e-12 * max(1.0, float(y.abs().max()))
        G_dense = torch.einsum("n...,n...ij->ij", R, D)
        assert float((G_dense - G).abs().max()) <= 1e-12 * max(1.0, float(G.abs().max()))


# ------------------------------------------------------------------ 1-D against autodiff
# (N, in_channels, L, kernel, stride, padding, activation, readout, C)
_EDGE_1D = [
    (3, 1, 6, 3, 1, 0, "tanh", "mean", 1),  # one input channel
    (4, 2, 5, 5, 1, 0, "tanh", "position", 2),  # kernel covers the input: Q = 1
    (3, 2, 4, 6, 1, 1, "sin", "position", 1),  # kernel covers the padded input: Q = 1
    (5, 3, 9, 2, 3, 0, "gelu", "position", 3),  # stride > 1
    (4, 2, 7, 3, 2, 2, "softplus-centred", "mean", 2),  # padding > 0
    (3, 2, 8, 3, 1, 1, "sigmoid", "position", 2),  # σ(0) ≠ 0: linear term
    (3, 1, 6, 4, 2, 1, "sigmoid", "mean", 1),
    (1, 1, 1, 1, 1, 0, "erf", "position", 1),  # everything size one
    (3, 2, 6, 3, 1, 0, torch.sin, "mean", 2),  # a callable activation (derivatives by autodiff)
]


def _random_1d_cases(n=4, seed=21):
    rng = np.random.default_rng(seed)
    acts = ["tanh", "gelu", "erf", "sigmoid", "softplus-centred"]
    out = []
    for _ in range(n):
        cin, k, s, pad = (
            int(v) for v in (rng.integers(1, 4), rng.integers(1, 5), rng.integers(1, 4), rng.integers(0, 3))
        )
        L = int(rng.integers(max(1, k - 2 * pad), 10))
        out.append(
            (
                int(rng.integers(1, 5)),
                cin,
                L,
                k,
                s,
                pad,
                acts[int(rng.integers(len(acts)))],
                ["mean", "position"][int(rng.integers(2))],
                int(rng.integers(1, 4)),
            )
        )
    return out


@pytest.mark.parametrize("N,cin,L,k,s,pad,act,readout,C", _EDGE_1D + _random_1d_cases())
def test_conv1d_matches_autodiff(N, cin, L, k, s, pad, act, readout, C):
    gen = torch.Generator().manual_seed(N + 3 * cin + 7 * L + 11 * k)
    X = torch.randn(N, cin, L, generator=gen, dtype=DT)
    torch.manual_seed(k + s)
    net = ConvNet1d(cin, 3, k, s, pad, act, readout, C, input_length=L)
    op = conv1d(X, k, s, pad, act, readout, C)
    Q = conv_output_size(L, k, s, pad)
    assert isinstance(op, BilinearStructure) and isinstance(op.kernel, OneHotKronKernel)
    assert op.kernel.F.shape == (N, Q if readout == "position" else 1, cin * k)  # low rank, not N × p × p
    assert op.p == (C * Q if readout == "position" else C) + cin * k
    assert op.kernel.F.is_contiguous()  # the kernel's (N, q·k) view of F is then free, no second copy
    _assert_matches(op, from_module(net, net.units, X))
    _check_adjoint_and_dense(op, gen)


# ------------------------------------------------------------------ 2-D against autodiff
# (N, in_channels, H, W, kernel, stride, padding, activation, readout, C)
_CASES_2D = [
    (3, 1, 4, 6, 2, 1, 0, "tanh", "mean", 1),  # one channel, non-square image
    (2, 2, 5, 4, (2, 3), (2, 1), (1, 0), "tanh", "position", 2),  # non-square everything, Q = 3 × 2
    (3, 2, 3, 4, (3, 4), 1, 0, "gelu", "position", 1),  # kernel covers the image: Q = 1
    (2, 3, 6, 5, 3, 2, 1, "sigmoid", "position", 2),  # linear term, stride and padding
    (2, 2, 4, 7, (1, 3), (1, 2), (0, 1), "sigmoid", "mean", 3),
    (3, 2, 5, 5, 2, 1, 1, "softplus-centred", "mean", 2),
    (1, 1, 1, 1, 1, 1, 0, "erf", "position", 1),  # size one everywhere
]


@pytest.mark.parametrize("N,cin,H,W,k,s,pad,act,readout,C", _CASES_2D)
def test_conv2d_matches_autodiff(N, cin, H, W, k, s, pad, act, readout, C):
    gen = torch.Generator().manual_seed(N + 3 * cin + 7 * H + 13 * W)
    X = torch.randn(N, cin, H, W, generator=gen, dtype=DT)
    torch.manual_seed(H * W)
    net = ConvNet2d(cin, 3, k, s, pad, act, readout, C, input_size=(H, W))
    op = conv2d(X, k, s, pad, act, readout, C)
    assert op.kernel.F.is_contiguous()
    _assert_matches(op, from_module(net, net.units, X))
    _check_adjoint_and_dense(op, gen)


# ------------------------------------------------------------------ user models through conv_units
def test_conv_units_flatten_linear_1d_matches_position_readout():
    N, cin, L, k, m, C = 4, 2, 8, 3, 3, 2
    Q = conv_output_size(L, k, 2, 1)
    X = torch.randn(N, cin, L, generator=torch.Generator().manual_seed(0), dtype=DT)
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv1d(cin, m, k, stride=2, padding=1, bias=False, dtype=DT),
        nn.Tanh(),
        nn.Flatten(),
        nn.Linear(m * Q, C, bias=False, dtype=DT),
    )
    units = conv_units(model, "0", "3")
    assert units.n_units == m
    _assert_matches(conv1d(X, k, 2, 1, "tanh", "position", C), from_module(model, units, X))


def test_conv_units_flatten_linear_2d_matches_row_major_positions():
    N, cin, H, W, m, C = 3, 2, 5, 4, 3, 2
    Q = conv_output_size(H, 2, 1, 0) * conv_output_size(W, 3, 1, 0)
    X = torch.randn(N, cin, H, W, generator=torch.Generator().manual_seed(1), dtype=DT)
    torch.manual_seed(1)
    model = nn.Sequential(
        nn.Conv2d(cin, m, (2, 3), bias=False, dtype=DT),
        nn.Tanh(),
        nn.Flatten(),
        nn.Linear(m * Q, C, bias=False, dtype=DT),
    )
    ref = from_module(model, conv_units(model, "0", "3"), X)
    _assert_matches(conv2d(X, (2, 3), readout="position", n_outputs=C), ref)


def test_conv_units_avgpool_2d_matches_mean_readout():
    N, cin, H, W, m, C = 3, 3, 6, 5, 4, 2
    X = torch.randn(N, cin, H, W, generator=torch.Generator().manual_seed(2), dtype=DT)
    torch.manual_seed(2)
    model = nn.Sequential(
        nn.Conv2d(cin, m, 3, stride=2, padding=1, bias=False, dtype=DT),
        nn.GELU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(m, C, bias=True, dtype=DT),
    )
    ref = from_module(model, conv_units(model, "0", "4"), X)
    op = conv2d(X, 3, 2, 1, "gelu", "mean", C)
    # the readout bias is held fixed: it is f(0), the rest must match
    A = ref.dense()
    assert float((A - op.dense()).abs().max()) <= 1e-10
    assert torch.allclose(ref.offset, model[4].bias.detach().expand(N, C), rtol=0, atol=1e-14)


def test_conv_units_with_conv_bias_and_own_network():
    """A conv bias joins the unit: its block pairs with every readout entry of its channel at σ'(0)/2."""
    N, cin, L, k, m, C = 3, 2, 7, 3, 3, 2
    Q = conv_output_size(L, k, 1, 0)
    X = torch.randn(N, cin, L, generator=torch.Generator().manual_seed(3), dtype=DT)
    torch.manual_seed(3)
    model = nn.Sequential(
        nn.Conv1d(cin, m, k, bias=True, dtype=DT), nn.Tanh(), nn.Flatten(), nn.Linear(m * Q, C, bias=False, dtype=DT)
    )
    A = from_module(model, conv_units(model, "0", "3"), X).dense()  # p = C·Q + cin·k + 1
    op = conv1d(X, k, readout="position", n_outputs=C)
    assert float((A[..., :-1, :-1] - op.dense()).abs().max()) <= 1e-10
    for c in range(C):
        expect = torch.zeros(C * Q + cin * k, dtype=DT)
        expect[c * Q : (c + 1) * Q] = 0.5  # σ'(0)/2 for tanh
        assert torch.allclose(A[:, c, :-1, -1], expect.expand(N, -1), rtol=0, atol=1e-12)
    # the built-in network's own layout is the one conv_units produces
    net = ConvNet1d(cin, m, k, readout="position", n_outputs=C, input_length=L)
    assert conv_units(net, "conv", "readout").slices == net.units.slices


def test_conv_units_errors():
    model = nn.Sequential(nn.Conv1d(2, 3, 3, bias=False, dtype=DT), nn.Tanh(), nn.Flatten(), nn.Linear(10, 1, dtype=DT))
    with pytest.raises(ShapeError, match=r"not a multiple of the\s+3 channels"):
        conv_units(model, "0", "3")
    with pytest.raises(KeyError, match=r"`conv` names submodule 'conv'"):
        conv_units(model, "conv", "3")
    with pytest.raises(KeyError, match=r"`readout` names 'head'"):
        conv_units(model, "0", "head")
    with pytest.raises(TypeError, match=r"`conv` must name an nn.Conv1d or nn.Conv2d"):
        conv_units(model, "3", "3")
    grouped = nn.Sequential(nn.Conv1d(2, 4, 3, groups=2, bias=False), nn.Flatten(), nn.Linear(4, 1))
    with pytest.raises(NormalFormError, match=r"groups = 2"):
        conv_units(grouped, "0", "2")
    with pytest.raises(ShapeError, match=r"`channel_axis` 5 is out of range"):
        conv_units(model, "0", "3", channel_axis=5)


# ------------------------------------------------------------------ truncation order
_SCALES = np.geomspace(1e-1, 1e-3, 5)


def _truncation_slope(net, op, X):
    """Log–log slope of ‖f(sW) − f(0) − s bᵀμ − s² Tr[M A]‖ against s (net restored afterwards)."""
    lay = net.units
    W0 = lay.get_W(net)
    errs = []
    try:
        for s in _SCALES:
            Ws = float(s) * W0
            lay.set_W(net, Ws)
            with torch.no_grad():
                f = net(X)
            nf = op.predict(Ws @ Ws.T, Ws.sum(1))
            errs.append(float((f - nf.reshape(f.shape)).norm()))
    finally:
        lay.set_W(net, W0)
    assert min(errs) > 0
    return float(np.polyfit(np.log(_SCALES), np.log(errs), 1)[0])


@pytest.mark.parametrize("act,order", [("tanh", 4), ("sin", 4), ("sigmoid", 4), ("gelu", 3), ("softplus-centred", 3)])
@pytest.mark.parametrize("readout", ["mean", "position"])
def test_truncation_order_1d(act, order, readout):
    X = torch.randn(5, 2, 9, generator=torch.Generator().manual_seed(4), dtype=DT)
    torch.manual_seed(4)
    net = ConvNet1d(2, 4, 3, 2, 1, act, readout, 2, input_length=9)
    slope = _truncation_slope(net, conv1d(X, 3, 2, 1, act, readout, 2), X)
    assert abs(slope - order) <= 0.3, slope


@pytest.mark.parametrize("act,order", [("tanh", 4), ("gelu", 3)])
@pytest.mark.parametrize("readout", ["mean", "position"])
def test_truncation_order_2d(act, order, readout):
    X = torch.randn(4, 2, 5, 7, generator=torch.Generator().manual_seed(5), dtype=DT)
    torch.manual_seed(5)
    net = ConvNet2d(2, 4, (2, 3), (2, 1), 1, act, readout, 1, input_size=(5, 7))
    slope = _truncation_slope(net, conv2d(X, (2, 3), (2, 1), 1, act, readout, 1), X)
    assert abs(slope - order) <= 0.3, slope


def test_wrong_structure_scale_is_caught_by_truncation():
    """Control: an A off by a factor leaves an s² remainder, so the slope test can fail."""
    X = torch.randn(5, 2, 9, generator=torch.Generator().manual_seed(6), dtype=DT)
    torch.manual_seed(6)
    net = ConvNet1d(2, 4, 3, 1, 0, "tanh", "position", 1, input_length=9)
    op = conv1d(X, 3, 1, 0, "tanh", "position", 1)
    op.kernel = OneHotKronKernel(op.kernel.F, 1, scale=1.1)
    assert abs(_truncation_slope(net, op, X) - 2.0) <= 0.3


# ------------------------------------------------------------------ operator plumbing
def test_take_and_to():
    X = torch.randn(6, 2, 5, 4, generator=torch.Generator().manual_seed(7), dtype=DT)
    op = conv2d(X, 2, activation="sigmoid", readout="position", n_outputs=2)
    sub = op.take([5, 0, 2])
    assert torch.equal(sub.dense(), op.dense()[[5, 0, 2]])
    assert torch.equal(sub.linear, op.linear[[5, 0, 2]])
    op32 = op.to(torch.float32)
    assert op32.dense().dtype == torch.float32 and op32.linear.dtype == torch.float32
    direct32 = conv2d(X.float(), 2, activation="sigmoid", readout="position", n_outputs=2)
    assert direct32.dtype == torch.float32
    assert float((direct32.dense().double() - op.dense()).abs().max()) <= 1e-6  # float32 round-off


def test_linear_term_closed_form():
    """σ(0)·(readout entries of output c): per position Q entries, mean one entry."""
    X = torch.randn(2, 1, 6, generator=torch.Generator().manual_seed(8), dtype=DT)
    op = conv1d(X, 2, stride=2, activation="sigmoid", readout="position", n_outputs=2)  # Q = 3
    b = op.linear[0]
    assert torch.equal(b[0, :3], torch.full((3,), 0.5, dtype=DT)) and float(b[0, 3:].abs().sum()) == 0
    assert torch.equal(b[1, 3:6], torch.full((3,), 0.5, dtype=DT)) and float(b[1, :3].abs().sum()) == 0
    assert float(b[1, 6:].abs().sum()) == 0
    op = conv1d(X, 2, activation="sigmoid", readout="mean", n_outputs=2)
    assert torch.equal(op.linear[1], torch.tensor([[0.5, 0, 0, 0], [0, 0.5, 0, 0]], dtype=DT))
    assert conv1d(X, 2, activation="tanh").linear is None


# ------------------------------------------------------------------ bad input
def test_bad_shapes():
    with pytest.raises(ShapeError, match=r"`X` must have 3 dimensions; found shape \(4, 9\)"):
        conv1d(torch.zeros(4, 9, dtype=DT), 3)
    with pytest.raises(ShapeError, match=r"`X` must have 4 dimensions"):
        conv2d(torch.zeros(4, 2, 9, dtype=DT), 3)
    with pytest.raises(ShapeError, match=r"`kernel_size` 6 along the length is larger than the padded input"):
        conv1d(torch.zeros(2, 1, 3, dtype=DT), 6, padding=1)
    with pytest.raises(ShapeError, match=r"`kernel_size` 5 along the width is larger than the padded input"):
        conv2d(torch.zeros(2, 1, 6, 3, dtype=DT), (2, 5))
    with pytest.raises(ShapeError, match=r"every size ≥ 1"):
        conv1d(torch.zeros(0, 1, 5, dtype=DT), 2)
    with pytest.raises(ValueError, match=r"`kernel_size` must be an int, each ≥ 1; found \(2, 2\)"):
        conv1d(torch.zeros(2, 1, 5, dtype=DT), (2, 2))
    with pytest.raises(ValueError, match=r"`stride` must be an int or a pair of ints, each ≥ 1"):
        conv2d(torch.zeros(2, 1, 5, 5, dtype=DT), 2, stride=0)
    with pytest.raises(ValueError, match=r"`padding` must be an int, each ≥ 0"):
        conv1d(torch.zeros(2, 1, 5, dtype=DT), 2, padding=-1)
    with pytest.raises(ValueError, match=r"`n_outputs` must be a positive integer"):
        conv1d(torch.zeros(2, 1, 5, dtype=DT), 2, n_outputs=0)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite(bad):
    X = torch.randn(2, 1, 5, 5, dtype=DT)
    X[0, 0, 2, 3] = bad
    with pytest.raises(NonFiniteError, match=r"`X` must be finite; found 1 NaN/inf"):
        conv2d(X, 2)
    with pytest.raises(NonFiniteError, match=r"`X` must be finite"):
        conv1d(X[:, :, 2], 2)


def test_unknown_readout_and_relu():
    X = torch.randn(2, 1, 5, dtype=DT)
    with pytest.raises(ValueError, match=r"`readout` must be one of 'mean', 'position'; found 'max'"):
        conv1d(X, 2, readout="max")
    with pytest.raises(ValueError, match=r"`readout` must be one of"):
        ConvNet2d(1, 2, 2, readout="sum")
    with pytest.raises(NormalFormError, match=r"not three times differentiable"):
        conv1d(X, 2, activation="relu")
    with pytest.raises(NormalFormError, match=r"not three times differentiable"):
        conv2d(X[:, :, None], (1, 2), activation="relu")
    with pytest.raises(NormalFormError, match=r"not three times differentiable"):
        ConvNet1d(1, 2, 2, activation="relu")
    with pytest.raises(ValueError, match=r"`input_length` is required"):
        ConvNet1d(1, 2, 2, readout="position")
    with pytest.raises(ValueError, match=r"`input_size` \(H, W\) is required"):
        ConvNet2d(1, 2, 2, readout="position")


@pytest.mark.parametrize("dim", [1, 2])
@pytest.mark.parametrize("readout", ["position", "mean"])
@pytest.mark.parametrize("act", ["tanh", "sigmoid", "gelu"])
def test_conv_bias_matches_autodiff(dim, readout, act):
    """``conv1d/conv2d(..., bias=True)`` equal the autodiff operator of the module with ``bias=True`` (the bias
    is the unit's last entry, a constant input 1 of every patch); without it the analytic operator has the
    wrong ``p`` and, cut to the same ``p``, misses the bias block (the comparison can fail)."""
    N, cin, m, C, k = 3, 2, 3, 2, 3
    gen = torch.Generator().manual_seed(5)
    torch.manual_seed(5)
    size = (7,) if dim == 1 else (5, 4)
    X = torch.randn(N, cin, *size, generator=gen, dtype=DT)
    Conv = nn.Conv1d if dim == 1 else nn.Conv2d
    Act = {"tanh": nn.Tanh, "sigmoid": nn.Sigmoid, "gelu": nn.GELU}[act]
    Q = 1
    for s in size:
        Q *= conv_output_size(s, k, 1, 1)
    tail = [nn.Flatten(), nn.Linear(m * Q, C, bias=False, dtype=DT)]
    if readout == "mean":
        tail = [
            (nn.AdaptiveAvgPool1d if dim == 1 else nn.AdaptiveAvgPool2d)(1),
            nn.Flatten(),
            nn.Linear(m, C, bias=False, dtype=DT),
        ]
    model = nn.Sequential(Conv(cin, m, k, padding=1, bias=True, dtype=DT), Act(), *tail)
    ref = from_module(model, conv_units(model, "0", str(len(model) - 1)), X)
    build = conv1d if dim == 1 else conv2d
    op = build(X, k, 1, 1, act, readout, C, bias=True)
    _assert_matches(op, ref)
    plain = build(X, k, 1, 1, act, readout, C)
    assert plain.p == op.p - 1
    assert float((plain.dense() - ref.dense()[..., :-1, :-1]).abs().max()) <= 1e-10  # the rest is unchanged
    assert float(ref.dense()[..., :-1, -1].abs().max()) > 1e-3  # and the bias block is not zero
