"""Issue 37, classes 6–8, the cases left after the first pass: result constructors and API inputs, sizes that
hung, and answers that were silent or misleading.  Each CLI case is one line naming the input, exit 2, no
traceback; each API case an ``NQFError`` naming the argument."""

import math

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from _hostile import assert_one_line
from nqf import Staircase
from nqf.app._cli import app
from nqf.app._data import load_dataset, prepare
from nqf.dynamics import GD, train_network
from nqf.errors import DataError, InvalidParameterError, NonFiniteError, NQFError, SweepError
from nqf.networks._mlp import TwoLayerMLP

runner = CliRunner()


def _csv(path, rows, header="a,b,label"):
    path.write_text(header + "\n" + "\n".join(rows) + "\n")
    return str(path)


def _rows(n=30, cell=lambda i: f"{(i * 7) % 5 - 2},{(i * 3) % 4 - 1.5}", label=lambda i: str(i % 2)):
    return [f"{cell(i)},{label(i)}" for i in range(n)]


# --------------------------------------------------------------------------- class 8: misleading answers


def _data_cases():
    """Each case: (a writer of its CSV under a folder, what the refusal must name).  Nothing is written here:
    the case ids are read at collection, in the caller's working directory."""
    return {
        "missing-target-empty": (
            lambda t: _csv(t / "m1.csv", [r if i != 7 else r.rsplit(",", 1)[0] + "," for i, r in enumerate(_rows())]),
            ["target column 'label'", "data row 8"],
        ),
        "missing-target-NA": (
            lambda t: _csv(t / "m2.csv", [r if i != 3 else r.rsplit(",", 1)[0] + ",NA" for i, r in enumerate(_rows())]),
            ["target column 'label'", "data row 4", "'NA'"],
        ),
        "missing-input": (
            lambda t: _csv(t / "m3.csv", [r if i != 11 else "," + r.split(",", 1)[1] for i, r in enumerate(_rows())]),
            ["input column 'a'", "data row 12"],
        ),
        "constant-inputs": (
            lambda t: _csv(t / "c.csv", _rows(cell=lambda i: "1.5,-2")),
            ["every input is the same", "2 constant column"],
        ),
        "inputs-of-1e300": (
            lambda t: _csv(t / "h.csv", _rows(cell=lambda i: f"{(i % 5 + 1) * 1e300},{(i % 3) * 1e299}")),
            ["overflow", "5e+300"],
        ),
    }


CASE_IDS = sorted(_data_cases())


@pytest.mark.parametrize("case", CASE_IDS)
def test_a_data_file_that_misled_is_one_line_naming_it(case, tmp_path):
    write, needles = _data_cases()[case]
    path = write(tmp_path)
    res = runner.invoke(app, ["analyze", "--data", path, "--target", "label", "--out", str(tmp_path / "r")])
    assert_one_line(res, [path.rsplit("/", 1)[1], *needles])
    assert not (tmp_path / "r").exists()


def test_a_sweep_table_given_to_nqf_run_says_which_command_reads_it(tmp_path):
    cfg = tmp_path / "s.toml"
    cfg.write_text('experiment = "demo"\n[params]\n[sweep]\ngrid = {eps = [1e-3, 1e-4]}\n')
    res = runner.invoke(app, ["run", str(cfg), "--out", str(tmp_path / "r")])
    assert_one_line(res, ["s.toml", "[sweep]", "nqf sweep"])


@pytest.mark.parametrize("width", ["²", "٣", "1½", "-3", "1e3"])
def test_a_width_that_is_not_a_plain_integer_is_refused(width):
    res = runner.invoke(app, ["analyze", "--data", "iris", "--model", f"mlp:width={width}", "--list-units"])
    assert_one_line(res, ["`model`", "width", repr(width)])


def test_a_bad_scheduler_is_the_only_line(tmp_path):
    cfg = tmp_path / "d.toml"
    cfg.write_text('experiment = "demo"\n')
    res = runner.invoke(app, ["sweep", str(cfg), "--grid", "eps=1e-3,1e-4", "--scheduler", "bogus://x",
                              "--out", str(tmp_path / "S")])  # fmt: skip
    assert_one_line(res, ["`--scheduler`", "bogus://x"])
    assert not (tmp_path / "S").exists()


# --------------------------------------------------------------------------- class 7: sizes that hung


@pytest.mark.parametrize("grid", [["a=1000", "b=1000"], ["a=317", "b=316"], ["a=50000", "b=1", "seeds=0-2"]])
def test_a_sweep_past_max_points_is_refused_before_any_point_is_built(grid, tmp_path):
    """A grid of 10⁶ points did not answer a dry run within 90 s; it is counted, not built."""
    cfg = tmp_path / "d.toml"
    cfg.write_text('experiment = "demo"\n')
    args = ["sweep", str(cfg), "--dry-run"]
    for g in grid:
        key, n = g.split("=")
        if key == "seeds":
            args += ["--seeds", n]
        else:
            args += ["--grid", f"{'eps' if key == 'a' else 't_max'}=" + ",".join(str(i + 1) for i in range(int(n)))]
    res = runner.invoke(app, args)  # built point by point, the dry run would list 10⁵–10⁶ lines, not refuse
    assert_one_line(res, ["points", "at most 100000"])


def test_max_points_counts_zips_and_seeds_and_can_pass():
    from nqf.app._sweep._grid import SweepSpec, parse_seeds
    from nqf.app._sweep._points import build_points

    spec = SweepSpec(grid={"eps": [1e-3, 1e-4]}, zip={"t_max": list(range(1, 60_001))}, seeds=parse_seeds("0"))
    assert spec.n_combinations == 120_000
    with pytest.raises(SweepError, match="120000 points"):
        build_points({"experiment": "demo"}, spec)
    small = SweepSpec(grid={"eps": [1e-3, 1e-4]}, seeds=[0, 1])  # the check can pass
    assert len(build_points({"experiment": "demo"}, small)) == 4


def _pt(path, X, Y):
    torch.save({"X": X, "Y": Y}, path)
    return str(path)


@pytest.mark.parametrize(
    "case, needles",
    [
        ("list-of-one-tensor", ["repeats data"]),
        ("expanded-view", ["repeats data"]),
        ("list-with-other-length", ["same number of samples", "1000 inputs and 30 targets"]),
    ],
)
def test_a_small_pt_that_inflates_is_refused_before_it_is_built(case, needles, tmp_path):
    """A 2.3 MiB .pt inflated to 2.5 GB before any check: its shapes are read first."""
    row = torch.randn(2000, dtype=torch.float64)
    if case == "list-of-one-tensor":
        path = _pt(tmp_path / "d.pt", [row] * 1000, torch.arange(1000) % 2)
    elif case == "expanded-view":
        path = _pt(tmp_path / "d.pt", row[:1].expand(100_000, 2000), torch.arange(100_000, dtype=torch.int8) % 2)
    else:
        path = _pt(tmp_path / "d.pt", [row] * 1000, torch.arange(30) % 2)
    with pytest.raises(NQFError) as info:
        load_dataset(path)
    assert all(n in str(info.value) for n in needles), str(info.value)


def test_a_pt_of_real_values_passes_the_size_check(tmp_path):
    """The check can pass: a file that stores its values (booleans: one byte each) is read."""
    X = torch.randn(200, 5) > 0
    ds = load_dataset(_pt(tmp_path / "b.pt", X, torch.arange(200) % 2))
    assert ds.X.shape == (200, 5)


# --------------------------------------------------------------------------- class 6: the API's types


def _st(levels=(1.0, 0.5), times=(2.0,), rules=("leading order",)):
    K = len(levels) - 1
    return Staircase("lotka-volterra", 1e-3, list(levels), list(times), rules, [1.0] * K, [1.0] * (K + 1),
                     list(range(K + 1)), np.zeros((2, K)), list(range(K)))  # fmt: skip


@pytest.mark.parametrize(
    "kw, error, match",
    [
        (dict(levels=(0.5, 1.0)), InvalidParameterError, "`levels` must not rise"),
        (dict(levels=(1.0, 0.5, 0.6), times=(1.0, 2.0), rules=("leading order",) * 2), InvalidParameterError,
         "L_1 = 0.5 < L_2 = 0.6"),
        (dict(levels=(1.0, math.nan)), NonFiniteError, "`levels` must be finite"),
        (dict(levels=(math.inf, 0.5)), NonFiniteError, "`levels`"),
        (dict(times=(math.nan,)), InvalidParameterError, "`times`"),
        (dict(times=(-1.0,)), InvalidParameterError, "`times` must be ≥ 0"),
        (dict(times=(math.nan,), rules=("AGF",)), InvalidParameterError, "rule 'AGF'"),
    ],
)  # fmt: skip
def test_a_staircase_that_cannot_be_is_refused(kw, error, match):
    with pytest.raises(error, match=match):
        _st(**kw)


@pytest.mark.parametrize(
    "kw",
    [
        dict(times=(math.inf,)),  # a drop that never comes
        dict(times=(math.nan,), rules=("seeded NQF",)),  # measured on a run that did not reach it
        dict(levels=(1.0, 1.0 + 1e-12)),  # round-off of a level search
        dict(levels=(1.0,), times=(), rules=()),
    ],
)
def test_a_staircase_that_can_be_is_built(kw):
    assert isinstance(_st(**kw), Staircase)


def test_train_network_takes_float32_numpy_inputs_as_the_modules_dtype():
    """float32 NumPy inputs ended in torch's dtype error; they are cast to the module's float64."""
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(20, 3)), rng.normal(size=20)
    W0 = 0.1 * rng.normal(size=(4, 6))
    runs = []
    for Xin in (X.astype(np.float32), X.astype(np.float32).astype(np.float64)):
        net = TwoLayerMLP(3, 6, 1, "tanh")
        runs.append(train_network(net, net.units, Xin, y, W0=W0, optimizer=GD(0.05), steps=20))
    assert torch.equal(runs[0].loss, runs[1].loss)


@pytest.mark.parametrize("value", [True, False])
def test_a_constant_boolean_target_is_refused_from_python(value):
    """``nqf.analyze`` gave trust 'high' to a constant boolean target (the CLI refused it)."""
    import nqf

    X = np.random.default_rng(0).normal(size=(30, 3))
    with pytest.raises(DataError, match="at least 2 classes|target is constant"):
        nqf.analyze("mlp:width=8", X, np.full(30, value), steps=20)
    with pytest.raises(DataError, match="target is constant"):
        prepare(X, np.full(30, value), task="regression")


@pytest.mark.parametrize(
    "text, set_, needles",
    [
        ('experiment = "demo"\nparams = "abc"\n', "eps=1e-3", ["params", "'abc'", "--set"]),
        ('experiment = "demo"\nparams = [1, 2]\n', "eps=1e-3", ["params", "[1, 2]", "list"]),
        ('experiment = "demo"\n', "params=abc", ["--set", "`params` is the table", "NAME=VALUE"]),
    ],
    ids=["params-a-string", "params-a-list", "set-params-itself"],
)
def test_set_on_a_config_whose_params_are_not_a_table(text, set_, needles, tmp_path):
    """``params = "abc"`` with ``--set`` ended in a ValueError from dict() (exit 1)."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    res = runner.invoke(app, ["run", str(cfg), "--set", set_, "--out", str(tmp_path / "r")])
    assert_one_line(res, needles)
    assert not (tmp_path / "r").exists()
