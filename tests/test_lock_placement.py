"""Files outside the named output (issue 37, class 1): a refused ``--out`` creates nothing anywhere, a symbolic
link to a folder nqf did not write is refused even with ``--force``, and no lock file outlives a run (success,
refusal, failure, Ctrl-C, ``nqf report``, ``nqf sweep``).

Before issue 37: ``ln -s /etc toetc; nqf run demo.toml --out toetc`` created ``/.etc.nqf-lock`` in the root
directory before refusing (the lock was taken beside the resolved path before the folder was checked); the
refusal did not name ``--out`` and invited ``--force``; every run left ``.NAME.nqf-lock`` behind; ``--out
/proc/self/x`` was "being written by another nqf process".
"""

import os

import pytest
from typer.testing import CliRunner

from _hostile import assert_one_line
from helpers import toml_value
from nqf.app._cli import app
from nqf.app._experiments import REGISTRY, Experiment, Outcome, Params, get_experiment, run_experiment
from nqf.app._report import RunDirectoryError, RunDirectoryLockedError, acquire_lock, hold_lock
from nqf.errors import NQFError

get_experiment("demo")  # load the catalogue
runner = CliRunner()


def _cfg(tmp_path):
    exp = REGISTRY["demo"]
    lines = ['experiment = "demo"', "[params]"] + [f"{k} = {toml_value(v)}" for k, v in exp.tiny.items()]
    p = tmp_path / "cfg" / "demo.toml"
    p.parent.mkdir(exist_ok=True)
    p.write_text("\n".join(lines) + "\n")
    return p


def lock_path_of(run):
    """Where the lock of run directory ``run`` lives: ``.NAME.nqf-lock`` beside it (docs/safety.md)."""
    return run.parent / f".{run.name}.nqf-lock"


def _tree(root) -> set[str]:
    """Every path under ``root`` (links not followed)."""
    out = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            out.add(os.path.relpath(os.path.join(dirpath, n), root))
    return out


def _foreign(tmp_path):
    """A folder nqf did not write, outside the working folder (what ``/etc`` is to the issue's example)."""
    etc = tmp_path / "outside" / "etc"
    etc.mkdir(parents=True)
    (etc / "passwd").write_text("root:x:0:0\n")
    (etc / "hosts.d").mkdir()
    return etc


@pytest.mark.parametrize("flags", [[], ["--force"], ["--resume"], ["--force", "--resume"]])
def test_a_link_to_a_folder_nqf_did_not_write_is_refused_and_nothing_is_created(flags, tmp_path):
    etc = _foreign(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    (work / "toetc").symlink_to(etc)
    cfg = _cfg(tmp_path)
    before = _tree(tmp_path)
    res = runner.invoke(app, ["run", str(cfg), "--out", str(work / "toetc"), *flags])
    assert_one_line(res, ["`--out`", "toetc", "symbolic link", str(etc)])
    assert "--force" not in res.output  # not invited: it would turn the folder into a run
    assert _tree(tmp_path) == before


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.isdir("/etc"), reason="the issue's own case, as root")
def test_the_issues_own_case_a_link_to_etc_as_root(tmp_path):
    (tmp_path / "toetc").symlink_to("/etc")
    root_before, etc_before = set(os.listdir("/")), set(os.listdir("/etc"))
    res = runner.invoke(app, ["run", str(_cfg(tmp_path)), "--out", str(tmp_path / "toetc")])
    assert_one_line(res, ["`--out`", "symbolic link", "/etc"])
    assert set(os.listdir("/")) == root_before and set(os.listdir("/etc")) == etc_before
    assert sorted(os.listdir(tmp_path)) == ["cfg", "toetc"]


@pytest.mark.parametrize("kind", ["run", "analyze"])
def test_an_existing_folder_refused_gets_no_lock_beside_it(kind, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    cfg = _cfg(tmp_path)
    before = _tree(tmp_path)
    if kind == "run":
        res = runner.invoke(app, ["run", str(cfg), "--out", str(out)])
    else:
        res = runner.invoke(app, ["analyze", "--data", "iris", "--steps", "50", "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert "`--out`" in res.output.splitlines()[-1] and "mine" in res.output
    assert _tree(tmp_path) == before


def test_out_in_proc_is_refused_as_uncreatable_not_as_locked(tmp_path):
    res = runner.invoke(app, ["run", str(_cfg(tmp_path)), "--out", "/proc/self/nqf-run"])
    assert_one_line(res, ["`--out`", "cannot create"])
    assert "another nqf process" not in res.output


# ------------------------------------------------------------------ no lock file outlives a run


class _P(Params):
    mode: str = "ok"


class _Modes(Experiment):
    """Ends as ``mode`` says: ``ok``, ``fail`` (a ValueError after a metric), ``refuse`` (an NQFError before
    anything), ``interrupt`` (Ctrl-C after a metric)."""

    name = "lock-modes"
    description = "test experiment"
    Params = _P

    def run(self, params, ctx, out: Outcome):
        if params.mode == "refuse":
            raise NQFError("refused")
        out.metrics["x"] = 1.0
        if params.mode == "fail":
            raise ValueError("failed")
        if params.mode == "interrupt":
            raise KeyboardInterrupt


@pytest.mark.parametrize(
    "mode, error", [("ok", None), ("fail", ValueError), ("refuse", NQFError), ("interrupt", KeyboardInterrupt)]
)
def test_no_lock_file_remains_after_a_run_however_it_ends(mode, error, tmp_path):
    out = tmp_path / "r"
    if error is None:
        run_experiment(_Modes(), _P(mode=mode), out)
    else:
        with pytest.raises(error):
            run_experiment(_Modes(), _P(mode=mode), out)
    assert not lock_path_of(out).exists()
    assert [p for p in os.listdir(tmp_path) if p.endswith("nqf-lock")] == []
    assert sorted(os.listdir(tmp_path)) in (["r"], [])  # no staging sibling either


def test_no_lock_file_remains_after_the_cli_run_and_report(tmp_path):
    out = tmp_path / "r"
    res = runner.invoke(app, ["run", str(_cfg(tmp_path)), "--out", str(out)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["report", str(out)])
    assert res.exit_code == 0, res.output
    assert sorted(os.listdir(tmp_path)) == ["cfg", "r"]


def test_no_lock_file_remains_after_a_sweep(tmp_path):
    out = tmp_path / "S"
    res = runner.invoke(app, ["sweep", str(_cfg(tmp_path)), "--seeds", "0,1", "--out", str(out), "--workers", "1"])
    assert res.exit_code == 0, res.output
    assert not (out / ".sweep.lock").exists() and sorted(os.listdir(tmp_path)) == ["S", "cfg"]


def test_a_held_lock_is_still_exclusive_and_its_file_goes_on_release(tmp_path):
    """The lock can fail: while held, a second taker is refused as locked; after release the file is gone
    and the lock can be taken again."""
    run = tmp_path / "r"
    held = acquire_lock(run)
    assert lock_path_of(run).is_file()
    with pytest.raises(RunDirectoryLockedError, match="another nqf process"):
        acquire_lock(run)
    held.release()
    held.release()  # idempotent
    assert not lock_path_of(run).exists()
    acquire_lock(run).release()
    with pytest.raises(RunDirectoryError, match="cannot create the lock file"):
        hold_lock("/proc/self/.x.nqf-lock", "busy")


@pytest.mark.parametrize("target", ["empty", "run"])
def test_a_link_to_an_empty_folder_or_a_run_is_written_through(target, tmp_path):
    """What a link may name: a new or empty folder, or a run directory nqf wrote (replaced with --force)."""
    real = tmp_path / "outside" / "real"
    real.mkdir(parents=True)
    cfg = _cfg(tmp_path)
    if target == "run":
        assert runner.invoke(app, ["run", str(cfg), "--out", str(real)]).exit_code == 0
    (tmp_path / "link").symlink_to(real)
    res = runner.invoke(app, ["run", str(cfg), "--out", str(tmp_path / "link"), "--force"])
    assert res.exit_code == 0, res.output
    assert (real / "results.json").is_file() and os.listdir(tmp_path / "outside") == ["real"]


def test_ctrl_c_in_a_real_process_leaves_no_lock_file(tmp_path):
    """SIGINT while `nqf analyze` trains: exit 130, what was finished kept, and no lock file beside it."""
    import signal
    import subprocess
    import sys

    out = tmp_path / "r"
    env = {k: v for k, v in os.environ.items() if k != "NQF_TRACEBACK"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "nqf", "analyze", "--data", "digits", "--model", "mlp:width=64", "--eps", "1e-12",
         "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**env, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert proc.stderr is not None
    for line in proc.stderr:  # wait until the run has started (its directory and lock exist)
        if line.startswith("structure operator"):
            break
    assert lock_path_of(out).exists() or any(p.name.endswith("nqf-lock") for p in tmp_path.iterdir())
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert [p.name for p in tmp_path.iterdir() if "nqf-" in p.name] == []
