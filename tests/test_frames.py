"""Tables out: ``Staircase.to_frame()``, ``Analysis.to_frame()`` and ``nqf.app._sweep.sweep_frame()`` as pandas
DataFrames (pandas is optional: the ``frames`` extra), checked against the objects' own arrays."""

from __future__ import annotations

import dataclasses
import math
import pickle
import sys

import numpy as np
import pytest

import nqf
from nqf.app._experiments import REGISTRY, get_experiment
from nqf.app._sweep import SweepSpec, build_points, sweep_frame
from nqf.app._sweep._table import build_table, write_table
from nqf.errors import InvalidTypeError, MissingDependencyError, NQFError, SweepError
from nqf.reductions import Staircase

try:  # optional (the `frames` extra): without it only the missing-pandas test runs
    import pandas as pd
except ImportError:  # pragma: no cover - the dev environment has pandas
    pd = None
needs_pandas = pytest.mark.skipif(pd is None, reason="pandas is not installed (pip install 'nqf[frames]')")
get_experiment("demo")

STAIRCASE_COLUMNS = ["k", "level", "rank", "rate", "time", "time_rule", "time_leading"]
ANALYSIS_COLUMNS = [
    "k",
    "rank",
    "level_predicted",
    "level_nqf",
    "level_real",
    "level_error_nqf",
    "level_error_real",
    "time_predicted",
    "time_rule",
    "time_nqf",
    "time_real",
    "time_error_nqf",
    "time_error_real",
    "flatness",
    "flat",
]


@pytest.fixture(scope="module")
def analysis():
    """A two-drop analysis with the seeded clock (a rank-2 teacher, N = 30, width 8, ε = 1e-2; about 2 s)."""
    g = np.random.default_rng(0)
    D, C = 5, 2
    X = g.standard_normal((30, D))
    U, _ = np.linalg.qr(g.standard_normal((C, C)))
    V, _ = np.linalg.qr(g.standard_normal((D, C)))
    Y = X @ (U @ np.diag([3.0, 1.0]) @ V.T).T
    a = nqf.analyze("mlp:width=8,act=tanh", X, Y, eps=1e-2, seed=0)
    assert a.prediction.n_drops == 2 and a.clock is not None
    return a


def _starts(t) -> np.ndarray:
    return np.concatenate([[0.0], np.asarray(t, float)])


# ----------------------------------------------------------------------------- Staircase
@needs_pandas
def test_staircase_frame_is_one_row_per_plateau(analysis):
    st = analysis.prediction
    assert st.levels_module is None and st.time_uncertainty is None
    df = st.to_frame()
    assert isinstance(df, pd.DataFrame) and list(df.columns) == STAIRCASE_COLUMNS and len(df) == st.n_drops + 1
    np.testing.assert_array_equal(df["k"], np.arange(st.n_drops + 1))
    np.testing.assert_array_equal(df["level"], st.levels)
    np.testing.assert_array_equal(df["rank"], st.ranks)
    np.testing.assert_array_equal(df["rate"], st.rates)
    np.testing.assert_array_equal(df["time"], _starts(st.times))
    np.testing.assert_array_equal(df["time_leading"], _starts(st.times_leading))
    assert df["time_rule"].tolist() == [None, *st.time_rules]
    assert df["k"].dtype == np.int64 and df["rank"].dtype == np.int64 and df["level"].dtype == np.float64
    assert df.attrs == {"method": st.method, "eps": st.eps, "global_minimum": st.global_minimum}
    # the markers of a figure are the frame's (time, level) pairs
    assert list(zip(df["time"], df["level"], strict=True)) == st.markers()


@needs_pandas
def test_staircase_frame_adds_the_module_levels_and_time_bounds(analysis):
    st = analysis.clock.staircase
    assert st.levels_module is not None and st.time_uncertainty is not None
    df = st.to_frame()
    assert list(df.columns) == [*STAIRCASE_COLUMNS, "level_module", "time_uncertainty"]
    np.testing.assert_array_equal(df["level_module"], st.levels_module)
    assert math.isnan(df["time_uncertainty"].iloc[0])
    np.testing.assert_array_equal(df["time_uncertainty"].iloc[1:], st.time_uncertainty)
    assert set(df["time_rule"].iloc[1:]) == {"seeded NQF"}


@needs_pandas
def test_staircase_frame_leaves_the_staircase_as_it_was(analysis):
    st = analysis.prediction
    before = (repr(st), st.to_dict())
    df = st.to_frame()
    df.loc[0, "level"] = -1.0  # the frame is the caller's copy
    assert st.levels[0] > 0 and not st.levels.flags.writeable
    assert (repr(st), st.to_dict()) == before
    again = pickle.loads(pickle.dumps(st))
    pd.testing.assert_frame_equal(again.to_frame(), st.to_frame())


@needs_pandas
def test_staircase_frame_without_drops():
    st = Staircase(
        method="limit",
        eps=1e-3,
        levels=[0.5],
        times=[],
        time_rules=(),
        times_leading=[],
        rates=[0.0],
        ranks=[0],
        directions=np.zeros((3, 0)),
        modes=[],
        global_minimum=True,
    )
    df = st.to_frame()
    assert list(df.columns) == STAIRCASE_COLUMNS and len(df) == 1
    assert df.loc[0, "level"] == 0.5 and df.loc[0, "time"] == 0.0 and df.loc[0, "time_rule"] is None
    assert df.attrs["global_minimum"] is True


# ----------------------------------------------------------------------------- Analysis
@needs_pandas
def test_analysis_frame_holds_the_table_numbers(analysis):
    a = analysis
    P, S, R, C = a.prediction, a.nqf, a.real, a.clock
    df = a.to_frame()
    assert list(df.columns) == [*ANALYSIS_COLUMNS, "time_seeded", "time_error_seeded"]
    assert len(df) == P.n_drops + 1
    np.testing.assert_array_equal(df["rank"], P.ranks)
    np.testing.assert_array_equal(df["level_predicted"], P.levels)
    np.testing.assert_array_equal(df["level_nqf"], S.levels_measured)
    np.testing.assert_array_equal(df["level_real"], R.levels_measured)
    np.testing.assert_array_equal(df["level_error_real"], R.level_errors)
    np.testing.assert_array_equal(df["time_predicted"], _starts(P.times))
    np.testing.assert_array_equal(df["time_real"], _starts(R.times_measured))
    np.testing.assert_array_equal(df["time_seeded"], _starts(C.times))
    np.testing.assert_array_equal(df["flat"], R.flat)
    assert df["time_rule"].tolist() == [None, *P.time_rules]
    assert df[["time_error_nqf", "time_error_real", "time_error_seeded"]].iloc[0].isna().all()
    # every number of Analysis.table() (NaN there: None), in the same order of columns
    for row, cells in zip(df.itertuples(index=False), a.table(), strict=True):
        for name, cell in zip(df.columns, cells, strict=True):
            if row.k == 0 and name.startswith("time") and name != "time_rule":
                assert cell is None
                continue
            got = getattr(row, name)
            if name == "time_rule":
                assert got == (cell or None)
            elif cell is None:
                assert math.isnan(got), name
            else:
                assert got == pytest.approx(cell, rel=1e-15), name
    assert df.attrs == {
        "model": a.model,
        "data": a.data,
        "method": P.method,
        "eps": a.eps,
        "lr": a.lr,
        "steps": a.steps,
        "p": a.p,
        "width": a.width,
        "trust": a.verdict.trust,
    }


@needs_pandas
def test_analysis_frame_without_the_clock_has_no_seeded_columns(analysis):
    a = dataclasses.replace(analysis, clock=None)
    df = a.to_frame()
    assert list(df.columns) == ANALYSIS_COLUMNS
    assert repr(a).startswith("Analysis(") and pickle.loads(pickle.dumps(a)).to_frame().equals(df)


# ----------------------------------------------------------------------------- sweep
@pytest.fixture
def sweep_dir(tmp_path):
    """A sweep table of the demo experiment on a 2 × 2 grid and 2 seeds: planted measurements, one failed point,
    one pending (never run) — written like ``nqf sweep`` writes it."""
    base = {"experiment": "demo", "params": dict(REGISTRY["demo"].tiny)}
    spec = SweepSpec(grid={"eps": [1e-4, 1e-6], "width": [8, 16]}, seeds=[0, 1])
    points = build_points(base, spec)
    rows = {}
    for i, pt in enumerate(points[:-1]):
        failed = i == 2
        rows[pt.short] = {
            "status": "failed" if failed else "complete",
            "wall_seconds": 0.5 + i,
            "error_type": "RuntimeError" if failed else None,
            "error": "boom" if failed else None,
            "checks": []
            if failed
            else [
                {"name": f"switch-on time t_1 at ε = {pt.swept['eps']:g}", "predicted": 2.0, "measured": 2.0 + i},
                {"name": "plateau loss L_1 (ζ = 4)", "predicted": 0.5, "measured": 0.5 - 0.01 * i},
            ],
            "metrics": {} if failed else {"steps": 100 * (i + 1), "lr": 0.01},
        }
    doc = build_table(points, rows, experiment="demo", base=base, spec=spec, root=tmp_path)
    write_table(tmp_path, doc)
    return tmp_path, points, doc


@needs_pandas
def test_sweep_frame_is_one_row_per_point(sweep_dir):
    root, points, doc = sweep_dir
    df = sweep_frame(root)
    assert list(df.columns) == [
        "point",
        "eps",
        "width",
        "seed",
        "status",
        "reused",
        "wall_seconds",
        "error_type",
        "error",
        "measured: switch-on time t_1",
        "measured: plateau loss L_1",
        "metric: steps",
        "metric: lr",
    ]
    assert df["point"].tolist() == [p.short for p in points]
    assert df["seed"].tolist() == [p.seed for p in points]
    assert df["eps"].tolist() == [p.swept["eps"] for p in points]
    assert df["width"].tolist() == [p.swept["width"] for p in points]
    assert df["status"].tolist() == ["complete"] * 2 + ["failed"] + ["complete"] * 4 + ["pending"]
    t1 = df["measured: switch-on time t_1"]
    assert t1.tolist()[:2] == [2.0, 3.0] and t1.iloc[2:3].isna().all() and t1.iloc[-1:].isna().all()
    assert df.loc[2, "error"] == "boom" and df.loc[2, "error_type"] == "RuntimeError"
    assert df["metric: steps"].iloc[0] == 100 and df["wall_seconds"].iloc[0] == 0.5
    assert df.attrs == {"experiment": "demo", "keys": ["eps", "width"]}
    # the same table as sweep.csv
    csv = pd.read_csv(root / "sweep.csv")
    assert list(csv.columns) == list(df.columns)
    numeric = [c for c in df.columns if c.startswith(("measured:", "metric:")) or c in ("eps", "seed", "wall_seconds")]
    np.testing.assert_allclose(csv[numeric].to_numpy(float), df[numeric].to_numpy(float), rtol=1e-15)


@needs_pandas
def test_sweep_frame_reads_the_file_the_document_and_its_rows(sweep_dir):
    root, _, doc = sweep_dir
    want = sweep_frame(root)
    pd.testing.assert_frame_equal(sweep_frame(root / "sweep.json"), want)
    pd.testing.assert_frame_equal(sweep_frame(str(root)), want)
    pd.testing.assert_frame_equal(sweep_frame(doc), want)
    bare = sweep_frame(doc["rows"])  # no keys given: the swept keys in the order the rows hold them
    pd.testing.assert_frame_equal(bare, want)
    assert bare.attrs == {"experiment": None, "keys": ["eps", "width"]}
    assert sweep_frame([]).empty


@needs_pandas
def test_sweep_frame_rejects_what_is_not_a_sweep_table(tmp_path, sweep_dir):
    _, _, doc = sweep_dir
    with pytest.raises(InvalidTypeError, match="path_or_rows"):
        sweep_frame(42)
    (tmp_path / "empty").mkdir()
    with pytest.raises(SweepError, match="no sweep.json"):
        sweep_frame(tmp_path / "empty")
    with pytest.raises(SweepError, match="row 0 .*`swept`"):
        sweep_frame([{"point": "abc", "status": "complete", "measured": {}}])
    with pytest.raises(SweepError, match="row 1 must be a dict"):
        sweep_frame([doc["rows"][0], "x"])
    with pytest.raises(SweepError, match="`keys`"):
        sweep_frame({**doc, "keys": "eps"})


# ----------------------------------------------------------------------------- without pandas
@pytest.mark.parametrize("which", ["Staircase", "Analysis", "sweep"])
def test_without_pandas_one_line_says_how_to_install_it(which, analysis, sweep_dir, monkeypatch):
    call = {
        "Staircase": analysis.prediction.to_frame,
        "Analysis": analysis.to_frame,
        "sweep": lambda: sweep_frame(sweep_dir[0]),
    }[which]
    monkeypatch.setitem(sys.modules, "pandas", None)  # `import pandas` now raises ImportError
    with pytest.raises(MissingDependencyError) as info:
        call()
    err = info.value
    assert isinstance(err, NQFError) and isinstance(err, ImportError)
    assert "pip install 'nqf[frames]'" in str(err) and "\n" not in str(err)
    assert "to_frame()" in str(err) or "sweep_frame()" in str(err)
