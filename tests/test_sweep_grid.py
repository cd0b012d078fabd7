"""Sweep specification (grid, zip, seeds, [sweep] table), points and their hashes, `--set` over every parameter."""

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from nqf.cli import app
from nqf.errors import SweepError
from nqf.experiments import REGISTRY, get_experiment
from nqf.experiments.config import ConfigError, apply_overrides, config_hash, load_config, parse_set
from nqf.sweep.grid import SweepSpec, combine, parse_assignments, parse_seeds, parse_values, sweep_from_table
from nqf.sweep.points import build_points, point_dir
from nqf.sweep.table import quantity_name

get_experiment("demo")
runner = CliRunner()


def _toml(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return repr(v)


# ----------------------------------------------------------------------------- parsing
def test_parse_values_reads_toml_and_keeps_brackets_together():
    assert parse_values("1e-4,1e-6") == [1e-4, 1e-6]
    assert parse_values("[2.0, 1.0],[3.0,1.0]") == [[2.0, 1.0], [3.0, 1.0]]
    assert parse_values('tanh,"a,b",3,true') == ["tanh", "a,b", 3, True]
    with pytest.raises(SweepError, match="empty value"):
        parse_values("1,,2", "eps")


@pytest.mark.parametrize("spec,expected", [("0-3", [0, 1, 2, 3]), ("0,3,7", [0, 3, 7]), ("0-2,7,1", [0, 1, 2, 7]),
                                           (5, [5]), ([4, 2], [4, 2]), (" 3 ", [3])])
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


def test_points_hash_their_resolved_config_and_scalar_eps_becomes_a_list(tmp_path):
    spec = SweepSpec(grid={"eps": [1e-3, 1e-6]}, seeds=[0, 1])
    pts = build_points(LV, spec)
    assert len(pts) == 4 and all(p.valid for p in pts)
    assert [p.resolved["params"]["eps"] for p in pts] == [[1e-3], [1e-3], [1e-6], [1e-6]]
    assert [p.seed for p in pts] == [0, 1, 0, 1]
    # the hash is config_hash of the full resolved config (defaults included), independent of how it was written
    exp = REGISTRY["lv-staircase"]
    full = {"experiment": "lv-staircase", "seed": 1, "device": "cpu",
            "params": exp.Params(**dict(LV["params"], eps=[1e-3])).model_dump(mode="json")}
    assert pts[1].hash == config_hash(full)
    assert point_dir(tmp_path, pts[1]) == tmp_path / "points" / config_hash(full)[:12]
    # a default changed explicitly to its own value is the same point; any other change is a new point
    same = build_points(apply_overrides(LV, {"save_points": exp.Params().save_points if "save_points" not in
                                             LV["params"] else LV["params"]["save_points"]}), spec)
    assert [p.hash for p in same] == [p.hash for p in pts]
    changed = build_points(apply_overrides(LV, {"ratio": 0.4}), spec)
    assert not {p.hash for p in changed} & {p.hash for p in pts}


def test_invalid_point_values_are_points_with_an_error_not_exceptions():
    pts = build_points(LV, SweepSpec(grid={"eps": [1e-3, 2.0, "x"]}))
    assert [p.valid for p in pts] == [True, False, False]
    assert "params.eps" in pts[1].error and "(0, 1)" in pts[1].error
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
SET_CASES = [(name, key, value) for name in sorted(REGISTRY)
             for key, value in REGISTRY[name].Params().model_dump(mode="json").items()]


@pytest.mark.parametrize("name,key,value", SET_CASES, ids=[f"{n}.{k}" for n, k, _ in SET_CASES])
def test_set_accepts_every_listed_parameter_and_validates_its_type(name, key, value, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'experiment = "{name}"\n')
    _, _, params = load_config(cfg, parse_set([f"{key}={_toml(value)}"]))
    assert params.model_dump(mode="json")[key] == value
    _, _, params = load_config(cfg, parse_set([f"params.{key}={_toml(value)}"]))
    assert params.model_dump(mode="json")[key] == value
    for bad in ("{bogus = 1}", "not-a-valid-value"):
        with pytest.raises(ConfigError, match=f"params.{key}"):
            load_config(cfg, parse_set([f"{key}={bad}"]))


def test_set_on_the_command_line(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('experiment = "lv-staircase"\n[params]\n' + "\n".join(
        f"{k} = {_toml(v)}" for k, v in REGISTRY["lv-staircase"].tiny.items()) + "\n")
    r = runner.invoke(app, ["run", str(cfg), "--set", "n_modes=abc", "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "params.n_modes" in r.output
    r = runner.invoke(app, ["run", str(cfg), "--set", "nonsense=1", "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "nonsense" in r.output and "unknown key" in r.output
    r = runner.invoke(app, ["demo", "--set", "width=abc"])
    assert r.exit_code == 2 and "params.width" in r.output
    r = runner.invoke(app, ["demo", "--set", "experiment=lv-staircase"])
    assert r.exit_code == 2
    out = tmp_path / "run"
    r = runner.invoke(app, ["run", str(cfg), "--set", "eps=[1e-4]", "--set", "seed=2", "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads((out / "results.json").read_text())
    assert res["config"]["params"]["eps"] == [1e-4] and res["seed"] == 2


def test_version_and_sweep_module_import_no_dask():
    code = ("import sys; import nqf.sweep.cli, nqf.sweep.execute, nqf.sweep.report; "
            "assert 'dask' not in sys.modules and 'distributed' not in sys.modules and 'torch' not in sys.modules; "
            "from nqf.cli import app; from typer.testing import CliRunner; "
            "r = CliRunner().invoke(app, ['--version']); assert r.exit_code == 0; "
            "assert 'dask' not in sys.modules and 'distributed' not in sys.modules, 'dask imported'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_sweep_without_dask_is_one_clear_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)
    cfg = tmp_path / "c.toml"
    cfg.write_text('experiment = "lv-staircase"\n')
    r = runner.invoke(app, ["sweep", str(cfg), "--grid", "eps=1e-3", "--scheduler", "local", "--out",
                            str(tmp_path / "s")])
    assert r.exit_code == 2
    assert r.output.strip().count("\n") == 0 and "pip install 'nqf[dask]'" in r.output
    assert not (tmp_path / "s").exists()
