"""The next orders of the normal form (cubic and quartic terms), analytic and by torch.func."""

from __future__ import annotations

import copy
import math
import pickle

import pytest
import torch

from nqf.errors import NormalFormError
from nqf.modules import from_module, higher_order_terms
from nqf.networks import (
    ConvNet1d,
    ConvNet2d,
    Factorization,
    MatrixSensing,
    MixtureOfExperts,
    MultiHeadAttention,
    QKAttention,
    TwoLayerMLP,
)
from nqf.structure import HigherOrderTerms, mlp, mlp_higher_order

DT = torch.float64
SCALES = (0.1, 0.05, 0.025, 0.0125)
#: The residual f(sW) − (f(0) + s²Q + s³T₃ + s⁴T₄) must shrink at least like s^{4.5} when s halves
#: (it is O(s⁵); an error in the quartic leaves O(s⁴), ratio 16, log₂ = 4).
MIN_ORDER = 4.5


def _module_at(module, W):
    m = copy.deepcopy(module)
    m.units.set_W(m, W)
    return m


def _outputs(module, X, output=None):
    with torch.no_grad():
        out = module(X)
    out = out if output is None else output(out)
    return out.reshape(X.shape[0], -1)


def _observed_orders(module, X, W, quad, terms: HigherOrderTerms, flip_quartic=False):
    """log₂ of the residual's shrink factor when s halves, for consecutive scales."""
    f0 = _outputs(_module_at(module, torch.zeros_like(W)), X)
    c3, c4 = terms.cubic(W), terms.quartic(W)
    if flip_quartic:
        c4 = -c4
    res = []
    for s in SCALES:
        fs = _outputs(_module_at(module, s * W), X)
        r = fs - f0 - s**2 * quad - s**3 * c3 - s**4 * c4
        res.append(float(r.abs().max()))
    return [math.log2(a / b) for a, b in zip(res, res[1:], strict=False)], res


def _mlp_case(act, bias, C, seed=0, N=12, D=4, m=3):
    torch.manual_seed(seed)
    X = torch.randn(N, D, dtype=DT)
    net = TwoLayerMLP(D, m, C, activation=act, bias=bias, dtype=DT)
    W = torch.randn(net.units.get_W(net).shape, dtype=DT)
    return X, net, W


MLP_CASES = [
    (act, bias, C)
    for act in ("tanh", "sin", "gelu", "silu", "softplus-centred")
    for bias in (False, True)
    for C in (1, 3)
]


@pytest.mark.parametrize("act,bias,C", MLP_CASES)
def test_mlp_higher_order_against_the_real_module(act, bias, C):
    X, net, W = _mlp_case(act, bias, C)
    terms = mlp_higher_order(X, act, bias=bias, n_outputs=C)
    assert (terms.p, terms.N, terms.C) == (W.shape[0], X.shape[0], C)
    quad = mlp(X, act, bias=bias, n_outputs=C).forward_factor(W).reshape(X.shape[0], C)
    orders, res = _observed_orders(net, X, W, quad, terms)
    assert min(orders) > MIN_ORDER, (orders, res)


@pytest.mark.parametrize("act", ["tanh", "sin"])
def test_mlp_flipped_quartic_is_caught(act):
    """Planted error: the quartic's sign flipped leaves an O(s⁴) residual, which the order check sees."""
    X, net, W = _mlp_case(act, False, 2)
    terms = mlp_higher_order(X, act, n_outputs=2)
    quad = mlp(X, act, n_outputs=2).forward_factor(W)
    orders, _ = _observed_orders(net, X, W, quad, terms, flip_quartic=True)
    assert max(orders) < MIN_ORDER


def test_mlp_odd_activation_has_no_cubic():
    X, _, W = _mlp_case("tanh", True, 3)
    assert float(mlp_higher_order(X, "tanh", bias=True, n_outputs=3).cubic(W).abs().max()) == 0.0


@pytest.mark.parametrize("act,bias,C", [("gelu", True, 3), ("tanh", False, 1), ("silu", False, 2)])
def test_mlp_gradient_against_autograd(act, bias, C):
    X, _, W = _mlp_case(act, bias, C)
    terms = mlp_higher_order(X, act, bias=bias, n_outputs=C)
    R = torch.randn(X.shape[0], C, dtype=DT)
    for value, gradient in (
        (terms.cubic, terms.cubic_gradient),
        (terms.quartic, terms.quartic_gradient),
        (terms.value, terms.gradient),
    ):
        Wr = W.clone().requires_grad_(True)
        (g,) = torch.autograd.grad((value(Wr) * R).sum(), Wr)
        torch.testing.assert_close(gradient(W, R), g, rtol=1e-12, atol=1e-12)


def test_mlp_take_is_a_sample_subset():
    X, _, W = _mlp_case("gelu", True, 2)
    terms = mlp_higher_order(X, "gelu", bias=True, n_outputs=2)
    idx = torch.tensor([1, 5, 7])
    sub = terms.take(idx)
    assert sub.N == 3
    torch.testing.assert_close(sub.value(W), terms.value(W)[idx])
    with pytest.raises(AttributeError):
        terms.p = 3  # type: ignore[misc]
    again = pickle.loads(pickle.dumps(terms))
    assert (again.p, again.N, again.C) == (terms.p, terms.N, terms.C)
    torch.testing.assert_close(again.value(W), terms.value(W))


# --------------------------------------------------------------------------- any module, by torch.func
def _family(name):
    torch.manual_seed(1)
    if name == "mlp-gelu-bias":
        return TwoLayerMLP(4, 3, 2, activation="gelu", bias=True, dtype=DT), torch.randn(10, 4, dtype=DT)
    if name == "mlp-tanh":
        return TwoLayerMLP(4, 3, 1, activation="tanh", dtype=DT), torch.randn(10, 4, dtype=DT)
    if name == "conv1d":
        return ConvNet1d(2, 3, 3, activation="silu", n_outputs=2, input_length=7, dtype=DT), torch.randn(
            8, 2, 7, dtype=DT
        )
    if name == "conv2d":
        return ConvNet2d(1, 2, 2, activation="tanh", input_size=(4, 4), dtype=DT), torch.randn(6, 1, 4, 4, dtype=DT)
    if name == "attention":
        return MultiHeadAttention(4, 2, 2, n_outputs=2, dtype=DT), torch.randn(6, 3, 4, dtype=DT)
    if name == "qk-attention":
        return QKAttention(4, 3, 2, torch.randn(2, 4, dtype=DT), dtype=DT), torch.randn(6, 3, 4, dtype=DT)
    if name == "factorization":
        return Factorization(3, 4, 3, dtype=DT), torch.randn(6, 3, 4, dtype=DT)
    return MatrixSensing(3, 3, dtype=DT), torch.randn(6, 3, 3, dtype=DT)


FAMILIES = ["mlp-gelu-bias", "mlp-tanh", "conv1d", "conv2d", "attention", "qk-attention", "factorization", "sensing"]


@pytest.mark.parametrize("name", FAMILIES)
def test_module_higher_order_against_the_real_module(name):
    net, X = _family(name)
    terms = higher_order_terms(net, X)
    shape = net.units.get_W(net).shape
    W = torch.randn(shape, dtype=DT, generator=torch.Generator().manual_seed(2))  # every unit of the module
    assert (terms.N, terms.p) == (X.shape[0], shape[0])
    quad = from_module(net, net.units, X, check=False).forward_factor(W).reshape(X.shape[0], -1)
    orders, res = _observed_orders(net, X, W, quad, terms)
    # exactly quadratic modules (factorization, sensing) leave round-off only
    assert min(orders) > MIN_ORDER or max(res) < 1e-12, (orders, res)
    if name == "mlp-tanh":  # and the planted error is seen
        assert max(_observed_orders(net, X, W, quad, terms, flip_quartic=True)[0]) < MIN_ORDER


@pytest.mark.parametrize("name", ["mlp-gelu-bias", "conv1d", "attention", "qk-attention"])
def test_module_gradient_against_autograd(name):
    net, X = _family(name)
    terms = higher_order_terms(net, X, chunk=4)
    W = torch.randn(terms.p, 2, dtype=DT, generator=torch.Generator().manual_seed(3))
    R = torch.randn(terms.N, terms.C, dtype=DT, generator=torch.Generator().manual_seed(4))
    for value, gradient in (
        (terms.cubic, terms.cubic_gradient),
        (terms.quartic, terms.quartic_gradient),
        (terms.value, terms.gradient),
    ):
        Wr = W.clone().requires_grad_(True)
        (g,) = torch.autograd.grad((value(Wr) * R).sum(), Wr)
        torch.testing.assert_close(gradient(W, R), g, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("act,bias,C", [("tanh", False, 1), ("gelu", True, 3), ("silu", True, 2), ("sin", False, 3)])
def test_module_matches_analytic_mlp(act, bias, C):
    X, net, W = _mlp_case(act, bias, C)
    analytic = mlp_higher_order(X, act, bias=bias, n_outputs=C)
    terms = higher_order_terms(net, X)
    R = torch.randn(X.shape[0], C, dtype=DT)
    torch.testing.assert_close(terms.cubic(W), analytic.cubic(W), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(terms.quartic(W), analytic.quartic(W), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(terms.gradient(W, R), analytic.gradient(W, R), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(terms.take([0, 3]).value(W), analytic.value(W)[[0, 3]], rtol=1e-10, atol=1e-12)


def test_non_additive_module_is_refused():
    torch.manual_seed(0)
    net = MixtureOfExperts(3, 4, 1, dtype=DT)
    with pytest.raises(NormalFormError, match="additive"):
        higher_order_terms(net, torch.randn(6, 3, dtype=DT))
