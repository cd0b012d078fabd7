"""The `nqf` command line: every named experiment end to end, configs, flags, run directories."""

import json
from html.parser import HTMLParser

import numpy as np
import pytest
from typer.testing import CliRunner

from helpers import toml_value
from nqf.app._cli import app
from nqf.app._experiments import REGISTRY, get_experiment
from nqf.app._report import validate_results

get_experiment("demo")  # load the catalogue
runner = CliRunner()


def write_config(path, experiment, params=None, **top):
    lines = [f'experiment = "{experiment}"'] + [f"{k} = {toml_value(v)}" for k, v in top.items()]
    lines.append("[params]")
    lines += [f"{k} = {toml_value(v)}" for k, v in (params or {}).items()]
    path.write_text("\n".join(lines) + "\n")
    return path


class _Images(HTMLParser):
    def __init__(self):
        super().__init__()
        self.images, self.tables = [], 0

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs)["src"])
        if tag == "table":
            self.tables += 1


def test_version_and_help():
    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and r.output.startswith("nqf ")
    r = runner.invoke(app, ["--help"])
    assert r.exit_code == 0
    for cmd in ("demo", "run", "list", "report"):
        assert cmd in r.output


def test_list_names_every_experiment():
    r = runner.invoke(app, ["list"])
    assert r.exit_code == 0
    for name, exp in REGISTRY.items():
        assert name in r.output and exp.description in r.output
    data = json.loads(runner.invoke(app, ["list", "--json"]).output)
    assert set(data) == set(REGISTRY)
    assert {n: d["description"] for n, d in data.items()} == {n: e.description for n, e in REGISTRY.items()}


def test_catalogue_agrees_with_the_experiments():
    """`nqf list` reads only the catalogue: every entry names the module defining the experiment, whose class
    declares the catalogue's description; a class that disagrees is refused at registration."""
    from nqf.app._experiments import CATALOG, Experiment, describe, register
    from nqf.errors import InvalidParameterError

    assert set(CATALOG) <= set(REGISTRY)
    for name, entry in CATALOG.items():
        exp = get_experiment(name)
        assert type(exp).__module__ == entry.qualified_module and type(exp).name == name
        assert type(exp).description == entry.description == describe()[name]
    r = runner.invoke(app, ["list"])
    assert [line.split()[0] for line in r.output.splitlines()] == sorted(CATALOG)

    class Impostor(Experiment):
        name = "demo"
        description = "something else"

    with pytest.raises(InvalidParameterError, match="demo"):
        register(Impostor)
    assert type(REGISTRY["demo"]).__name__ == "Demo"
    with pytest.raises(InvalidParameterError, match="built-in"):
        del REGISTRY["demo"]


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_experiment_end_to_end(name, tmp_path):
    exp = REGISTRY[name]
    cfg = write_config(tmp_path / "c.toml", name, exp.tiny, seed=3)
    out = tmp_path / "run"
    r = runner.invoke(app, ["run", str(cfg), "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.output)
    res = validate_results(out)
    assert res.status == "complete" and res.experiment == name and res.seed == 3
    assert summary["experiment"] == name
    assert res.figures, "every experiment draws at least one figure"
    for files in res.figures.values():
        assert (out / files["png"]).stat().st_size > 0 and (out / files["svg"]).stat().st_size > 0
    html = (out / "report.html").read_text()
    parser = _Images()
    parser.feed(html)
    assert len(parser.images) == len(res.figures)
    assert all(src.startswith("data:image/png;base64,") for src in parser.images)
    assert parser.tables >= 1
    if res.arrays:
        with np.load(out / res.arrays) as z:
            assert len(z.files) > 0
    # nqf report rebuilds the same report from the saved results
    (out / "report.html").unlink()
    r = runner.invoke(app, ["report", str(out)])
    assert r.exit_code == 0, r.output
    assert (out / "report.html").read_text() == html


def _bad(tmp_path, text):
    p = tmp_path / "bad.toml"
    p.write_text(text)
    r = runner.invoke(app, ["run", str(p), "--out", str(tmp_path / "o")])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1, r.output
    assert not (tmp_path / "o").exists()
    return lines[0]


def test_bad_configs_one_line_exit_2(tmp_path):
    assert "unknown key" in _bad(tmp_path, 'experiment = "demo"\nsede = 1\n')
    assert "params.widht: unknown key" in _bad(tmp_path, 'experiment = "demo"\n[params]\nwidht = 3\n')
    line = _bad(tmp_path, 'experiment = "demo"\n[params]\nwidth = "wide"\n')
    assert "params.width" in line and "integer" in line and "'wide'" in line
    line = _bad(tmp_path, 'experiment = "demo"\n[params]\neps = -1.0\n')
    assert "params.eps" in line and "greater than 0" in line and "-1.0" in line
    line = _bad(tmp_path, 'experiment = "demo"\n[params]\nsingular_values = [1.0, 1.0]\n')
    assert "params.singular_values" in line and "distinct" in line
    line = _bad(tmp_path, 'experiment = "lv-staircase"\n[params]\neps = [1e-4, 2.0]\n')
    assert "params.eps" in line and "(0, 1)" in line
    assert "unknown experiment 'nope'" in _bad(tmp_path, 'experiment = "nope"\n')
    assert "not valid TOML" in _bad(tmp_path, 'experiment = "demo\n')
    assert "experiment: required key is missing" in _bad(tmp_path, "seed = 1\n")
    r = runner.invoke(app, ["run", str(tmp_path / "missing.toml")])
    assert r.exit_code == 2 and "does not exist" in r.output


def test_bad_flags_exit_2(tmp_path):
    assert runner.invoke(app, ["run", "--bogus"]).exit_code == 2
    assert runner.invoke(app, ["demo", "--seed", "-1"]).exit_code == 2
    r = runner.invoke(app, ["demo", "--device", "tpu", "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "--device" in r.output


def test_cuda_flag_without_cuda(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    r = runner.invoke(app, ["demo", "--device", "cuda", "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "CUDA is not available" in r.output


def test_existing_run_directory_needs_force(tmp_path):
    exp = REGISTRY["demo"]
    cfg = write_config(tmp_path / "c.toml", "demo", exp.tiny)
    out = tmp_path / "run"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    r = runner.invoke(app, ["run", str(cfg), "--out", str(out)])
    assert r.exit_code == 2 and "--force" in r.output
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    r = runner.invoke(app, ["run", str(cfg), "--out", str(out), "--force"])
    assert r.exit_code == 0, r.output
    assert (out / "keep.txt").read_text() == "precious"
    assert (out / "results.json").exists()


def test_seed_reproducible_bit_for_bit(tmp_path):
    exp = REGISTRY["demo"]
    cfg = write_config(tmp_path / "c.toml", "demo", exp.tiny)
    for d in ("a", "b"):
        assert runner.invoke(app, ["run", str(cfg), "--out", str(tmp_path / d), "--seed", "7"]).exit_code == 0
    with np.load(tmp_path / "a" / "arrays.npz") as za, np.load(tmp_path / "b" / "arrays.npz") as zb:
        assert za.files == zb.files
        for k in za.files:
            assert np.array_equal(za[k], zb[k], equal_nan=True), k
    a = json.loads((tmp_path / "a" / "results.json").read_text())
    b = json.loads((tmp_path / "b" / "results.json").read_text())
    assert a["checks"] == b["checks"] and a["metrics"] == b["metrics"] and a["seed"] == 7


def test_report_of_a_non_run_directory(tmp_path):
    r = runner.invoke(app, ["report", str(tmp_path)])
    assert r.exit_code == 2 and "no results.json" in r.output


def test_ctrl_c_exits_130_keeps_finished_parts_and_quotes_the_resume_hint(tmp_path, monkeypatch):
    exp = REGISTRY["lv-staircase"]
    cfg = write_config(tmp_path / "my config.toml", "lv-staircase", exp.tiny)
    out = tmp_path / "run dir; rm -rf x"
    orig = type(exp).run

    def interrupted(self, params, ctx, out_):
        """Ctrl-C after the first checkpoint."""
        real, done = ctx.checkpoint, []

        def checkpoint(key, compute):
            if done:
                raise KeyboardInterrupt
            done.append(key)
            return real(key, compute)

        ctx.checkpoint = checkpoint
        return orig(self, params, ctx, out_)

    monkeypatch.setattr(type(exp), "run", interrupted)
    r = runner.invoke(app, ["run", str(cfg), "--out", str(out)])
    assert r.exit_code == 130, r.output
    import shlex

    assert f"--out {shlex.quote(str(out))} --resume" in r.output
    assert f"nqf run {shlex.quote(str(cfg))}" in r.output
    res = validate_results(out)
    assert res.status == "interrupted" and len(list((out / "checkpoints").iterdir())) == 1
    monkeypatch.setattr(type(exp), "run", orig)
    r = runner.invoke(app, ["run", str(cfg), "--out", str(out), "--resume"])
    assert r.exit_code == 0, r.output
    assert validate_results(out).status == "complete"


def test_unexpected_errors_exit_1_in_one_line_and_debug_shows_the_traceback(tmp_path, monkeypatch):
    exp = REGISTRY["lv-staircase"]
    cfg = write_config(tmp_path / "c.toml", "lv-staircase", exp.tiny)

    def broken(self, params, ctx, out_):
        raise RuntimeError("a bug\nover two lines")

    monkeypatch.setattr(type(exp), "run", broken)
    monkeypatch.delenv("NQF_TRACEBACK", raising=False)
    r = runner.invoke(app, ["run", str(cfg), "--out", str(tmp_path / "a")])
    assert r.exit_code == 1 and "Traceback" not in r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "RuntimeError: a bug over two lines" in lines[0]
    assert "--debug" in lines[0]
    assert validate_results(tmp_path / "a").status == "failed"
    r = runner.invoke(app, ["--debug", "run", str(cfg), "--out", str(tmp_path / "b")])
    assert isinstance(r.exception, RuntimeError)
    monkeypatch.setenv("NQF_TRACEBACK", "1")
    r = runner.invoke(app, ["run", str(cfg), "--out", str(tmp_path / "c")])
    assert isinstance(r.exception, RuntimeError)


def test_library_errors_exit_2(tmp_path, monkeypatch):
    from nqf.errors import DivergenceError

    exp = REGISTRY["lv-staircase"]
    cfg = write_config(tmp_path / "c.toml", "lv-staircase", exp.tiny)

    def diverges(self, params, ctx, out_):
        raise DivergenceError("diverged at step 3: lower `lr`")

    monkeypatch.setattr(type(exp), "run", diverges)
    r = runner.invoke(app, ["run", str(cfg), "--out", str(tmp_path / "a")])
    assert r.exit_code == 2 and "Traceback" not in r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "`lr`" in lines[0]
