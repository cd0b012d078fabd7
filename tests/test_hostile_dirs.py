"""Never lose a user's file (issue 23, class 1): run and sweep directories are recognised by the marker nqf
writes; `--force` replaces only such a directory and swaps only when the new run completes."""

import errno
import json
import os

import pytest
from typer.testing import CliRunner

from helpers import toml_value
from nqf.app._cli import app
from nqf.app._experiments import REGISTRY, Experiment, Outcome, Params, get_experiment, run_experiment
from nqf.app._report import RunDirectoryExistsError, validate_results

get_experiment("demo")
runner = CliRunner()


def _cfg(tmp_path, name="demo"):
    lines = [f'experiment = "{name}"', "[params]"] + [f"{k} = {toml_value(v)}" for k, v in REGISTRY[name].tiny.items()]
    p = tmp_path / f"{name}.toml"
    p.write_text("\n".join(lines) + "\n")
    return p


def _snapshot(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _one_line_no_traceback(r):
    assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1, r.output


# --------------------------------------------------------------------------- a folder that is not a run
PROJECTS = {
    "checkpoints/model.pt": {"checkpoints/model.pt": b"weights"},
    "figures/paper_fig1.png": {"figures/paper_fig1.png": b"\x89PNG\r\n\x1a\nmine"},
    "report.html": {"report.html": b"<p>my report</p>"},
    "results.json (not nqf)": {"results.json": b'{"accuracy": 0.9}'},
    "arrays.npz": {"arrays.npz": b"PK\x03\x04 mine"},
    "a project": {"checkpoints/model.pt": b"w", "figures/f.png": b"f", "src/main.py": b"print(1)", "README": b"r"},
    "results.json of another schema": {"results.json": b'{"schema": "other/1", "run_id": "x"}'},
    "nqf-run.json of another kind": {"nqf-run.json": b'{"kind": "nqf-sweep"}', "figures/a.png": b"a"},
}


@pytest.mark.parametrize("flag", ["--force", "--resume"])
@pytest.mark.parametrize("case", list(PROJECTS))
def test_force_or_resume_into_a_folder_nqf_did_not_write_is_refused(tmp_path, case, flag):
    cfg = _cfg(tmp_path)
    out = tmp_path / "project"
    for rel, data in PROJECTS[case].items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(data)
    before = _snapshot(out)
    r = runner.invoke(app, ["run", str(cfg), "--out", str(out), flag])
    assert r.exit_code == 2, r.output
    assert "--out" in r.output and str(out) in r.output and "not a run directory" in r.output
    _one_line_no_traceback(r)
    assert _snapshot(out) == before
    assert [p.name for p in tmp_path.iterdir() if ".nqf-new-" in p.name] == []


def test_force_with_out_dot_inside_a_project_is_refused(tmp_path, monkeypatch):
    cfg = _cfg(tmp_path)
    proj = tmp_path / "proj"
    (proj / "checkpoints").mkdir(parents=True)
    (proj / "checkpoints" / "model.pt").write_bytes(b"weights")
    (proj / "figures").mkdir()
    (proj / "figures" / "paper_fig1.png").write_bytes(b"fig")
    before = _snapshot(proj)
    monkeypatch.chdir(proj)
    r = runner.invoke(app, ["run", str(cfg), "--out", ".", "--force"])
    assert r.exit_code == 2 and "`--out` ." in r.output, r.output
    _one_line_no_traceback(r)
    assert _snapshot(proj) == before


def test_force_into_a_folder_with_only_foreign_files_keeps_them(tmp_path):
    """Nothing a run would replace: --force is allowed and every file is carried into the run."""
    cfg = _cfg(tmp_path)
    out = tmp_path / "o"
    (out / "notes").mkdir(parents=True)
    (out / "notes" / "a.txt").write_text("mine")
    (out / "keep.txt").write_text("precious")
    r = runner.invoke(app, ["run", str(cfg), "--out", str(out), "--force"])
    assert r.exit_code == 0, r.output
    assert (out / "keep.txt").read_text() == "precious" and (out / "notes" / "a.txt").read_text() == "mine"
    assert json.loads((out / "nqf-run.json").read_text()) == {"kind": "nqf-run", "version": 1}


def test_force_over_a_run_and_over_a_run_written_before_markers(tmp_path):
    cfg = _cfg(tmp_path)
    out = tmp_path / "r"
    assert runner.invoke(app, ["run", str(cfg), "--out", str(out)]).exit_code == 0
    assert (out / "nqf-run.json").is_file()
    first = validate_results(out).run_id
    r = runner.invoke(app, ["run", str(cfg), "--out", str(out), "--force"])
    assert r.exit_code == 0, r.output
    second = validate_results(out).run_id
    assert second != first
    (out / "nqf-run.json").unlink()  # a run of an nqf without markers: recognised by its results.json
    r = runner.invoke(app, ["run", str(cfg), "--out", str(out), "--force"])
    assert r.exit_code == 0, r.output
    assert validate_results(out).run_id != second and (out / "nqf-run.json").is_file()


# --------------------------------------------------------------------------- --force swaps only on success
class _FP(Params):
    parts: int = 2
    fail: str = ""


class _Fragile(Experiment):
    """Two parts; ``fail`` = "raise" | "disk" | "interrupt" breaks the second one."""

    name = "fragile-test"
    description = "test experiment that fails on demand"
    Params = _FP

    def run(self, params, ctx, out: Outcome):
        import numpy as np

        for i in range(params.parts):
            if i == 1 and params.fail == "raise":
                raise RuntimeError("boom")
            if i == 1 and params.fail == "disk":
                raise OSError(errno.ENOSPC, "No space left on device")
            if i == 1 and params.fail == "interrupt":
                raise KeyboardInterrupt
            v = ctx.checkpoint(f"p{i}", lambda i=i: np.arange(5, dtype=float) * (i + 1))
            out.arrays[f"a{i}"] = v
            out.metrics[f"m{i}"] = float(v.sum())


@pytest.mark.parametrize("fail, raised", [("raise", RuntimeError), ("disk", OSError), ("interrupt", KeyboardInterrupt)])
def test_a_failing_force_run_leaves_the_complete_old_run(tmp_path, fail, raised):
    out = tmp_path / "r"
    run_experiment(_Fragile(), _FP(), out)
    (out / "mine.txt").write_text("mine")
    before = _snapshot(out)
    with pytest.raises(raised) as info:
        run_experiment(_Fragile(), _FP(fail=fail), out, force=True)
    assert info.value.previous_run_kept == out and info.value.run_directory is None
    assert _snapshot(out) == before and validate_results(out).status == "complete"
    assert [p.name for p in tmp_path.iterdir() if ".nqf-new-" in p.name or ".nqf-old-" in p.name] == []


def test_a_malformed_checkpoint_under_force_resume_leaves_the_old_run(tmp_path):
    out = tmp_path / "r"
    run_experiment(_Fragile(), _FP(), out)
    (out / "checkpoints" / "p1.ckpt.npz").write_bytes(b"PK\x03\x04 not a checkpoint")
    before = _snapshot(out)
    with pytest.raises(Exception) as info:  # noqa: PT011 - any refusal: the point is the old run
        run_experiment(_Fragile(), _FP(), out, force=True, resume=True)
    assert "p1.ckpt.npz" in str(info.value)
    assert _snapshot(out) == before


def test_a_failing_force_run_through_the_cli_says_the_old_run_is_kept(tmp_path, monkeypatch):
    out = tmp_path / "r"
    run_experiment(_Fragile(), _FP(), out)
    before = _snapshot(out)
    cfg = tmp_path / "f.toml"
    cfg.write_text('experiment = "fragile-test"\n[params]\nfail = "disk"\n')
    monkeypatch.setitem(REGISTRY, "fragile-test", _Fragile())  # not left behind for the catalogue test
    r = runner.invoke(app, ["run", str(cfg), "--out", str(out), "--force"])
    assert r.exit_code == 2, r.output  # a full disk: the environment, named in one line (not an nqf bug)
    assert "previous run is kept" in r.output and str(out) in r.output, r.output
    _one_line_no_traceback(r)
    assert _snapshot(out) == before


def test_run_directory_api_refuses_with_the_path(tmp_path):
    from nqf.app._report import RunDirectory

    out = tmp_path / "x"
    (out / "figures").mkdir(parents=True)
    (out / "figures" / "mine.png").write_bytes(b"m")
    with pytest.raises(RunDirectoryExistsError, match=r"`--out` .*x is not a run directory .* figures"):
        RunDirectory(out, force=True)
    assert (out / "figures" / "mine.png").read_bytes() == b"m"


# --------------------------------------------------------------------------- sweep folders
SWEEP_FOLDERS = {
    "report.html and sweep.csv": {"report.html": b"<p>mine</p>", "sweep.csv": b"a,b\n1,2\n"},
    "a run directory": {"nqf-run.json": b'{"kind": "nqf-run", "version": 1}', "results.json": b"{}"},
    "sweep.json not of nqf": {"sweep.json": b'{"rows": []}'},
    "a project": {"points/readme.txt": b"mine", "figures/x.png": b"x"},
    "a marker of another kind": {"nqf-sweep.json": b'{"kind": "other"}', "sweep.csv": b"x"},
    "sweep.json nested 100 000 deep": {"sweep.json": b"[" * 100_000 + b"]" * 100_000, "sweep.csv": b"x"},
    "sweep.json a list": {"sweep.json": b"[1, 2]"},
}


@pytest.mark.parametrize("case", list(SWEEP_FOLDERS))
def test_sweep_into_a_folder_that_is_not_a_sweep_is_refused(tmp_path, case):
    cfg = _cfg(tmp_path, "lv-staircase")
    out = tmp_path / "S"
    for rel, data in SWEEP_FOLDERS[case].items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(data)
    before = _snapshot(out)
    r = runner.invoke(app, ["sweep", str(cfg), "--grid", "eps=1e-3,1e-4", "--out", str(out), "--workers", "1"])
    assert r.exit_code == 2, r.output
    assert "--out" in r.output and str(out) in r.output and "not a sweep directory" in r.output
    _one_line_no_traceback(r)
    assert _snapshot(out) == before


def test_sweep_out_is_a_file(tmp_path):
    cfg = _cfg(tmp_path, "lv-staircase")
    f = tmp_path / "S"
    f.write_text("mine")
    r = runner.invoke(app, ["sweep", str(cfg), "--grid", "eps=1e-3,1e-4", "--out", str(f), "--workers", "1"])
    assert r.exit_code == 2 and "--out" in r.output and "not a directory" in r.output, r.output
    _one_line_no_traceback(r)
    assert f.read_text() == "mine"


def test_sweep_directories_are_marked_and_reusable(tmp_path):
    from nqf.app._sweep._table import SWEEP_MARKER, is_sweep_directory, mark_sweep_directory

    root = tmp_path / "S"
    root.mkdir()
    assert not is_sweep_directory(root)
    mark_sweep_directory(root)
    assert is_sweep_directory(root) and json.loads((root / SWEEP_MARKER).read_text())["kind"] == "nqf-sweep"
    (root / SWEEP_MARKER).unlink()
    (root / "sweep.json").write_text(json.dumps({"schema": "nqf.sweep/1", "rows": []}))
    assert is_sweep_directory(root), "a sweep written before markers is still a sweep"
    (root / "sweep.json").unlink()
    os.symlink(tmp_path / "elsewhere.json", root / SWEEP_MARKER)
    (tmp_path / "elsewhere.json").write_text(json.dumps({"kind": "nqf-sweep"}))
    assert not is_sweep_directory(root), "a marker that is a symbolic link is not nqf's"
