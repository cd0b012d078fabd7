"""The activation registry (issue 19, step 4): one record per activation, every other table derived from it.

Independent truths: torch autograd's derivatives at zero for the analytic ``σ(0) … σ'''(0)`` of each record;
the records' own modules for the module matching; the source text of the package for "one table only".
"""

from __future__ import annotations

import ast
import math
import pickle
from pathlib import Path

import pytest
import torch
from torch import nn

from nqf.errors import InvalidParameterError, NormalFormError
from nqf.modules import find_units
from nqf.modules._autodiff import NON_SMOOTH_MODULES, is_non_smooth_layer
from nqf.modules._discover import ELEMENTWISE_MODULES
from nqf.structure import _activations as A

SRC = Path(__file__).resolve().parents[1] / "src" / "nqf"
SMOOTH = [a for a in A.REGISTRY if a.smooth]
KINKS = [a for a in A.REGISTRY if not a.smooth]


def _autograd_derivatives(fn) -> list[float]:
    """``σ(0), σ'(0), σ''(0), σ'''(0)`` by repeated reverse-mode autograd in float64."""
    x = torch.zeros((), dtype=torch.float64, requires_grad=True)
    y = fn(x)
    out = [float(y.detach())]
    for _ in range(3):
        g = torch.autograd.grad(y, x, create_graph=True, allow_unused=True)[0] if y.requires_grad else None
        if g is None:  # the graph ends (a constant): every further derivative is zero
            out.extend([0.0] * (4 - len(out)))
            break
        y = g
        out.append(float(y.detach()))
    return out


@pytest.mark.parametrize("act", SMOOTH, ids=[a.name for a in SMOOTH])
def test_derivatives_at_zero_match_autograd(act):
    truth = _autograd_derivatives(act.fn)
    mine = [act.s0, act.s1, act.s2, act.s3]
    for order, (m, t) in enumerate(zip(mine, truth, strict=True)):
        assert m == pytest.approx(t, abs=1e-12), f"{act.name}: σ^({order})(0) = {m}, autograd {t}"


@pytest.mark.parametrize("act", SMOOTH, ids=[a.name for a in SMOOTH])
def test_callable_resolution_finds_the_same_derivatives(act):
    """``get_activation(callable)`` takes σ(0) … σ'''(0) by autodiff: the same numbers as the record."""
    got = A.get_activation(lambda x: act.fn(x))
    assert [got.s0, got.s1, got.s2, got.s3] == pytest.approx([act.s0, act.s1, act.s2, act.s3], abs=1e-12)


@pytest.mark.parametrize("act", A.REGISTRY, ids=[a.name for a in A.REGISTRY])
def test_factory_module_computes_the_function_and_maps_back(act):
    mod = act.module().to(torch.float64).eval()
    x = torch.linspace(-3, 3, 41, dtype=torch.float64)
    torch.testing.assert_close(mod(x), act.fn(x), rtol=1e-12, atol=1e-12)
    assert A.REGISTRY.of_module(mod) is act
    assert act.matches(mod)


def test_module_to_record_to_module():
    for mod, name in (
        (nn.Tanh(), "tanh"),
        (nn.GELU(), "gelu"),
        (nn.Sigmoid(), "sigmoid"),
        (nn.Identity(), "linear"),
        (nn.ReLU(), "relu"),
        (nn.LeakyReLU(0.1), "leaky_relu"),
        (A.ActivationModule("sin"), "sin"),
        (A.ActivationModule("softplus_centred"), "softplus-centred"),
    ):
        rec = A.REGISTRY.of_module(mod)
        assert rec is not None and rec.name == name
        assert type(rec.module()) is type(mod)
        assert A.REGISTRY.of_module(rec.module()) is rec
    assert A.REGISTRY.of_module(nn.GELU(approximate="tanh")) is None  # not the exact gelu of the record
    assert A.REGISTRY.of_module(nn.Linear(2, 2)) is None
    assert A.REGISTRY.of_module(nn.Softmax(dim=-1)) is None
    # no nn class for these: their module is the registry's own
    for name in ("sin", "erf", "softplus-centred", "abs"):
        assert not A.REGISTRY.find(name).modules and isinstance(A.REGISTRY.find(name).module(), A.ActivationModule)


def test_views_are_derived_from_the_registry():
    assert set(A.ACTIVATIONS) == {a.name for a in SMOOTH}
    assert {"tanh", "sin", "erf", "gelu", "softplus-centred", "sigmoid", "linear"} <= set(A.ACTIVATIONS)
    assert set(A.NON_SMOOTH_ACTIVATIONS) >= {"relu", "relu6", "leaky_relu", "elu", "selu", "celu", "hardtanh", "abs"}
    assert set(A.NON_SMOOTH_ACTIVATIONS) >= {"hardswish", "hardsigmoid"}
    assert set(A.REGISTRY.module_classes(smooth=False)) <= set(NON_SMOOTH_MODULES)
    assert not set(A.REGISTRY.module_classes(smooth=True)) & set(NON_SMOOTH_MODULES)
    assert set(A.REGISTRY.module_classes()) <= set(ELEMENTWISE_MODULES)
    for a in KINKS:
        assert all(math.isnan(v) for v in (a.s1, a.s2, a.s3)), a.name
        for cls in a.modules:
            assert issubclass(cls, NON_SMOOTH_MODULES)
    text = A.REGISTRY.smooth_alternatives_text()
    for word in ("tanh", "gelu", "erf", "sin", "centred softplus"):
        assert word in text
    assert "relu" not in text and "linear" not in text


def test_get_activation_by_name_keeps_its_errors():
    assert A.get_activation("Softplus_Centred") is A.ACTIVATIONS["softplus-centred"]
    assert A.get_activation(A.ACTIVATIONS["tanh"]) is A.ACTIVATIONS["tanh"]
    for name in ("relu", "LEAKY_RELU", "abs", "hardswish"):
        with pytest.raises(NormalFormError, match="needs a C³ activation"):
            A.get_activation(name)
    with pytest.raises(InvalidParameterError, match="`activation` must be one of"):
        A.get_activation("swishy")
    with pytest.raises(InvalidParameterError, match="`name` must be one of"):
        A.ActivationModule("swishy")


def test_records_pickle_and_repr():
    for a in A.REGISTRY:
        back = pickle.loads(pickle.dumps(a))
        assert back.name == a.name and back.smooth == a.smooth and back.modules == a.modules
    assert repr(A.ACTIVATIONS["tanh"]) == "Activation('tanh', s0=0, s1=1, s2=0, s3=-2)"
    assert "non-smooth" in repr(A.REGISTRY.find("relu"))


def test_registry_module_of_a_kink_is_refused_and_discovered_as_non_smooth():
    """``abs`` has no torch module: its registry module is recognised as non-smooth by the scans."""
    seq = nn.Sequential(nn.Linear(3, 4), A.ActivationModule("abs"), nn.Linear(4, 2)).double()
    assert is_non_smooth_layer(seq[1]) and not is_non_smooth_layer(A.ActivationModule("sin"))
    (cand,) = find_units(seq)
    assert not cand.smooth and "ActivationModule(abs)" in cand.description


def _names_in(node: ast.AST) -> set[str]:
    """Attribute names ``nn.X`` (and ``torch.nn.X``) used in a module's AST."""
    out = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and isinstance(sub.value, (ast.Name, ast.Attribute)):
            base = sub.value.id if isinstance(sub.value, ast.Name) else sub.value.attr
            if base == "nn":
                out.add(sub.attr)
    return out


def test_activation_classes_and_names_live_only_in_the_registry():
    """No other literal table of activations in src: nn activation classes appear in activations.py only, and
    no other module lists the registry's names as string literals."""
    # nn.Identity is also a pass-through layer (dropout-like) for unit discovery: not counted
    classes = {c.__name__ for c in A.REGISTRY.module_classes() if c is not nn.Identity}
    names = set(A.ACTIVATIONS) | set(A.NON_SMOOTH_ACTIVATIONS)
    home = SRC / "structure" / "_activations.py"
    assert home.is_file()
    for path in sorted(SRC.rglob("*.py")):
        if path == home:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        used = _names_in(tree) & classes
        assert not used, (
            f"{path.relative_to(SRC)} names activation classes {sorted(used)}: derive them from the registry"
        )
        for sub in ast.walk(tree):
            if isinstance(sub, (ast.Tuple, ast.List, ast.Set, ast.Dict)):
                items = sub.keys if isinstance(sub, ast.Dict) else sub.elts
                lits = {e.value for e in items if isinstance(e, ast.Constant) and isinstance(e.value, str)}
                assert len(lits & names) < 2, (
                    f"{path.relative_to(SRC)}:{sub.lineno} lists activation names {sorted(lits & names)}: "
                    "derive them from the registry"
                )


# --------------------------------------------------------------------------- unit kinds (class attribute)
def test_unit_kind_is_declared_by_the_class_not_looked_up_by_its_name():
    from nqf import networks
    from nqf.modules._units import UnitLayout, UnitSlice

    expect = {
        networks.TwoLayerMLP(3, 4, 2): "mlp-hidden",
        networks.MixtureOfExperts(3, 4, 2): "experts",
        networks.Factorization(3, 2, 4): "factor-columns",
        networks.MatrixSensing(3, 4): "factor-columns",
    }
    for cls in (getattr(networks, n) for n in networks.__all__):
        if isinstance(cls, type) and issubclass(cls, nn.Module) and hasattr(cls, "units"):
            assert isinstance(getattr(cls, "unit_kind", None), str), f"{cls.__name__} declares no unit_kind"
    for net, kind in expect.items():
        assert type(net).unit_kind == kind
        (cand,) = find_units(net)
        assert cand.kind == kind, type(net).__name__

    class TwoLayerMLPLookalike(nn.Module):  # a class named like a network of the package, no unit_kind
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.zeros(4, 3, dtype=torch.float64))

        @property
        def units(self):
            return UnitLayout([UnitSlice("w", axis=0)])

        def forward(self, x):
            return (x @ self.w.T).pow(2).sum(-1, keepdim=True)

    TwoLayerMLPLookalike.__name__ = "TwoLayerMLP"
    (cand,) = find_units(TwoLayerMLPLookalike())
    assert cand.kind == "custom"
    TwoLayerMLPLookalike.unit_kind = "my-units"
    assert find_units(TwoLayerMLPLookalike())[0].kind == "my-units"


# --------------------------------------------------------------------------- analyze: act= and the smoothness check
def test_analyze_act_choices_and_refusals_come_from_the_registry():
    from nqf.app._study._checks import check_smooth
    from nqf.app._study._models import build_model, parse_spec
    from nqf.errors import ModelSpecError

    assert parse_spec("mlp:act=Softplus_Centred")[1]["act"] == "softplus-centred"
    assert parse_spec("mlp:act=leaky-relu")[1]["act"] == "leaky_relu"
    with pytest.raises(ModelSpecError, match="act must be one of tanh, sin, erf, gelu, softplus-centred"):
        parse_spec("mlp:act=swish2")
    for name in A.ACTIVATIONS:
        model = build_model(f"mlp:width=4,act={name}", 3, 2)
        assert A.REGISTRY.of_module(model[1]) is A.ACTIVATIONS[name]
        assert check_smooth(model).status == "ok"
    for name in ("relu", "abs", "prelu"):
        model = build_model(f"mlp:width=4,act={name}", 3, 2)
        assert model(torch.zeros(2, 3, dtype=torch.float64)).dtype == torch.float64
        with pytest.raises(NormalFormError, match=r"not smooth at 0.*use tanh, sin, erf, gelu, a centred softplus"):
            check_smooth(model)
