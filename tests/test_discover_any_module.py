"""Unit discovery in any nn.Module (issue 24, "units in any module").

Truth: the same network written as an nn.Sequential (whose layer order is its call order by definition), the
analytic operator nqf.structure.mlp, and hand-made modules whose forward order, dataflow or activation is known
by construction.  Operators are compared in float64 to 1e-10.
"""

import re

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from nqf.app._cli import app
from nqf.app._study import build_model, find_unit_layers, unit_listing
from nqf.errors import NormalFormError, NoUnitsError
from nqf.modules import find_units, from_module, select_units
from nqf.structure import mlp

DT = torch.float64


class CNN(nn.Module):
    def __init__(self, bias=True):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1, bias=bias)
        self.act = nn.Tanh()
        self.flat = nn.Flatten()
        self.readout = nn.Linear(4 * 8 * 8, 3, bias=False)

    def forward(self, x):
        return self.readout(self.flat(self.act(self.conv(x))))


class CNNFunctional(CNN):
    """The activation and the flattening as calls in the forward, not modules."""

    def forward(self, x):
        h = torch.tanh(self.conv(x))
        return self.readout(h.view(h.size(0), -1))


class MLP(nn.Module):
    def __init__(self, D=5, m=7, C=2):
        super().__init__()
        self.hidden = nn.Linear(D, m)
        self.act = nn.Tanh()
        self.out = nn.Linear(m, C)

    def forward(self, x):
        return self.out(self.act(self.hidden(x)))


class ReadoutFirst(nn.Module):
    """Registration order (out, fc) is not the call order (fc, out); the activation is a function."""

    def __init__(self, D=4, m=6, C=4):
        super().__init__()
        self.out = nn.Linear(m, C, bias=False)
        self.fc = nn.Linear(D, m)

    def forward(self, x):
        return self.out(torch.tanh(self.fc(x)))


def _same_candidate(a, b, rename):
    assert (a.kind, a.n_units, a.p, a.smooth) == (b.kind, b.n_units, b.p, b.smooth)
    assert a.order_verified and b.order_verified
    mine = [
        (rename[s.param.split(".")[0]] + "." + s.param.split(".", 1)[1], s.axis, s.size, s.offset)
        for s in a.layout.slices
    ]
    assert mine == [(s.param, s.axis, s.size, s.offset) for s in b.layout.slices]


def _assert_same_operator(m1, lay1, m2, lay2, X):
    op1, op2 = from_module(m1, lay1, X), from_module(m2, lay2, X)
    torch.testing.assert_close(op1.dense(), op2.dense(), rtol=0, atol=1e-10)
    torch.testing.assert_close(op1.offset, op2.offset, rtol=0, atol=1e-10)


@pytest.mark.parametrize("cls,bias", [(CNN, True), (CNN, False), (CNNFunctional, True)])
def test_cnn_subclass_equals_sequential(cls, bias):
    torch.manual_seed(0)
    net = cls(bias).to(DT)
    seq = nn.Sequential(net.conv, net.act, net.flat, net.readout)
    (a,) = find_units(net)
    (b,) = find_units(seq)
    assert a.names == ("conv", "readout") and b.names == ("0", "3") and a.kind == "conv-channels"
    assert a.n_units == 4 and a.p == 3 * 64 + 9 + bias and ("bias" in a.description) == bias
    _same_candidate(a, b, {"conv": "0", "readout": "3"})
    X = torch.randn(20, 1, 8, 8, dtype=DT)
    _assert_same_operator(net, a.layout, seq, b.layout, X)


def test_mlp_subclass_equals_sequential_and_keeps_the_bias():
    torch.manual_seed(1)
    net = MLP().to(DT)
    seq = nn.Sequential(net.hidden, net.act, net.out)
    (a,) = find_units(net)
    (b,) = find_units(seq)
    assert a.names == ("hidden", "out") and a.activation == "tanh" and a.p == 2 + 5 + 1
    assert [s.param for s in a.layout.slices] == ["out.weight", "hidden.weight", "hidden.bias"]
    _same_candidate(a, b, {"hidden": "0", "out": "2"})
    X = torch.randn(12, 5, dtype=DT)
    _assert_same_operator(net, a.layout, seq, b.layout, X)
    (f,) = find_unit_layers(net)
    assert f.is_whole_mlp and f.bias and type(f.activation) is nn.Tanh


def test_forward_order_not_registration_order():
    """Registered (out, fc) but called fc → torch.tanh → out: found as (fc, out) with the analytic operator."""
    torch.manual_seed(2)
    net = ReadoutFirst().to(DT)
    (c,) = find_units(net)
    assert c.names == ("fc", "out") and c.activation == "tanh" and c.order_verified
    assert "torch.tanh" in c.description
    X = torch.randn(10, 4, dtype=DT)
    torch.testing.assert_close(
        from_module(net, c.layout, X).dense(), mlp(X, "tanh", bias=True, n_outputs=4).dense(), rtol=0, atol=1e-10
    )


def test_residual_block_is_found_with_the_skip_in_the_offset():
    """h + fc2(tanh(fc1(h))): only the input h is shared, the hidden values feed fc2 alone, so the hidden
    neurons are offered; the skip adds h to f(0) and nothing to A (verified by from_module)."""

    class Residual(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(3, 6, bias=False)
            self.fc2 = nn.Linear(6, 3, bias=False)

        def forward(self, h):
            return h + self.fc2(torch.tanh(self.fc1(h)))

    net = Residual().to(DT)
    (c,) = find_units(net)
    assert c.names == ("fc1", "fc2")
    X = torch.randn(9, 3, dtype=DT)
    op = from_module(net, c.layout, X)
    torch.testing.assert_close(op.dense(), mlp(X, "tanh", n_outputs=3).dense(), rtol=0, atol=1e-10)
    torch.testing.assert_close(op.offset, X, rtol=0, atol=1e-10)


def test_hidden_values_read_elsewhere_are_not_offered():
    """fc2(a) + a with a = tanh(fc1(x)): the hidden values also reach the output directly (a permutation of the
    units then permutes outputs), so no candidate; the same for softmax between the layers."""

    class Leaky(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(3, 4)
            self.fc2 = nn.Linear(4, 4)

        def forward(self, x):
            a = torch.tanh(self.fc1(x))
            return self.fc2(a) + a

    class Soft(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.sm, self.fc2 = nn.Linear(3, 4), nn.Softmax(-1), nn.Linear(4, 2)

        def forward(self, x):
            return self.fc2(self.sm(self.fc1(x)))

    class SoftFn(Soft):
        def forward(self, x):
            return self.fc2(torch.softmax(self.fc1(x), -1))

    for net in (Leaky(), Soft(), SoftFn()):
        assert find_units(net) == [], type(net).__name__


def test_swapped_layers_are_not_offered_when_the_sizes_fit_both_ways():
    """All sizes 4: registration order (out, fc) would make a well-shaped but wrong candidate; the dataflow
    offers only (fc, out)."""
    net = ReadoutFirst(D=4, m=4, C=4)
    assert [c.names for c in find_units(net)] == [("fc", "out")]


def test_untraceable_forward_falls_back_to_registration_order_unverified():
    """Control flow on the input: fx cannot trace; the registered order (fc, act, out) is used, the candidate
    says so, and from_module still verifies it (here it is right: same operator as the Sequential)."""

    class Branchy(MLP):
        def forward(self, x):
            h = self.act(self.hidden(x))
            if h.shape[-1] > 100:  # control flow on a traced value: fx cannot trace it (vmap can)
                h = 2 * h
            return self.out(h)

    torch.manual_seed(3)
    net = Branchy().to(DT)
    (c,) = find_units(net)
    assert c.names == ("hidden", "out") and not c.order_verified
    assert "not verified" in c.description and "order not verified" in c.summary()
    X = torch.randn(8, 5, dtype=DT)
    seq = nn.Sequential(net.hidden, net.act, net.out)
    _assert_same_operator(net, c.layout, seq, select_units(seq).layout, X)

    class BranchyReversed(ReadoutFirst):  # registered (out, fc), called fc → out: the fallback has no
        def __init__(self):  # candidate here unless the sizes fit the wrong order, which from_module refuses
            super().__init__(D=4, m=4, C=4)

        def forward(self, x):
            if x.shape[-1] > 100:
                x = 2 * x
            return self.out(torch.tanh(self.fc(x)))

    net = BranchyReversed().to(DT)
    (wrong,) = find_units(net)
    assert wrong.names == ("out", "fc") and not wrong.order_verified
    with pytest.raises(NormalFormError, match="symmetr|permut"):
        from_module(net, wrong.layout, torch.randn(8, 4, dtype=DT))


def _model_file(tmp_path, body):
    f = tmp_path / "model.py"
    f.write_text("import torch\nfrom torch import nn\n\n" + body)
    return f


def test_cli_list_units_prints_candidates_and_runs_nothing(tmp_path):
    body = (
        "class Deep(nn.Module):\n"
        "    def __init__(self, D, C):\n"
        "        super().__init__()\n"
        "        self.a, self.b, self.c = nn.Linear(D, 6), nn.Linear(6, 5), nn.Linear(5, C)\n"
        "    def forward(self, x):\n"
        "        return self.c(torch.tanh(self.b(torch.tanh(self.a(x)))))\n\n"
        "def make(in_features, n_outputs):\n"
        "    return Deep(in_features, n_outputs)\n"
    )
    model = f"{_model_file(tmp_path, body)}:make"
    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["analyze", "--model", model, "--data", "iris", "--out", str(out), "--list-units"])
    assert res.exit_code == 0, res.output
    # iris: D = 4, C = 3; p = (readout rows) + (input dim) + bias
    assert "`a` / `b` (mlp-hidden, 6 units, p = 10)" in res.output
    assert "`b` / `c` (mlp-hidden, 5 units, p = 10)" in res.output
    assert not out.exists() and not (tmp_path / "runs").exists()
    # the same lines as the Python function; without --units select_units' error lists them the same way
    net = build_model(model, 4, 3)
    lines = unit_listing(net)
    assert len(lines) == 2 and all(line in res.output for line in lines)
    with pytest.raises(NoUnitsError, match=re.escape("2 layers of interchangeable units found: `a` / `b` (mlp-hidden")):
        select_units(net)
