"""One result convention (nqf.results): every public result type is a frozen dataclass with a compact repr
(under 400 characters for a problem with p = 1000), a to_dict() that round-trips through JSON, and it pickles.

Each factory builds its result from a real call of the library on a problem whose unit dimension (or number
of modes) is p = 1000: a two-layer MLP with D = 999 inputs and C = 1 output, or a Lotka–Volterra system of
K = 1000 modes.  A coverage test walks the ``__all__`` of every nqf module, so that a new dataclass that is
neither in the table nor declared a non-result fails.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import pickle
import pkgutil

import numpy as np
import pytest
import torch

import nqf
from nqf.dynamics import GD, Save
from nqf.results import Result, compact_repr, summarize, to_jsonable

P = 1000  # unit dimension / number of modes of every problem below
D, C = P - 1, 1
F64 = torch.float64


# ----------------------------------------------------------------------------- shared problems (cached)
_CACHE: dict = {}


def cached(fn):
    def wrapper():
        if fn.__name__ not in _CACHE:
            _CACHE[fn.__name__] = fn()
        return _CACHE[fn.__name__]

    wrapper.__name__ = fn.__name__
    return wrapper


def _loss_log(f):
    """A CSV loss log of P points read back (``f``: pytest's ``tmp_path``-like folder argument, or a temp dir)."""
    import tempfile
    from pathlib import Path

    folder = Path(tempfile.mkdtemp())
    rows = "".join(f"{k},{1.0 / (k + 1)}\n" for k in range(P))
    (folder / "log.csv").write_text("step,loss\n" + rows)
    return nqf.app._data.read_loss_log(folder / "log.csv")


@cached
def _forecast():
    """nqf.forecast of a bias-free MLP with p = D + C = 1000 (8 units, scaled to 1e-3) on the MLP problem's data."""
    X, y, _ = mlp_problem()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(D, 8, bias=False), torch.nn.Tanh(), torch.nn.Linear(8, C, bias=False))
    with torch.no_grad():
        for prm in net.parameters():
            prm.mul_(1e-3)
    return nqf.forecast(net.double(), X, y, lr=0.1, momentum=0.9, batch_size=4)


@cached
def mlp_problem():
    """MLP structure with p = D + C = 1000: N = 6 samples, a random teacher."""
    from nqf.structure._mlp import mlp

    g = torch.Generator().manual_seed(0)
    X = torch.randn(6, D, generator=g, dtype=F64) / math.sqrt(D)
    y = torch.randn(6, C, generator=g, dtype=F64)
    return X, y, mlp(X, "tanh")


@cached
def lv_system():
    """Diagonal Lotka–Volterra system with K = 1000 modes (power-law spectrum)."""
    from nqf.reductions.lv import LotkaVolterra

    k = np.arange(1, P + 1, dtype=float)
    beta = k**-1.0
    return LotkaVolterra(beta, np.ones(P), 1e-6 * np.ones(P), y2=float(np.sum(beta**2)) + 1.0)


@cached
def lv_solution():
    return lv_system().gd(0.2, 300, record_every=30)


@cached
def lv_limit():
    return lv_system().limit(1e-6)


@cached
def network_runs():
    """The same W(0) through the NQF (order parameter) and a real tanh MLP of width 4 with p = 1000."""
    from nqf.dynamics import simulate, train_network
    from nqf.networks._mlp import TwoLayerMLP

    X, y, op = mlp_problem()
    g = torch.Generator().manual_seed(1)
    net = TwoLayerMLP(D, 4, C, "tanh")
    Wd = torch.randn(P, 4, generator=g, dtype=F64)
    W0 = math.sqrt(1e-3) * Wd
    q = simulate(op, y, W0=W0, optimizer=GD(0.1), save=Save(every=2), steps=4)
    n = train_network(net, net.units, X, y, W0=W0, optimizer=GD(0.1), save=Save(every=2), steps=4)
    return net, Wd, q, n


@cached
def analysis():
    from nqf.app._data import Dataset

    g = torch.Generator().manual_seed(2)
    X = torch.randn(40, D, generator=g, dtype=F64).numpy()
    Y = (X[:, :3] @ np.array([[1.0], [0.5], [0.25]])) * math.sqrt(D)
    data = Dataset("random", X, Y - Y.mean(0), "regression")
    return nqf.analyze("mlp:width=8,act=tanh", data, eps=1e-4, steps=12, save_points=20)


@cached
def outcome():
    from nqf.app._experiments import Outcome
    from nqf.app._study._output import fill_outcome

    out = Outcome()
    fill_outcome(analysis(), out)
    return out


def _points():
    from nqf.app._experiments import REGISTRY
    from nqf.app._sweep import SweepSpec, build_points

    base = {"experiment": "lv-staircase", "params": dict(REGISTRY["lv-staircase"].tiny)}
    return build_points(base, SweepSpec(grid={"ratio": list(np.linspace(0.3, 0.6, P // 100))}, seeds=[0]))


def _sweep_state(tmp_path_factory):
    from nqf.app._sweep._execute import execute
    from nqf.app._sweep._points import Point

    bad = [
        Point(
            index=i,
            swept={"eps": -1.0},
            seed=0,
            config={},
            resolved=None,
            hash=f"{i:064x}",
            error="`eps` must lie in (0, 1)",
        )
        for i in range(P)
    ]
    return execute(bad, tmp_path_factory.mktemp("sweep"), client=None)  # invalid points never reach the client


def _power_law_curve():
    from nqf.curves import predicted_curve

    k = np.arange(1, P + 1, dtype=float)
    t = np.geomspace(1.0, 1e6, 400)
    return t, predicted_curve(t, k**-2.0, k**-1.0, 1e-6)


def _fit():
    from nqf.curves import fit_power_law

    t, L = _power_law_curve()
    return fit_power_law(t, L, window=(1e2, 1e5), L_inf=0.0, n_boot=50)


def _steps():
    from nqf.curves import detect_steps

    sol = lv_solution()
    t = sol.t.numpy()[1:]
    return detect_steps(t, sol.loss.numpy()[1:])


def _comparison():
    from nqf.curves._compare import compare_staircase

    sol, pl = lv_solution(), lv_system().plateaus(1e-6)
    return compare_staircase(sol.t.numpy(), sol.loss.numpy(), pl.losses[:4].numpy(), pl.times[:3].numpy())


def _real_clock():
    from nqf.curves import real_clock

    sol = lv_solution()
    st = lv_system().staircase(1e-6)
    return real_clock(st, sol.t.numpy(), sol.loss.numpy(), sol.t.numpy(), sol.loss.numpy())


def _step_clock():
    from nqf.curves import step_clock

    sol = lv_solution()
    t, L = sol.t.numpy(), sol.loss.numpy()
    return step_clock((t, L), (1.05 * t, L), steps=(0.1, 0.2), h=0.01)


def _crowded():
    from nqf.curves import compare_crowded, crowded_prediction

    st = lv_system().staircase(1e-6)
    pred = crowded_prediction(st)
    t = np.geomspace(1.0, 3000.0, 400)  # covers the crowded window; the exact staircase curve as "measured"
    return pred, compare_crowded(pred, t, st.loss_curve(t))


def _validity_sweep():
    from nqf.curves._validity import validity_sweep

    X, y, op = mlp_problem()
    net, Wd, _, _ = network_runs()
    return validity_sweep(net, net.units, X, y, op, Wd, [1e-3, 1e-2], lr=0.1, steps=4, save_every=2)


def _loop():
    """Plain gradient descent on ``½‖W‖²`` with W of shape (p, 2) through the one training loop."""
    from nqf.dynamics._loop import StepRule, training_loop

    W = torch.ones(P, 2, dtype=F64)
    saved = []
    return training_loop(
        [W],
        StepRule(lr=0.1),
        steps=3,
        n_samples=1,
        batch_size=None,
        seed=0,
        save_every=1,
        divergence_threshold=1e8,
        evaluate=lambda ps, idx: (0.5 * float((ps[0] ** 2).sum()), None),
        gradient=lambda ps, ctx, idx: [ps[0]],
        save=lambda k, ps, loss: saved.append(loss),
    )


def _upper_bound_check():
    """The real-data experiment's one-sided check, on the gap of the p = 1000 analysis."""
    from nqf.app._experiments._real_data_checks import UpperBoundCheck

    a = analysis()
    return UpperBoundCheck(
        "max |L_real − L_NQF| / L_NQF",
        a.validity["gap_tolerance"],
        a.validity["max_gap"],
        0.0,
        kind="absolute",
        reference="real network against its NQF from the same W(0)",
    )


def _saddles():
    from nqf.reductions.saddles import saddle_sequence

    _, y, op = mlp_problem()
    return saddle_sequence(op, y, max_rank=1)


# name -> (factory taking the pytest tmp_path_factory, marks)
def _leading_order():
    import numpy as np

    from nqf.reductions.dormant import leading_order, unit_term
    from nqf.structure import mlp_higher_order

    P = 5
    A, B = (g.ravel() for g in np.meshgrid(range(P), range(P), indexing="ij"))
    X, Y = np.concatenate([np.eye(P)[A], np.eye(P)[B]], 1), np.eye(P)[(A + B) % P]
    return leading_order([unit_term(mlp_higher_order(X, "square", n_outputs=P), 3)], Y - Y.mean(0))


FACTORIES = {
    "nqf.reductions.dormant._utility.LeadingOrder": (lambda f: _leading_order(), ()),
    "nqf.reductions.dormant._utility.UtilityMaximum": (lambda f: _leading_order().maxima[0], ()),
    "nqf.dynamics._trajectory.Trajectory": (lambda f: network_runs()[2], ()),
    "nqf.reductions.lv._solution.LVSolution": (lambda f: lv_solution(), ()),
    "nqf.reductions.lv._final.Plateaus": (lambda f: lv_system().plateaus(1e-6), ()),
    "nqf.reductions.lv._limit.LimitResult": (lambda f: lv_limit(), ()),
    "nqf.reductions.lv._limit.LimitEvent": (lambda f: lv_limit().events[-1], ()),
    "nqf.reductions.svd_modes._modes.TwoLayerModes": (
        lambda f: __import__("nqf.reductions.svd_modes", fromlist=["x"]).two_layer_modes(
            __import__("nqf.reductions.svd_modes", fromlist=["x"]).whiten(
                torch.randn(2 * P, D, generator=torch.Generator().manual_seed(3), dtype=F64)
            ),
            torch.randn(2 * P, C, generator=torch.Generator().manual_seed(4), dtype=F64),
            eps=1e-6,
        ),
        (),
    ),
    "nqf.reductions.saddles._results.Saddle": (lambda f: _saddles().saddles[-1], ()),
    "nqf.reductions.saddles._results.SaddleSequence": (lambda f: _saddles(), ()),
    "nqf.curves._powerlaw.PowerLawFit": (lambda f: _fit(), ()),
    "nqf.curves._exponents.ExponentPrediction": (
        lambda f: __import__("nqf.curves", fromlist=["x"]).predict_exponent(
            np.arange(1, P + 1.0) ** -2.0, np.arange(1, P + 1.0) ** -1.0
        ),
        (),
    ),
    "nqf.curves._steps.Steps": (lambda f: _steps(), ()),
    "nqf.curves._compare.StaircaseComparison": (lambda f: _comparison(), ()),
    "nqf.curves._real_clock.RealClock": (lambda f: _real_clock(), ()),
    "nqf.curves._step_clock.StepClock": (lambda f: _step_clock(), ()),
    "nqf.curves._crowded.CrowdedPrediction": (lambda f: _crowded()[0], ()),
    "nqf.curves._crowded.CrowdedComparison": (lambda f: _crowded()[1], ()),
    "nqf.curves._validity.ValidityReport": (lambda f: _validity_sweep().reports[0], ()),
    "nqf.curves._validity.ValiditySweep": (lambda f: _validity_sweep(), ()),
    "nqf.app._study._result.Analysis": (lambda f: analysis(), ()),
    "nqf.reductions._staircase.Staircase": (lambda f: analysis().prediction, ()),
    "nqf.dynamics._seeded.Seeding": (
        lambda f: __import__("nqf.dynamics", fromlist=["x"]).Seeding(learned_fraction=0.1, bridge=True),
        (),
    ),
    "nqf.reductions._staircase.PredictionCost": (
        lambda f: __import__("nqf.reductions", fromlist=["x"]).PredictionCost(
            0.5, clock=0.25, clock_estimate=(0.1, 0.3)
        ),
        (),
    ),
    "nqf.app._study._result.CheckRow": (lambda f: analysis().checks[0], ()),
    "nqf.app._study._parts.Verdict": (lambda f: analysis().verdict, ()),
    "nqf.app._study._parts.Timings": (lambda f: analysis().timings, ()),
    "nqf.app._study._parts.Memory": (lambda f: analysis().memory, ()),
    "nqf.app._study._parts.Validity": (lambda f: analysis().validity, ()),
    "nqf.app._study._parts.Curves": (lambda f: analysis().curves, ()),
    "nqf.app._study._discover.FoundUnits": (
        lambda f: __import__("nqf.app._study._discover", fromlist=["x"]).find_unit_layers(
            torch.nn.Sequential(torch.nn.Linear(D, 8, bias=False), torch.nn.Tanh(), torch.nn.Linear(8, C, bias=False))
        )[0],
        (),
    ),
    "nqf.modules._discover.UnitCandidate": (
        lambda f: __import__("nqf.modules._discover", fromlist=["x"]).find_units(
            torch.nn.Sequential(torch.nn.Linear(D, 8, bias=False), torch.nn.Tanh(), torch.nn.Linear(8, C, bias=False))
        )[0],
        (),
    ),
    "nqf.app._data._datasets.Dataset": (
        lambda f: __import__("nqf.app._data", fromlist=["x"]).load_dataset("digits"),
        (),
    ),
    "nqf.app._experiments._base.Outcome": (lambda f: outcome(), ()),
    "nqf.app._experiments._base.Check": (lambda f: outcome().checks[0], ()),
    "nqf.app._experiments._base.Table": (lambda f: outcome().tables[0], ()),
    "nqf.app._sweep._points.Point": (lambda f: _points()[-1], ()),
    "nqf.app._sweep._grid.SweepSpec": (
        lambda f: __import__("nqf.app._sweep", fromlist=["x"]).SweepSpec(
            grid={"eps": list(np.geomspace(1e-9, 1e-2, P))}, seeds=list(range(3))
        ),
        (),
    ),
    "nqf.app._sweep._execute.SweepState": (_sweep_state, ()),
    "nqf.dynamics._loop.LoopOutcome": (lambda f: _loop(), ()),
    "nqf.app._experiments._real_data_checks.UpperBoundCheck": (lambda f: _upper_bound_check(), ()),
    "nqf.curves._training_clock.TrainingClock": (lambda f: _forecast().clock, ()),
    "nqf.app._study._forecast_result.Forecast": (lambda f: _forecast(), ()),
    "nqf.app._data._logs.LossLog": (lambda f: _loss_log(f), ()),
    "nqf.app._study._watch.WatchStatus": (
        lambda f: __import__("nqf.app._study", fromlist=["x"]).Monitor(_forecast()).update(1.0, 0.3),
        (),
    ),
    "nqf.app._study._forecast_result.LogJudgement": (
        lambda f: _forecast().judge(np.arange(P, dtype=float), np.linspace(1.0, 0.0, P)),
        (),
    ),
}

#: Public dataclasses that are not results of a computation (inputs, specifications, run contexts).
NOT_RESULTS = {
    "nqf.app._study._output_side.OutputSide": "an intermediate of nqf.forecast (a projection basis)",
    "nqf.networks._families.Family": "a family's record (its network class, operator and example functions)",
    "nqf.app._study._plan.Prepared": "an intermediate of nqf.analyze: the data, the module and its units, checked",
    "nqf.app._study._plan.NQFData": "an intermediate of nqf.analyze: the NQF's operator and targets",
    "nqf.app._study._plan.Problem": "an intermediate of nqf.analyze: what is analysed (holds the module)",
    "nqf.app._study._plan.RunPlan": "an input of nqf.analyze's runs: the step, the steps, the form, the saves",
    "nqf.app._study._plan.Comparison": "an intermediate of nqf.analyze: the parts of an Analysis its comparison made",
    "nqf.app._study._predicted.OrderedPrediction": "an intermediate of nqf.analyze: the prediction phase's parts",
    "nqf.modules._units.UnitSlice": "an input: how a parameter is split into units",
    "nqf.structure._activations.Activation": "an input: an activation function with its derivatives at 0",
    "nqf.app._experiments._runner.RunContext": "what a running experiment may use (run directory, device, seed)",
    "nqf.app._experiments._catalog.CatalogEntry": "a catalogue entry: where an experiment is defined, its description",
    "nqf.dynamics._loop.StepRule": "an input: the update rule of a training step",
    "nqf.dynamics._initial.InitialState": "an input: the validated M(0) or W(0) of a run",
    "nqf.dynamics._loss.Loss": "an input: the loss of a run (base class)",
    "nqf.dynamics._loss.MSE": "an input: the mean-squared-error loss",
    "nqf.dynamics._loss.Logistic": "an input: the binary logistic loss",
    "nqf.dynamics._loss.CrossEntropy": "an input: the softmax cross-entropy loss",
    "nqf.dynamics._optim.Optimizer": "an input: the update rule of a run (base class)",
    "nqf.dynamics._optim.GD": "an input: full-batch gradient descent settings",
    "nqf.dynamics._optim.SGD": "an input: minibatch gradient descent settings",
    "nqf.dynamics._optim.Adam": "an input: Adam settings",
    "nqf.dynamics._save.Save": "an input: what a run saves",
    "nqf.results.Result": "the base class of the convention itself",
}

#: Results that are updated while the computation that returns them runs (not frozen; repr/to_dict/pickle hold).
LIVE = {"nqf.app._sweep._execute.SweepState": "execute() counts finished points into it while the sweep runs"}


def _public_dataclasses() -> set[str]:
    found = set()
    for m in pkgutil.walk_packages(nqf.__path__, "nqf."):
        if m.name.endswith("__main__"):
            continue
        mod = importlib.import_module(m.name)
        for name in getattr(mod, "__all__", ()):
            obj = getattr(mod, name, None)
            if (
                isinstance(obj, type)
                and (dataclasses.is_dataclass(obj) or hasattr(obj, "to_dict") or issubclass(obj, Result))
                and obj.__module__.startswith("nqf.")
            ):
                found.add(f"{obj.__module__}.{obj.__qualname__}")
    return found


def test_table_covers_every_public_result_type():
    found = _public_dataclasses()
    missing = sorted(found - set(FACTORIES) - set(NOT_RESULTS))
    assert not missing, f"public result types without a factory in tests/test_result_types.py: {missing}"
    stale = sorted(set(FACTORIES) - found)
    assert not stale, f"table entries that are no longer public result types: {stale}"


def _build(name, tmp_path_factory):
    factory, _ = FACTORIES[name]
    obj = factory(tmp_path_factory)
    mod, cls = name.rsplit(".", 1)
    assert type(obj) is getattr(importlib.import_module(mod), cls)
    return obj


@pytest.mark.parametrize("name", [pytest.param(k, marks=v[1], id=k.rsplit(".", 1)[1]) for k, v in FACTORIES.items()])
def test_result_convention(name, tmp_path_factory):
    torch.set_num_threads(1)
    obj = _build(name, tmp_path_factory)
    cls = type(obj)
    # immutable dataclass
    assert dataclasses.is_dataclass(obj)
    if name not in LIVE:
        assert cls.__dataclass_params__.frozen, f"{cls.__name__} is not frozen"
        field = dataclasses.fields(obj)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(obj, field, getattr(obj, field))
    # compact repr: no whole arrays
    text = repr(obj)
    assert len(text) < 400, f"repr of {cls.__name__} is {len(text)} characters: {text[:200]}…"
    assert text.startswith(cls.__name__)
    # to_dict is JSON-ready and round-trips
    d = obj.to_dict()
    assert isinstance(d, dict) and d
    s = json.dumps(d, allow_nan=False)
    assert json.loads(s) == d
    # pickle round-trips
    back = pickle.loads(pickle.dumps(obj))
    assert type(back) is cls
    assert back.to_dict() == d
    assert repr(back) == text


# ----------------------------------------------------------------------------- the helpers themselves
def test_to_jsonable_conventions():
    t = torch.tensor([[1.0, math.nan], [-math.inf, 2.5]], dtype=F64)
    assert to_jsonable(t) == [[1.0, None], [None, 2.5]]
    assert to_jsonable(np.array([1, 2], dtype=np.int32)) == [1, 2]
    assert to_jsonable({1: (np.float32(0.5), np.bool_(True)), "x": math.inf}) == {"1": [0.5, True], "x": None}
    assert to_jsonable(torch.float32) == "torch.float32"
    assert type(to_jsonable(np.int64(3))) is int
    with pytest.raises(nqf.errors.InvalidTypeError, match="complex"):
        to_jsonable(torch.zeros(2, dtype=torch.complex128))
    with pytest.raises(nqf.errors.InvalidTypeError, match="`x.f`: values of type builtins.object"):
        to_jsonable(object(), "x.f")


def test_compact_repr_never_shows_arrays():
    @dataclasses.dataclass(frozen=True, repr=False)
    class R(Result):
        a: torch.Tensor
        b: float
        c: list
        s: str

    r = R(torch.zeros(P, P), 1 / 3, list(range(P)), "x" * 1000)
    text = repr(r)
    assert text == compact_repr(r)
    assert "float32[1000, 1000]" in text and "0.3333" in text and "list[1000]" in text and len(text) < 200
    assert summarize(np.float64(2.0)) == "2" and summarize(torch.tensor(1.5)) == "float32(1.5)"


def test_results_json_is_the_outcome_to_dict(tmp_path):
    """results.json records checks, tables, metrics and summary exactly as the result objects' to_dict()."""
    from nqf.app._experiments import REGISTRY, Outcome, run_experiment
    from nqf.app._report._schema import CheckModel, TableModel, validate_results

    exp = REGISTRY["lv-staircase"]
    captured = {}
    run = type(exp).run

    def spy(self, params, ctx, out: Outcome):
        captured["out"] = out
        return run(self, params, ctx, out)

    try:
        type(exp).run = spy
        run_experiment(exp, exp.Params(**exp.tiny), tmp_path / "run")
    finally:
        type(exp).run = run
    data = json.loads((tmp_path / "run" / "results.json").read_text())
    want = captured["out"].to_dict()
    assert want["checks"] and want["tables"]
    for key in ("metrics", "checks", "tables", "summary"):
        assert data[key] == want[key], key
    validate_results(tmp_path / "run")
    # the dataclasses' dictionaries are the schema's models (one definition of the file's fields)
    assert set(want["checks"][0]) == set(CheckModel.model_fields)
    assert set(want["tables"][0]) == set(TableModel.model_fields)
