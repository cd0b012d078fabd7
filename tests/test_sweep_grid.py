"""Sweep specification (grid, zip, seeds, [sweep] table), points and their hashes, `--set` over every parameter."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from helpers import toml_value
from nqf.app._cli import app
from nqf.app._experiments import (
    REGISTRY,
    ConfigError,
    apply_overrides,
    config_hash,
    get_experiment,
    load_config,
    parse_set,
)
from nqf.app._sweep._grid import SweepSpec, combine, parse_assignments, parse_seeds, parse_values, sweep_from_table
from nqf.app._sweep._points import build_points, point_dir
from nqf.app._sweep._table import quantity_name
from nqf.errors import SweepError

get_experiment("demo")
runner = CliRunner()


# ----------------------------------------------------------------------------- parsing
def test_parse_values_reads_toml_and_keeps_brackets_together():
    assert parse_values("1e-4,1e-6") == [1e-4, 1e-6]
    assert parse_values("[2.0, 1.0],[3.0,1.0]") == [[2.0, 1.0], [3.0, 1.0]]
    assert parse_values('tanh,"a,b",3,true') == ["tanh", "a,b", 3, True]
    with pytest.raises(SweepError, match="empty value"):
        parse_values("1,,2", "eps")


@pytest.mark.parametrize(
    "spec,expected",
    [("0-3", [0, 1, 2, 3]), ("0,3,7", [0, 3, 7]), ("0-2,7,1", [0, 1, 2, 7]), (5, [5]), ([4, 2], [4, 2]), (" 3 ", [3])],
)
def test_parse_seeds(spec, expected):
    assert parse_seeds(spec) == expected


@pytest.mark.parametrize("bad", ["3-1", "a-b", "1.5", "-1", [1, -2], True, "x"])
def test_parse_seeds_rejects(bad):
    with pytest.raises(SweepError, match="seeds"):
        parse_seeds(bad)


def test_grid_is_cartesian_zip_is_parallel_seeds_innermost():
    spec = SweepSpec(grid={"a": [1, 2], "b": [3, 4]}, zip={"c": [5, 6], "d": [7, 8]}, seeds=[0, 1])
    combos = spec.combinations()
    assert len(combos) == 2 * 2 * 2
    assert combos[0] == {"a": 1, "b": 3, "c": 5, "d": 7} and combos[1] == {"a": 1, "b": 3, "c": 6, "d": 8}
    assert all(c["d"] - c["c"] == 2 for c in combos)  # zipped keys move together
    with pytest.raises(SweepError, match="same length"):
        SweepSpec(zip={"c": [1, 2], "d": [1]})
    with pytest.raises(SweepError, match="both"):
        SweepSpec(grid={"c": [1]}, zip={"c": [1]})
    with pytest.raises(SweepError, match="--seeds"):
        SweepSpec(grid={"seed": [1, 2]})
    with pytest.raises(SweepError, match="twice"):
        parse_assignments(["a=1", "a=2"], "--grid")


def test_table_and_command_line_combine():
    table = sweep_from_table({"grid": {"eps": [1e-3], "lr": [0.1, 0.2]}, "zip": {"width": [8, 16]}, "seeds": "0-1"})
    assert table.seeds == [0, 1] and table.grid["lr"] == [0.1, 0.2]
    spec = combine(table, {"eps": [1e-4, 1e-5]}, {}, "3")
    assert spec.grid == {"eps": [1e-4, 1e-5], "lr": [0.1, 0.2]} and spec.zip == {"width": [8, 16]}
    assert spec.seeds == [3]
    with pytest.raises(SweepError, match="unknown key"):
        sweep_from_table({"grids": {}})
    with pytest.raises(SweepError, match="list of values"):
        sweep_from_table({"grid": {"eps": 1e-3}})


# ----------------------------------------------------------------------------- points
LV = {"experiment": "lv-staircase", "params": dict(REGISTRY["lv-staircase"].tiny)}


def test_points_hash_their_resolved_config(tmp_path):
    spec = SweepSpec(grid={"ratio": [0.5, 0.4]}, seeds=[0, 1])
    pts = build_points(LV, spec)
    assert len(pts) == 4 and all(p.valid for p in pts)
    assert [(p.swept["ratio"], p.seed) for p in pts] == [(0.5, 0), (0.5, 1), (0.4, 0), (0.4, 1)]
    # the hash is config_hash of the full resolved config (defaults included), independent of how it was written
    exp = REGISTRY["lv-staircase"]
    full = {
        "experiment": "lv-staircase",
        "seed": 1,
        "device": "cpu",
        "params": exp.Params(**dict(LV["params"], ratio=0.5)).model_dump(mode="json"),
    }
    assert pts[1].hash == config_hash(full)
    assert point_dir(tmp_path, pts[1]) == tmp_path / "points" / config_hash(full)[:12]
    # a default written out explicitly is the same point; any other change is a new point
    same = build_points(apply_overrides(LV, {"z_first": exp.Params().z_first}), spec)
    assert [p.hash for p in same] == [p.hash for p in pts]
    changed = build_points(apply_overrides(LV, {"z_first": 0.9}), spec)
    assert not {p.hash for p in changed} & {p.hash for p in pts}
    assert len({p.hash for p in pts}) == 4


def test_scalar_values_for_list_parameters():
    pts = build_points(LV, SweepSpec(grid={"eps": [1e-4, 1e-12]}))
    assert all(p.valid for p in pts), [p.error for p in pts]
    for p, v in zip(pts, [1e-4, 1e-12], strict=True):
        eps = p.resolved["params"]["eps"]
        assert eps[-1] == v and all(0 < e < 1 for e in eps) and len(set(eps)) == len(eps)
        if len(eps) == 2:  # a list that needs two scales is completed geometrically: [√v, v]
            assert eps[0] == pytest.approx(math.sqrt(v), rel=1e-15)
    demo = build_points({"experiment": "demo"}, SweepSpec(grid={"singular_values": [3.0, [2.0, 1.0]]}))
    assert [p.resolved["params"]["singular_values"] for p in demo] == [[3.0], [2.0, 1.0]]


def test_invalid_point_values_are_points_with_an_error_not_exceptions():
    pts = build_points(LV, SweepSpec(grid={"ratio": [0.5, 2.0, "x"]}))
    assert [p.valid for p in pts] == [True, False, False]
    assert "params.ratio" in pts[1].error and "less than 1" in pts[1].error
    assert "params.ratio" in pts[2].error
    with pytest.raises(SweepError, match="not a parameter"):
        build_points(LV, SweepSpec(grid={"epsilon": [1e-3]}))
    with pytest.raises(SweepError, match="unknown experiment"):
        build_points({"experiment": "nope"}, SweepSpec())


def test_quantity_names_drop_parameter_values():
    assert quantity_name("t_1 at ε = 1e-06 (ζ = 4)") == "t_1"
    assert quantity_name("τ of mode 2 switching on (ε = 1e-12)") == "τ of mode 2 switching on"
    assert quantity_name("mlp: plateau L_1 (rank 2)") == "mlp: plateau L_1 (rank 2)"
    assert quantity_name("switch-on time t_2") == "switch-on time t_2"


# ----------------------------------------------------------------------------- --set over every parameter
SET_CASES = [
    (name, key, value)
    for name in sorted(REGISTRY)
    for key, value in REGISTRY[name].Params().model_dump(mode="json").items()
]


@pytest.mark.parametrize("name,key,value", SET_CASES, ids=[f"{n}.{k}" for n, k, _ in SET_CASES])
def test_set_accepts_every_listed_parameter_and_validates_its_type(name, key, value, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'experiment = "{name}"\n')
    if value is not None:  # (TOML has no null: an optional parameter's default None cannot be written)
        _, _, params = load_config(cfg, parse_set([f"{key}={toml_value(value)}"]))
        assert params.model_dump(mode="json")[key] == value
        _, _, params = load_config(cfg, parse_set([f"params.{key}={toml_value(value)}"]))
        assert params.model_dump(mode="json")[key] == value
    for bad in ("{bogus = 1}", "not-a-valid-value"):
        with pytest.raises(ConfigError, match=f"params.{key}"):
            load_config(cfg, parse_set([f"{key}={bad}"]))


def test_set_on_the_command_line(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        'experiment = "lv-staircase"\n[params]\n'
        + "\n".join(f"{k} = {toml_value(v)}" for k, v in REGISTRY["lv-staircase"].tiny.items())
        + "\n"
    )
    r = runner.invoke(app, ["run", str(cfg), "--set", "n_modes=abc", "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "params.n_modes" in r.output
    r = runner.invoke(app, ["run", str(cfg), "--set", "nonsense=1", "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "nonsense" in r.output and "unknown key" in r.output
    r = runner.invoke(app, ["demo", "--set", "width=abc"])
    assert r.exit_code == 2 and "params.width" in r.output
    r = runner.invoke(app, ["demo", "--set", "experiment=lv-staircase"])
    assert r.exit_code == 2
    out = tmp_path / "run"
    r = runner.invoke(
        app, ["run", str(cfg), "--set", "eps=[1e-2, 1e-4]", "--set", "seed=2", "--out", str(out), "--json"]
    )
    assert r.exit_code == 0, r.output
    res = json.loads((out / "results.json").read_text())
    assert res["config"]["params"]["eps"] == [1e-2, 1e-4] and res["seed"] == 2


def test_version_and_sweep_module_import_no_dask():
    code = (
        "import sys; import nqf.app._sweep._cli, nqf.app._sweep._execute, nqf.app._sweep._report; "
        "assert 'dask' not in sys.modules and 'distributed' not in sys.modules and 'torch' not in sys.modules; "
        "from nqf.app._cli import app; from typer.testing import CliRunner; "
        "r = CliRunner().invoke(app, ['--version']); assert r.exit_code == 0; "
        "assert 'dask' not in sys.modules and 'distributed' not in sys.modules, 'dask imported'"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_sweep_without_dask_is_one_clear_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)
    cfg = tmp_path / "c.toml"
    cfg.write_text('experiment = "lv-staircase"\n')
    r = runner.invoke(
        app, ["sweep", str(cfg), "--grid", "eps=1e-3", "--scheduler", "local", "--out", str(tmp_path / "s")]
    )
    assert r.exit_code == 2
    assert r.output.strip().count("\n") == 0 and "pip install 'nqf[dask]'" in r.output
    assert not (tmp_path / "s").exists()


# ----------------------------------------------------------------------------- report (planted data)
def test_report_recovers_a_planted_slope_and_band(tmp_path):
    from nqf.app._sweep._report import write_sweep_report
    from nqf.app._sweep._table import build_table, read_table, write_table

    spec = SweepSpec(grid={"eps": [1e-4, 1e-6, 1e-8, 2.0]}, seeds=[0, 1, 2])
    pts = build_points(LV, spec)
    rows, rng = {}, np.random.default_rng(0)
    noise = {}
    for p in pts:
        if not p.valid:
            continue
        e = p.swept["eps"]
        n = rng.normal(0, 0.05)
        noise.setdefault(e, []).append(n)
        checks = [
            {
                "name": f"t_{k} at ε = {e:g} (ζ = {4 / 2 ** (k - 1):g})",
                "predicted": 2 ** (k - 1) / 4 * math.log(1 / e),
                "measured": (2 ** (k - 1) / 4) * math.log(1 / e) + 1.0 + n,
                "relative_error": None,
                "passed": None,
            }
            for k in (1, 2)
        ]
        rows[p.short] = {
            "status": "complete",
            "wall_seconds": 1.0,
            "error_type": None,
            "error": None,
            "checks": checks,
            "metrics": {"x": 1.0},
        }
    doc = build_table(pts, rows, experiment="lv-staircase", base=LV, spec=spec, root=tmp_path)
    assert doc["counts"]["complete"] == 9 and doc["counts"]["pending"] == 3
    write_table(tmp_path, doc)
    assert read_table(tmp_path)["rows"][0]["measured"].keys() == {"t_1", "t_2"}
    write_sweep_report(tmp_path)
    html = (tmp_path / "report.html").read_text()
    assert "<img" in html and "t_k_vs_eps" in html
    from nqf.app._sweep._report import sweep_figures

    (fig,) = sweep_figures(read_table(tmp_path), tmp_path)
    logs = np.log(1 / np.array([1e-4, 1e-6, 1e-8]))
    means = [np.mean(noise[e]) for e in (1e-4, 1e-6, 1e-8)]
    for k, lab in ((1, "t_1"), (2, "t_2")):
        fit = fig["fits"][lab]
        expected = np.polyfit(logs, (2 ** (k - 1) / 4) * logs + 1.0 + np.array(means), 1)[0]
        assert fit["slope"] == pytest.approx(expected, rel=1e-10)
        assert fit["predicted_slope"] == pytest.approx(2 ** (k - 1) / 4, rel=1e-10)
        assert fit["sd_max"] == pytest.approx(max(np.std(noise[e]) for e in noise), rel=1e-10)
    csv_lines = (tmp_path / "sweep.csv").read_text().splitlines()
    assert len(csv_lines) == 13 and csv_lines[0].split(",")[:3] == ["point", "eps", "seed"]
