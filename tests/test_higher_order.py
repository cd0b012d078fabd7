"""The next orders of the normal form (cubic T₃ and quartic T₄ terms) against independent truth.

* analytic MLP terms against the torch.func terms of the real module (two independent computations),
  and their gradients against torch.autograd of the value;
* the real module's remainder after the quartic order, ``f(sW) − f(0) − s²Q − s³T₃ − s⁴T₄``, must
  vanish faster than ``s⁴`` (halving ``s`` divides it by more than 2^4.5); with the higher-order
  terms' sign flipped (a planted error) it is ``O(s³)`` or ``O(s⁴)`` and the check fails;
* every built-in additive family (MLP, conv channels, attention heads, factorisation) passes the same
  remainder check with the torch.func terms; a softmax-gated mixture of experts is refused.
"""

from __future__ import annotations

import math

import pytest
import torch

from nqf.errors import NormalFormError
from nqf.modules import from_module, higher_order_terms
from nqf.networks import ConvNet1d, Factorization, MixtureOfExperts, MultiHeadAttention, TwoLayerMLP
from nqf.structure import mlp_higher_order

DT = torch.float64
ORDER_GATE = 2**4.5  # remainder after T₄ is O(s⁵) or smaller: halving s divides it by ≥ 32 (16 if O(s⁴))


def _mlp_case(act, bias, C, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(24, 4, generator=g, dtype=DT)
    net = TwoLayerMLP(4, 5, C, act, bias=bias)
    W = 0.6 * torch.randn(C + 4 + int(bias), 5, generator=g, dtype=DT)
    return net, X, W


@pytest.mark.parametrize("act", ["tanh", "sin", "gelu", "silu"])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("C", [1, 3])
def test_analytic_mlp_terms_equal_the_module_terms(act, bias, C):
    net, X, W = _mlp_case(act, bias, C)
    ana, mod = mlp_higher_order(X, act, bias=bias, n_outputs=C), higher_order_terms(net, X)
    scale = 1.0 + float(ana.cubic(W).abs().max() + ana.quartic(W).abs().max())
    torch.testing.assert_close(ana.cubic(W), mod.cubic(W), rtol=0, atol=1e-11 * scale)
    torch.testing.assert_close(ana.quartic(W), mod.quartic(W), rtol=0, atol=1e-11 * scale)
    R = torch.randn(X.shape[0], C, generator=torch.Generator().manual_seed(1), dtype=DT)
    g = ana.gradient(W, R)
    torch.testing.assert_close(g, mod.gradient(W, R), rtol=0, atol=1e-10 * (1 + float(g.abs().max())))
    Wg = W.clone().requires_grad_(True)
    (auto,) = torch.autograd.grad((R * ana.value(Wg)).sum(), Wg)
    torch.testing.assert_close(g, auto, rtol=0, atol=1e-11 * (1 + float(g.abs().max())))


def _remainder_ratio(net, units, X, W, terms, sign=1.0, s=0.05):
    """``|r(s)| / |r(s/2)|`` of the remainder after the quartic order (max over samples and outputs)."""
    op = from_module(net, units, X, matrix_free=False)
    scatter_out = higher_order_terms(net, X, units=units)
    f0 = scatter_out.f0

    def r(h):
        with torch.no_grad():
            f = scatter_out.module_output(h * W)
        quad = op.forward_factor(W).reshape(f.shape)
        return f - f0 - h**2 * quad - sign * (h**3 * terms.cubic(W) + h**4 * terms.quartic(W))

    return float(r(s).abs().max() / r(s / 2).abs().max())


@pytest.mark.parametrize("act", ["tanh", "gelu"])
def test_mlp_remainder_is_beyond_quartic_and_flipped_terms_fail(act):
    net, X, W = _mlp_case(act, False, 3)
    terms = mlp_higher_order(X, act, n_outputs=3)
    assert _remainder_ratio(net, net.units, X, W, terms) > ORDER_GATE
    assert _remainder_ratio(net, net.units, X, W, terms, sign=-1.0) < ORDER_GATE  # planted


def _conv():
    g = torch.Generator().manual_seed(3)
    net = ConvNet1d(2, 3, 3, activation="tanh", n_outputs=2, input_length=6)
    return net, torch.randn(8, 2, 6, generator=g, dtype=DT)


def _attention():
    g = torch.Generator().manual_seed(4)
    net = MultiHeadAttention(4, 2, 2, n_outputs=2)
    return net, torch.randn(6, 3, 4, generator=g, dtype=DT)


@pytest.mark.parametrize("family", ["conv", "attention"])
def test_module_terms_pass_the_remainder_check_for_each_family(family):
    net, X = _conv() if family == "conv" else _attention()
    terms = higher_order_terms(net, X)
    W = 0.8 * torch.randn(terms.p, terms.n_units, generator=torch.Generator().manual_seed(5), dtype=DT)
    assert float(terms.value(W).abs().max()) > 1e-6  # the family has higher-order terms to test
    assert _remainder_ratio(net, net.units, X, W, terms) > ORDER_GATE
    assert _remainder_ratio(net, net.units, X, W, terms, sign=-1.0) < ORDER_GATE


def test_factorization_has_no_higher_orders():
    g = torch.Generator().manual_seed(6)
    net = Factorization(3, 4, 3)
    X = torch.randn(5, 3, 4, generator=g, dtype=DT)
    terms = higher_order_terms(net, X)
    W = torch.randn(terms.p, 3, generator=g, dtype=DT)
    assert float(terms.value(W).abs().max()) < 1e-12 * math.sqrt(terms.p)


def test_gated_mixture_of_experts_is_refused():
    net = MixtureOfExperts(3, 3, 2, "tanh")
    X = torch.randn(6, 3, generator=torch.Generator().manual_seed(7), dtype=DT)
    with pytest.raises(NormalFormError, match="additive"):
        higher_order_terms(net, X)
