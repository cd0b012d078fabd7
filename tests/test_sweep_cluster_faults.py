"""`nqf sweep` on a real Dask scheduler with two worker processes (issue 23, class 7).

The scheduler, the two workers and the `nqf sweep` client are separate processes started here on 127.0.0.1,
each in its own working directory.  The sweep folder is given *relative* to the client's directory: the points
must land there (not in a worker's directory); killing the client never loses a finished point from
``sweep.json``; after the scheduler dies, points complete on disk are complete; a rerun finishes only what is
missing; every point is bit-identical to ``nqf run`` of the same config.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from helpers import toml_value
from nqf.app._experiments import REGISTRY, get_experiment

pytest.importorskip("distributed")
get_experiment("demo")

_ENV = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
_BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_config(path, eps_values):
    params = dict(REGISTRY["lv-staircase"].tiny)
    lines = ['experiment = "lv-staircase"', "seed = 1", "[params]"]
    lines += [f"{k} = {toml_value(v)}" for k, v in params.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


class Cluster:
    """A `dask scheduler` and two `dask worker` processes, each in its own directory under ``tmp``."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.port = _free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.scheduler = None
        self.workers: list[subprocess.Popen] = []

    def _spawn(self, name, args):
        cwd = self.tmp / name
        cwd.mkdir(exist_ok=True)
        log = open(cwd / "log.txt", "ab")  # noqa: SIM115 - closed with the process
        return subprocess.Popen(args, cwd=cwd, env=_ENV, stdout=log, stderr=log, start_new_session=True)

    def start_scheduler(self):
        self.scheduler = self._spawn(
            "scheduler",
            [str(_BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", str(self.port), "--no-dashboard"],
        )

    def start_worker(self, i):
        w = self._spawn(
            f"worker{i}",
            [str(_BIN / "dask"), "worker", self.address, "--nthreads", "1", "--nworkers", "1", "--no-dashboard"],
        )
        self.workers.append(w)
        return w

    def wait_ready(self, n_workers, timeout=120):
        from distributed import Client

        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                with Client(self.address, timeout="5s") as c:
                    if len(c.scheduler_info()["workers"]) >= n_workers:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise AssertionError("the test cluster did not start")

    def stop(self):
        for p in [*self.workers, self.scheduler]:
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


@pytest.fixture
def cluster(tmp_path):
    cl = Cluster(tmp_path)
    cl.start_scheduler()
    cl.start_worker(0)
    cl.start_worker(1)
    try:
        cl.wait_ready(2)
        yield cl
    finally:
        cl.stop()


def _sweep_args(cfg, eps, address, out="S"):
    return [
        sys.executable,
        "-m",
        "nqf.app._cli",
        "sweep",
        str(cfg),
        "--grid",
        "eps=" + ",".join(str(e) for e in eps),
        "--scheduler",
        address,
        "--out",
        out,
        "--json",
    ]


def _rows(root):
    return {r["point"]: r for r in json.loads((root / "sweep.json").read_text())["rows"]}


def _complete(root):
    return {p for p, r in _rows(root).items() if r["status"] == "complete"}


def _on_disk(root):
    out = set()
    for d in (root / "points").iterdir() if (root / "points").is_dir() else []:
        try:
            if json.loads((d / "results.json").read_text())["status"] == "complete":
                out.add(d.name)
        except (OSError, ValueError):
            pass
    return out


def _assert_bit_identical(point, ref):
    a, b = (json.loads((d / "results.json").read_text()) for d in (point, ref))
    assert a["config"] == b["config"] and a["checks"] == b["checks"] and a["metrics"] == b["metrics"]
    with np.load(point / "arrays.npz") as za, np.load(ref / "arrays.npz") as zb:
        assert sorted(za.files) == sorted(zb.files) and za.files
        assert all(za[k].tobytes() == zb[k].tobytes() for k in za.files)


def _client(cluster, cfg, eps):
    cwd = cluster.tmp / "client"
    cwd.mkdir(exist_ok=True)
    return subprocess.Popen(
        _sweep_args(cfg, eps, cluster.address),
        cwd=cwd,
        env=_ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def _wait(cond, timeout=300, proc=None):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return True
        if proc is not None and proc.poll() is not None:
            return cond()
        time.sleep(0.1)
    return False


def test_relative_sweep_folder_on_a_real_cluster_lands_in_the_client_directory(cluster):
    """Fast variant (default suite): two points, relative --out, the client in its own directory."""
    cfg = _write_config(cluster.tmp / "lv.toml", None)
    eps = [1e-3, 1e-4]
    p = _client(cluster, cfg, eps)
    out, err = p.communicate(timeout=400)
    root = cluster.tmp / "client" / "S"
    assert p.returncode == 0, err.decode()[-2000:]
    assert "Traceback" not in err.decode()
    assert len(_on_disk(root)) == 2 and _complete(root) == _on_disk(root)
    for i in (0, 1):  # nothing was written into the workers' own directories
        assert not (cluster.tmp / f"worker{i}" / "S").exists()
    # a rerun reuses both points: nothing recomputed, files untouched
    before = {q: q.stat().st_mtime_ns for q in (root / "points").rglob("*") if q.is_file()}
    p = _client(cluster, cfg, eps)
    out, err = p.communicate(timeout=400)
    assert p.returncode == 0, err.decode()[-2000:]
    assert json.loads(out)["counts"]["reused"] == 2
    assert {q: q.stat().st_mtime_ns for q in (root / "points").rglob("*") if q.is_file()} == before


@pytest.mark.slow
def test_worker_client_and_scheduler_killed(cluster, tmp_path):
    """A worker killed mid-sweep, the client killed, then the scheduler killed: sweep.json never forgets a
    finished point; a rerun finishes only the missing points, each bit-identical to `nqf run`."""
    cfg = _write_config(cluster.tmp / "lv.toml", None)
    eps = [1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8]
    root = cluster.tmp / "client" / "S"
    # 1. a worker killed mid-sweep: its point is rerun elsewhere (a fresh worker joins)
    p = _client(cluster, cfg, eps)
    assert _wait(lambda: (root / "sweep.json").exists(), proc=p)
    os.killpg(cluster.workers[0].pid, signal.SIGKILL)
    cluster.start_worker(2)
    # 2. the client killed once a point is finished
    assert _wait(lambda: len(_complete(root)) >= 1, proc=p)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    finished = _complete(root)
    assert finished and finished <= _on_disk(root), "sweep.json lists only points complete on disk"
    # 3. a rerun, then the scheduler killed after another point finished
    p = _client(cluster, cfg, eps)
    assert _wait(lambda: len(_on_disk(root)) > len(finished), proc=p)
    os.killpg(cluster.scheduler.pid, signal.SIGKILL)
    out, err = p.communicate(timeout=300)
    assert p.returncode in (0, 2, 3), err.decode()[-2000:]  # finished, some points not, or the scheduler lost
    assert "Traceback" not in err.decode()
    if p.returncode == 2:
        assert "--scheduler" in err.decode() and "rerun" in err.decode()
    after = _complete(root)
    assert finished <= after, "a finished point is never forgotten"
    assert _on_disk(root) <= after, "a point complete on disk is recorded as complete, not failed"
    # 4. a fresh cluster: the rerun finishes only what is missing
    cluster.stop()
    fresh = Cluster(tmp_path / "fresh")
    (tmp_path / "fresh").mkdir()
    fresh.start_scheduler()
    fresh.start_worker(0)
    fresh.start_worker(1)
    try:
        fresh.wait_ready(2)
        fresh.tmp = cluster.tmp
        p = _client(fresh, cfg, eps)
        out, err = p.communicate(timeout=600)
    finally:
        fresh.stop()
    assert p.returncode == 0, err.decode()[-2000:]
    doc = json.loads(out)
    assert doc["counts"]["complete"] == len(eps) and doc["counts"]["reused"] == len(after)
    # 5. each point bit-identical to `nqf run` of the same config
    row = doc["rows"][0]
    recorded = json.loads((root / row["directory"] / "results.json").read_text())["config"]
    ref_cfg = tmp_path / "ref.toml"
    lines = ['experiment = "lv-staircase"', "seed = 1", "[params]"]
    lines += [f"{k} = {toml_value(v)}" for k, v in recorded["params"].items()]
    ref_cfg.write_text("\n".join(lines) + "\n")
    r = subprocess.run(
        [sys.executable, "-m", "nqf.app._cli", "run", str(ref_cfg), "--out", str(tmp_path / "ref"), "--json"],
        env=_ENV,
        capture_output=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    _assert_bit_identical(root / row["directory"], tmp_path / "ref")
