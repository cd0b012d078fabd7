"""Run directories you can trust (issue 12): no pickle, no mixed runs, all or nothing, one writer, a safe report."""

import json
import os
import pickle
import random
import signal
import stat
import sys
import time
import zipfile
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from nqf.app._cli import app
from nqf.app._experiments import REGISTRY, Check, Experiment, Outcome, Params, Table, get_experiment, run_experiment
from nqf.app._report import (
    CheckpointError,
    ResumeMismatchError,
    RunDirectory,
    RunDirectoryLockedError,
    _codec as codec,
    new_figure,
    validate_results,
    verify_run,
)
from nqf.dynamics import Trajectory

get_experiment("demo")
runner = CliRunner()


# --------------------------------------------------------------------------- a quick experiment
class _P(Params):
    parts: int = 3
    size: int = 20


class _Quick(Experiment):
    """Checkpoints ``parts`` trajectories, draws two figures, saves arrays; `delay` seconds per part."""

    name = "quick-test"
    description = "test experiment"
    Params = _P
    calls: list = []
    delay: float = 0.0
    interrupt_at: int = -1

    def run(self, params, ctx, out: Outcome):
        for i in range(params.parts):
            if i == self.interrupt_at:
                raise KeyboardInterrupt

            def compute(i=i):
                self.calls.append(i)
                if self.delay:
                    time.sleep(self.delay)
                g = ctx.generator(i)
                t = torch.arange(params.size, dtype=torch.float64)
                return Trajectory(
                    t=t,
                    loss=torch.rand(params.size, generator=g, dtype=torch.float64),
                    step=t.long(),
                    info={"part": i, "nan": float("nan"), "tup": (1, "a")},
                )

            tr = ctx.checkpoint(f"part{i}", compute)
            out.metrics[f"loss{i}"] = float(tr.loss.sum())
            out.arrays[f"loss{i}"] = tr.loss.numpy()
            out.checks.append(Check(f"part {i}", 1.0, 1.0, 0.1))
        out.tables.append(Table("t", ["a"], [[1]]))
        for name in ("one", "two"):
            fig, ax = new_figure()
            ax.plot([0, 1], [0, float(len(out.metrics))])
            out.figures[name] = fig


def _run(out, **kw):
    exp = _Quick()
    params = kw.pop("params", _P())
    return run_experiment(exp, params, out, **kw)


def _write_config(path, name="lv-staircase", **top):
    exp = REGISTRY[name]
    lines = [f'experiment = "{name}"'] + [f"{k} = {json.dumps(v)}" for k, v in top.items()] + ["[params]"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in exp.tiny.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


# --------------------------------------------------------------------------- 1. no pickle
class _Plant:
    def __init__(self, target):
        self.target = target

    def __reduce__(self):
        return (Path.write_text, (Path(self.target), "pwned"))


def test_planted_pickle_checkpoint_is_refused_and_never_runs(tmp_path):
    out = tmp_path / "r"
    _run(out)
    marker = tmp_path / "PWNED"
    payload = pickle.dumps(_Plant(marker))
    # an old-style pickle checkpoint, and a pickle disguised under the checkpoint name
    (out / "checkpoints" / "part0.pkl").write_bytes(payload)
    with pytest.raises(ResumeMismatchError, match="pickle"):
        _run(out, resume=True)
    assert not marker.exists()
    (out / "checkpoints" / "part0.pkl").unlink()
    (out / "checkpoints" / "part1.ckpt.npz").write_bytes(payload)
    with pytest.raises(ResumeMismatchError, match="part1"):
        _run(out, resume=True)
    assert not marker.exists()
    # an npz whose array is an object array (would need pickle to load)
    np.savez(
        out / "checkpoints" / "part1.ckpt.npz",
        __nqf__=np.frombuffer(b"{}", np.uint8),
        a0=np.array([_Plant(marker)], dtype=object),
    )
    with pytest.raises(ResumeMismatchError):
        _run(out, resume=True)
    assert not marker.exists()
    # the run directory (old results) is untouched by refused resumes
    assert verify_run(out) == []


def test_planted_pickle_through_the_cli(tmp_path):
    cfg = _write_config(tmp_path / "c.toml")
    out = tmp_path / "run"
    assert runner.invoke(app, ["run", str(cfg), "--out", str(out)]).exit_code == 0
    marker = tmp_path / "PWNED"
    name = sorted((out / "checkpoints").iterdir())[0].name
    (out / "checkpoints" / name).write_bytes(pickle.dumps(_Plant(marker)))
    r = runner.invoke(app, ["run", str(cfg), "--out", str(out), "--resume"])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert len([ln for ln in r.output.splitlines() if ln.strip()]) == 1
    assert not marker.exists()


def test_codec_round_trip_and_allow_list():
    value = {
        "traj": Trajectory(t=torch.arange(3.0), loss=torch.tensor([1.0, float("nan"), -float("inf")])),
        "ints": [1, -2, 2**70],
        "f": (0.1, float("inf")),
        3: np.float32(2.5),
        "dtype": torch.float32,
        "arr": np.arange(6, dtype=np.int16).reshape(2, 3),
        "b": np.bool_(True),
        "none": None,
    }
    header, back = codec.loads(codec.dumps(value, {"key": "k"}))
    assert header["key"] == "k" and header["format"] == codec.CHECKPOINT_FORMAT
    assert torch.equal(back["traj"].t, value["traj"].t) and back["traj"].loss[1].isnan()
    assert back["ints"] == [1, -2, 2**70] and back["f"] == (0.1, float("inf")) and back[3] == np.float32(2.5)
    assert back["dtype"] is torch.float32 and back["arr"].dtype == np.int16 and back["none"] is None
    with pytest.raises(CheckpointError, match="not checkpointable"):
        codec.dumps({"x": object()}, {})
    with pytest.raises(CheckpointError, match="dtype object"):
        codec.dumps(np.array([object()]), {})
    # a file naming a class outside the allow-list is refused
    blob = json.dumps({"format": codec.CHECKPOINT_FORMAT, "value": {"$obj": "os.system", "state": {}}}).encode()
    import io

    buf = io.BytesIO()
    np.savez(buf, __nqf__=np.frombuffer(blob, np.uint8))
    with pytest.raises(CheckpointError, match="allow-list"):
        codec.loads(buf.getvalue())


# --------------------------------------------------------------------------- 2. resume cannot mix runs
def test_resume_refuses_a_changed_config_or_seed(tmp_path):
    out = tmp_path / "r"
    _Quick.interrupt_at = 2
    try:
        with pytest.raises(KeyboardInterrupt):
            _run(out, seed=1)
    finally:
        _Quick.interrupt_at = -1
    assert validate_results(out).status == "interrupted"
    with pytest.raises(ResumeMismatchError, match=r"params\.size 20 \(in the run\) vs 21 \(now\)"):
        _run(out, seed=1, resume=True, params=_P(size=21))
    with pytest.raises(ResumeMismatchError, match=r"seed 1 \(in the run\) vs 2 \(now\)"):
        _run(out, seed=2, resume=True)
    # a checkpoint from another run planted among the right ones is refused too
    other = tmp_path / "other"
    _run(other, seed=5)
    (out / "checkpoints" / "part0.ckpt.npz").write_bytes((other / "checkpoints" / "part0.ckpt.npz").read_bytes())
    (out / "results.json").unlink()
    with pytest.raises(ResumeMismatchError, match="checkpoints/part0.ckpt.npz.*seed 5"):
        _run(out, seed=1, resume=True)


def test_resume_with_a_changed_config_or_seed_through_the_cli(tmp_path):
    cfg = _write_config(tmp_path / "c.toml", seed=3)
    out = tmp_path / "run"
    assert runner.invoke(app, ["run", str(cfg), "--out", str(out)]).exit_code == 0
    r = runner.invoke(app, ["run", str(cfg), "--out", str(out), "--resume", "--seed", "4"])
    assert r.exit_code == 2 and "seed 3 (in the run) vs 4 (now)" in r.output, r.output
    r = runner.invoke(app, ["run", str(cfg), "--out", str(out), "--resume", "--set", "ratio=0.4"])
    assert r.exit_code == 2 and "params.ratio 0.5 (in the run) vs 0.4 (now)" in r.output, r.output
    res = json.loads((out / "results.json").read_text())
    r = runner.invoke(app, ["run", str(cfg), "--out", str(out), "--resume", "--json"])
    assert r.exit_code == 0, r.output
    again = json.loads((out / "results.json").read_text())
    assert again["checks"] == res["checks"] and again["metrics"] == res["metrics"]
    assert again["run_id"] != res["run_id"] and again["config_hash"] == res["config_hash"]


def test_interrupt_then_resume_is_bit_identical(tmp_path):
    full = _run(tmp_path / "full", seed=4)
    _Quick.interrupt_at = 1
    try:
        with pytest.raises(KeyboardInterrupt):
            _run(tmp_path / "part", seed=4)
    finally:
        _Quick.interrupt_at = -1
    _Quick.calls = []
    res = _run(tmp_path / "part", seed=4, resume=True)
    assert _Quick.calls == [1, 2], "part 0 is reused from its checkpoint"
    assert res["metrics"] == full["metrics"] and res["checks"] == full["checks"]
    with np.load(tmp_path / "full" / "arrays.npz") as a, np.load(tmp_path / "part" / "arrays.npz") as b:
        assert a.files == b.files and all(np.array_equal(a[k], b[k]) for k in a.files)


# --------------------------------------------------------------------------- 3. all or nothing
def _ids(path):
    from nqf.app._report._rundir import read_run_ids

    return read_run_ids(path)


def test_run_id_is_in_every_file(tmp_path):
    out = tmp_path / "r"
    res = _run(out)
    ids = _ids(out)
    assert set(ids) >= {
        "results.json",
        "arrays.npz",
        "report.html",
        "figures/one.png",
        "figures/one.svg",
        "figures/two.png",
        "figures/two.svg",
    }
    assert set(ids.values()) == {res["run_id"]}
    assert verify_run(out) == []
    # a figure from another run is detected
    other = tmp_path / "o"
    _run(other)
    (out / "figures" / "two.png").write_bytes((other / "figures" / "two.png").read_bytes())
    assert any("figures/two.png" in p for p in verify_run(out))


def test_force_replaces_the_run_keeps_foreign_files_and_leaves_no_siblings(tmp_path):
    out = tmp_path / "r"
    first = _run(out)
    (out / "notes.txt").write_text("mine")
    (out / "mine").mkdir()
    (out / "mine" / "a.txt").write_text("a")
    (out / "figures" / "stale.png").write_bytes(b"old figure of the first run")
    second = _run(out, force=True, params=_P(parts=2))
    assert second["run_id"] != first["run_id"]
    assert (out / "notes.txt").read_text() == "mine" and (out / "mine" / "a.txt").read_text() == "a"
    assert not (out / "figures" / "stale.png").exists(), "run outputs of the old run are replaced as a whole"
    assert not (out / "checkpoints" / "part2.ckpt.npz").exists()
    assert verify_run(out) == []
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".r.nqf-") and "lock" not in p.name] == []


def test_permissions_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        _run(tmp_path / "a")
        os.umask(0o077)
        _run(tmp_path / "b")
    finally:
        os.umask(old)
    for name, fmode, dmode in (("a", 0o644, 0o755), ("b", 0o600, 0o700)):
        root = tmp_path / name
        assert stat.S_IMODE(root.stat().st_mode) == dmode
        for p in root.rglob("*"):
            want = dmode if p.is_dir() else fmode
            assert stat.S_IMODE(p.stat().st_mode) == want, (p, oct(p.stat().st_mode))


def _fork_loop(out, params, n_runs, seed=0):
    """Child: `nqf run --force` over and over (through the CLI, the test experiment registered)."""
    pid = os.fork()
    if pid:
        return pid
    code = 0
    try:
        REGISTRY["quick-test"] = _Quick()
        cfg = Path(str(out) + ".toml")
        for _ in range(n_runs):
            r = runner.invoke(app, ["run", str(cfg), "--out", str(out), "--force", "--seed", str(seed)])
            if r.exit_code != 0:
                code = 3
    except BaseException:  # noqa: BLE001
        code = 4
    os._exit(code)


def _sigkill_rounds(tmp_path, kills, rng):
    out = tmp_path / "run"
    Path(str(out) + ".toml").write_text('experiment = "quick-test"\n[params]\nparts = 3\nsize = 400\n')
    REGISTRY["quick-test"] = _Quick()
    try:
        assert runner.invoke(app, ["run", str(out) + ".toml", "--out", str(out)]).exit_code == 0
    finally:
        del REGISTRY["quick-test"]
    # how long one run takes here, to spread the kills over whole runs
    t0 = time.perf_counter()
    pid = _fork_loop(out, None, 1)
    os.waitpid(pid, 0)
    one = time.perf_counter() - t0
    seen = {json.loads((out / "results.json").read_text())["run_id"]}
    for _ in range(kills):
        pid = _fork_loop(out, None, 1000)
        time.sleep(rng.uniform(0.0, 2.5 * one))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        problems = verify_run(out)
        assert problems == [], problems
        assert validate_results(out).status == "complete"
        seen.add(json.loads((out / "results.json").read_text())["run_id"])
    # the next writer cleans up what the killed ones left
    pid = _fork_loop(out, None, 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert verify_run(out) == []
    assert [p.name for p in tmp_path.iterdir() if ".nqf-new-" in p.name or ".nqf-old-" in p.name] == []
    return seen


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_sigkill_during_force_leaves_one_complete_run(tmp_path):
    seen = _sigkill_rounds(tmp_path, 5, random.Random(12))
    assert len(seen) >= 2, "some runs must have completed between kills"


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_sigkill_20_times_during_force(tmp_path):
    seen = _sigkill_rounds(tmp_path, 20, random.Random(2024))
    assert len(seen) >= 3


@pytest.mark.slow
def test_sigkill_the_real_cli_process(tmp_path):
    """The same with the installed `nqf` command in a subprocess (each start imports torch)."""
    import subprocess

    cfg = _write_config(tmp_path / "c.toml")
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "nqf.app._cli", "run", str(cfg), "--out", str(out), "--force", "--threads", "1"]
    assert subprocess.run(cmd, capture_output=True).returncode == 0
    t0 = time.perf_counter()
    subprocess.run(cmd, capture_output=True, check=True)
    one = time.perf_counter() - t0
    rng = random.Random(7)
    for _ in range(8):
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.3 * one, 1.1 * one))
        p.send_signal(signal.SIGKILL)
        p.wait()
        assert verify_run(out) == []


def _killed_at(out, where: str, **kw):
    """Child: a --force run that SIGKILLs itself at a chosen point of the commit."""
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0)
        return
    from nqf.app._report import _rundir as rundir

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    try:
        if where == "after-exchange":
            orig = rundir._exchange
            rundir._exchange = lambda a, b: (orig(a, b), die())[0]
        elif where.startswith("fallback"):
            rundir._exchange = lambda a, b: False
            real_rename = os.rename
            count = {"n": 0}

            def rename(a, b):
                real_rename(a, b)
                count["n"] += 1
                if (where == "fallback-between" and count["n"] == 1) or (where == "fallback-after" and count["n"] == 2):
                    die()

            rundir.os.rename = rename
        _run(out, force=True, **kw)
    finally:
        os._exit(0)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.parametrize("where", ["after-exchange", "fallback-between", "fallback-after"])
def test_kill_inside_the_commit(tmp_path, where):
    out = tmp_path / "r"
    old = _run(out)["run_id"]
    _killed_at(out, where, params=_P(parts=2))
    if where == "fallback-between":
        # only without renameat2: the old run sits beside the directory until the next writer puts it back
        assert not out.exists() and list(tmp_path.glob(".r.nqf-old-*"))
        with pytest.raises(RunDirectoryLockedError):
            with RunDirectory(out, force=True):
                RunDirectory(out, force=True)  # the first one restored it
        assert json.loads((out / "results.json").read_text())["run_id"] == old
    else:
        new = json.loads((out / "results.json").read_text())["run_id"]
        assert new != old and len(validate_results(out).checks) == 2
        assert list(tmp_path.glob(".r.nqf-*-*")), "the old run is left beside it"
    assert verify_run(out) == []
    _run(out, force=True)
    assert verify_run(out) == [] and not list(tmp_path.glob(".r.nqf-*-*"))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_two_concurrent_writers_one_fails_at_once_with_the_lock_message(tmp_path):
    out = tmp_path / "run"
    Path(str(out) + ".toml").write_text('experiment = "quick-test"\n[params]\nparts = 3\n')
    pid = os.fork()
    if pid == 0:  # child: a slow run
        code = 0
        try:
            REGISTRY["quick-test"] = _Quick()
            _Quick.delay = 0.5
            r = runner.invoke(app, ["run", str(out) + ".toml", "--out", str(out)])
            code = r.exit_code
        except BaseException:  # noqa: BLE001
            code = 4
        os._exit(code)
    deadline = time.time() + 60
    while not list(tmp_path.glob(".run.nqf-new-*")) and time.time() < deadline:
        time.sleep(0.02)
    REGISTRY["quick-test"] = _Quick()
    try:
        t0 = time.perf_counter()
        r = runner.invoke(app, ["run", str(out) + ".toml", "--out", str(out), "--force"])
        assert time.perf_counter() - t0 < 5, "the second writer must fail at once, not wait"
    finally:
        del REGISTRY["quick-test"]
    assert r.exit_code == 2 and "being written by another nqf process" in r.output, r.output
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert verify_run(out) == [] and validate_results(out).status == "complete"
    with pytest.raises(RunDirectoryLockedError):
        with RunDirectory(out, force=True):
            RunDirectory(out, force=True)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_resume_after_sigkill_adopts_the_finished_parts(tmp_path):
    out = tmp_path / "r"
    pid = os.fork()
    if pid == 0:
        try:
            _Quick.delay = 0.4
            _run(out, seed=9)
        finally:
            os._exit(0)
    deadline = time.time() + 60
    while not list(tmp_path.glob(".r.nqf-new-*/checkpoints/part1.ckpt.npz")) and time.time() < deadline:
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    assert not out.exists(), "a killed first run leaves no run directory"
    _Quick.calls = []
    res = _run(out, seed=9, resume=True)
    assert 0 not in _Quick.calls and 1 not in _Quick.calls, _Quick.calls
    assert res["metrics"] == _run(tmp_path / "fresh", seed=9)["metrics"]
    assert [p.name for p in tmp_path.iterdir() if ".nqf-new-" in p.name] == []


# --------------------------------------------------------------------------- 4. a safe report
class _Refs(HTMLParser):
    def __init__(self):
        super().__init__()
        self.refs = []

    def handle_starttag(self, tag, attrs):
        for k, v in attrs:
            if k in ("src", "href"):
                self.refs.append(v)


def test_report_embeds_only_images_inside_the_run(tmp_path):
    out = tmp_path / "r"
    _run(out)
    outside = tmp_path / "outside.png"
    secret = b"\x89PNG\r\n\x1a\n" + b"SECRET-OUTSIDE-BYTES" * 10
    outside.write_bytes(secret)
    (tmp_path / "outside.svg").write_text("<svg>SECRET</svg>")
    os.symlink(outside, out / "figures" / "link.png")
    (out / "figures" / "text.png").write_text("not a png")
    data = json.loads((out / "results.json").read_text())
    data["figures"].update(
        {
            "js": {"png": "javascript:alert(1)", "svg": "javascript:alert(1)//.svg"},
            "abs": {"png": str(outside), "svg": str(tmp_path / "outside.svg")},
            "dotdot": {"png": "../outside.png", "svg": "figures/../../outside.svg"},
            "http": {"png": "http://example.com/x.png", "svg": "https://example.com/x.svg"},
            "file": {"png": f"file://{outside}", "svg": "file:///etc/passwd.svg"},
            "data": {"png": "data:image/png;base64,AAAA", "svg": "data:text/html,<script>alert(1)</script>.svg"},
            "symlink": {"png": "figures/link.png", "svg": "figures/link.png"},
            "fake": {"png": "figures/text.png", "svg": "results.json"},
            "<script>alert(1)</script>": {"png": "figures/one.png", "svg": "figures/one.svg"},
        }
    )
    (out / "results.json").write_text(json.dumps(data))
    r = runner.invoke(app, ["report", str(out)])
    assert r.exit_code == 0, r.output
    html = (out / "report.html").read_text()
    p = _Refs()
    p.feed(html)
    embedded = [s for s in p.refs if s.startswith("data:image/png;base64,")]
    links = [s for s in p.refs if not s.startswith("data:image/png;base64,")]
    assert len(embedded) == 3  # one, two and the escaped-name figure: all inside the run
    assert sorted(set(links)) == ["figures/one.svg", "figures/two.svg"]
    import base64

    assert base64.b64encode(secret).decode()[:40] not in html
    for bad in ("javascript:", "http:", "https:", "file:", "../", "outside", "<script>"):
        assert bad not in html, bad
    assert "&lt;script&gt;" in html


def test_checks_with_reasons_validate(tmp_path):
    res = _run(tmp_path / "r")
    assert validate_results(tmp_path / "r").run_id == res["run_id"]
    with zipfile.ZipFile(tmp_path / "r" / "arrays.npz") as zf:
        assert zf.comment.decode() == f"nqf-run-id={res['run_id']}"
