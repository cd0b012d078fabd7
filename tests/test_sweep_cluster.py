"""`nqf sweep` on a real Dask LocalCluster (2 worker processes): failures, bit-identity with `nqf run`,
a killed worker, reruns that finish only the missing points."""

import json
import logging
import os
import signal

import numpy as np
import pytest
from typer.testing import CliRunner

from helpers import toml_value
from nqf.app._cli import app
from nqf.app._experiments import REGISTRY, get_experiment
from nqf.app._sweep._execute import execute
from nqf.app._sweep._grid import SweepSpec
from nqf.app._sweep._points import build_points, is_finished, point_dir

distributed = pytest.importorskip("distributed")
get_experiment("demo")
runner = CliRunner()


def _write_config(path, experiment, params, **top):
    lines = [f'experiment = "{experiment}"'] + [f"{k} = {toml_value(v)}" for k, v in top.items()] + ["[params]"]
    path.write_text("\n".join(lines + [f"{k} = {toml_value(v)}" for k, v in params.items()]) + "\n")
    return path


def _mtimes(directory):
    return {p: p.stat().st_mtime_ns for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def cluster():
    import dask

    with dask.config.set({"distributed.scheduler.allowed-failures": 3}):
        cl = distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=logging.ERROR
        )
    client = distributed.Client(cl)
    yield cl, client
    client.close()
    cl.close()


@pytest.fixture(scope="module")
def lv_sweep(cluster, tmp_path_factory):
    """One sweep with valid points, points with invalid values and points that raise at run time."""
    tmp = tmp_path_factory.mktemp("lv")
    cfg = _write_config(tmp / "lv.toml", "lv-staircase", REGISTRY["lv-staircase"].tiny)
    args = [
        "sweep",
        str(cfg),
        "--grid",
        "eps=1e-3,1e-5,2",
        "--grid",
        "device=cpu,tpu",
        "--seeds",
        "1",
        "--scheduler",
        cluster[0].scheduler_address,
        "--out",
        str(tmp / "S"),
        "--json",
    ]
    r = runner.invoke(app, args)
    return tmp / "S", args, r


def test_failed_points_are_recorded_and_the_others_finish(lv_sweep):
    root, _, r = lv_sweep
    assert r.exit_code == 3, r.output  # 3: some points failed
    doc = json.loads(r.output)
    assert doc["counts"] == {"complete": 2, "failed": 4, "interrupted": 0, "pending": 0, "total": 6, "reused": 0}
    quantities = None
    for row in doc["rows"]:
        eps, device = row["swept"]["eps"], row["swept"]["device"]
        if eps == 2:  # invalid parameter value: never run, error names the key
            assert row["status"] == "failed" and row["error_type"] == "ConfigError" and "params.eps" in row["error"]
            assert row["directory"] is None
        elif device == "tpu":  # a valid config that raises when run
            assert row["status"] == "failed" and row["error_type"] not in (None, "ConfigError")
            assert "device" in row["error"] and "tpu" in row["error"]
        else:
            assert row["status"] == "complete" and row["error"] is None
            # every check is a column, named the same at every point (no ε in the name)
            assert len(row["measured"]) == len(row["checks"]) > 0
            assert quantities in (None, set(row["measured"])) and not any("ε =" in q for q in row["measured"])
            quantities = set(row["measured"])
    csv_lines = (root / "sweep.csv").read_text().strip().splitlines()
    assert len(csv_lines) == 7 and csv_lines[0].startswith("point,eps,device,seed,status")
    assert all(f"measured: {q}" in csv_lines[0] for q in quantities)
    html = (root / "report.html").read_text()
    assert html.count("<img") >= 1 and "ConfigError" in html
    pngs = list((root / "figures").glob("*_vs_eps.png"))
    assert pngs and all(p.stat().st_size > 0 for p in pngs)


def test_report_rebuild_and_rerun_reuses_finished_points(lv_sweep):
    root, args, _ = lv_sweep
    (root / "report.html").unlink()
    r = runner.invoke(app, ["report", str(root)])
    assert r.exit_code == 0 and (root / "report.html").is_file()
    dirs = [d for d in (root / "points").iterdir() if d.is_dir() and not d.name.startswith(".")]
    finished = [d for d in dirs if json.loads((d / "results.json").read_text())["status"] == "complete"]
    before = {d: _mtimes(d) for d in finished}
    r = runner.invoke(app, args)
    assert r.exit_code == 3
    doc = json.loads(r.output)
    assert doc["counts"]["reused"] == 2 and doc["counts"]["complete"] == 2
    assert {d: _mtimes(d) for d in finished} == before


def _assert_bit_identical(swept, ref):
    a, b = (json.loads((d / "results.json").read_text()) for d in (swept, ref))
    assert a["config"] == b["config"] and a["status"] == b["status"] == "complete"
    assert a["checks"] == b["checks"] and a["metrics"] == b["metrics"] and a["tables"] == b["tables"]
    with np.load(swept / "arrays.npz") as za, np.load(ref / "arrays.npz") as zb:
        assert sorted(za.files) == sorted(zb.files) and za.files
        for k in za.files:
            assert za[k].dtype == zb[k].dtype and za[k].tobytes() == zb[k].tobytes(), k


def test_point_is_bit_identical_to_nqf_run(lv_sweep, tmp_path):
    root, _, r = lv_sweep
    row = next(row for row in json.loads(r.output)["rows"] if row["status"] == "complete" and row["seed"] == 1)
    recorded = json.loads((root / row["directory"] / "results.json").read_text())["config"]
    assert recorded["params"]["eps"][-1] == row["swept"]["eps"]
    params = dict(REGISTRY["lv-staircase"].tiny, eps=recorded["params"]["eps"])
    cfg = _write_config(tmp_path / "point.toml", "lv-staircase", params, seed=1)
    r = runner.invoke(app, ["run", str(cfg), "--out", str(tmp_path / "ref"), "--json"])
    assert r.exit_code == 0, r.output
    _assert_bit_identical(root / row["directory"], tmp_path / "ref")


@pytest.mark.slow
def test_demo_point_is_bit_identical_to_nqf_run(cluster, tmp_path):
    params = dict(REGISTRY["demo"].tiny)
    cfg = _write_config(tmp_path / "demo.toml", "demo", params)
    r = runner.invoke(
        app,
        [
            "sweep",
            str(cfg),
            "--grid",
            "eps=3e-4",
            "--seeds",
            "5",
            "--scheduler",
            cluster[0].scheduler_address,
            "--out",
            str(tmp_path / "S"),
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    row = json.loads(r.output)["rows"][0]
    ref_cfg = _write_config(tmp_path / "point.toml", "demo", dict(params, eps=3e-4), seed=5)
    r = runner.invoke(app, ["run", str(ref_cfg), "--out", str(tmp_path / "ref"), "--json"])
    assert r.exit_code == 0, r.output
    _assert_bit_identical(tmp_path / "S" / row["directory"], tmp_path / "ref")


def _kill_one_busy_worker(client, killed):
    """on_tick hook: SIGKILL the process of a worker that is running a point (once)."""
    pids = client.run(os.getpid)

    def on_tick(state):
        if killed:
            return
        for addr, keys in client.processing().items():
            if any(str(k).startswith("nqf-point") for k in keys) and addr in pids:
                os.kill(pids[addr], signal.SIGKILL)
                killed.append(addr)
                return

    return on_tick


def _lv_points(eps_values):
    base = {"experiment": "lv-staircase", "params": dict(REGISTRY["lv-staircase"].tiny)}
    return build_points(base, SweepSpec(grid={"eps": eps_values}))


@pytest.mark.slow
def test_killed_worker_is_retried_and_every_point_finishes(cluster, tmp_path):
    _, client = cluster
    client.wait_for_workers(2)
    points = _lv_points([1e-3, 1e-4, 1e-5, 1e-6])
    killed = []
    state = execute(points, tmp_path, client, on_tick=_kill_one_busy_worker(client, killed), poll=0.05)
    assert killed, "no worker was busy to be killed"
    assert [state.rows[p.short]["status"] for p in points] == ["complete"] * 4
    assert all(is_finished(tmp_path, p) for p in points)


def test_killed_worker_without_retries_fails_its_point_and_a_rerun_finishes_only_the_missing(cluster, tmp_path):
    _, client = cluster
    client.wait_for_workers(2)
    client.run_on_scheduler(lambda dask_scheduler: setattr(dask_scheduler, "allowed_failures", 0))
    try:
        points = _lv_points([2e-3, 2e-4, 2e-5])
        killed = []
        state = execute(points, tmp_path, client, on_tick=_kill_one_busy_worker(client, killed), poll=0.05)
    finally:
        client.run_on_scheduler(lambda dask_scheduler: setattr(dask_scheduler, "allowed_failures", 3))
    assert killed
    rows = [state.rows[p.short] for p in points]
    assert all(r["status"] in ("complete", "failed") for r in rows)
    failed = [p for p, r in zip(points, rows, strict=True) if r["status"] == "failed"]
    assert failed and all(state.rows[p.short]["error_type"] == "KilledWorker" for p in failed)
    done = [p for p in points if p not in failed]
    before = {p.short: _mtimes(point_dir(tmp_path, p)) for p in done}
    client.wait_for_workers(2)
    state2 = execute(points, tmp_path, client)
    assert all(state2.rows[p.short]["status"] == "complete" for p in points)
    assert all(state2.rows[p.short]["reused"] for p in done)
    assert not any(state2.rows[p.short]["reused"] for p in failed)
    assert {p.short: _mtimes(point_dir(tmp_path, p)) for p in done} == before


@pytest.mark.slow
def test_acceptance_command_with_a_local_cluster(tmp_path):
    cfg = _write_config(tmp_path / "lv.toml", "lv-staircase", {})
    r = runner.invoke(
        app,
        [
            "sweep",
            str(cfg),
            "--grid",
            "eps=1e-4,1e-6,1e-8,1e-10,1e-12",
            "--seeds",
            "0-3",
            "--scheduler",
            "local",
            "--workers",
            "2",
            "--out",
            str(tmp_path / "S"),
        ],
    )
    assert r.exit_code == 0, r.output
    dirs = [d for d in (tmp_path / "S" / "points").iterdir() if d.is_dir() and not d.name.startswith(".")]
    assert len(dirs) == 20
    assert len((tmp_path / "S" / "sweep.csv").read_text().strip().splitlines()) == 21
