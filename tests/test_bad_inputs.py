"""A table of bad inputs through the CLI and the public API (issue 12).

Every CLI case must exit with code 2 and print exactly one line, ``error: …``,
naming the parameter, with no traceback.  Every API case must raise an
``NQFError`` subclass whose message names the parameter.  Nothing may hang.
"""

import json
import math
import time

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from helpers import toml_value
from nqf.app._cli import app
from nqf.app._experiments import REGISTRY, get_experiment
from nqf.dynamics import GD, Save
from nqf.errors import NQFError

get_experiment("demo")  # load the catalogue
runner = CliRunner()
F64 = torch.float64


def _config(experiment="demo", params=None, raw_params="", **top):
    """TOML text: the experiment's tiny parameters, overridden by ``params``, plus raw lines."""
    base = dict(REGISTRY[experiment].tiny) if experiment in REGISTRY else {}
    base.update(params or {})
    lines = [f"experiment = {toml_value(experiment)}"] + [f"{k} = {toml_value(v)}" for k, v in top.items()]
    lines.append("[params]")
    lines += [f"{k} = {toml_value(v)}" for k, v in base.items()]
    return "\n".join(lines) + "\n" + raw_params


# (id, config text or None for the default tiny demo, extra CLI args, substring naming the parameter)
CONFIG_CASES = [
    ("seed-true", _config(seed=True), [], "seed"),
    ("seed-2^32", _config(seed=2**32), [], "seed"),
    ("seed-negative", _config(seed=-1), [], "seed"),
    ("seed-float", _config(seed=1.5), [], "seed"),
    ("seed-string", _config(seed="0"), [], "seed"),
    ("device-tpu", _config(device="tpu"), [], "device"),
    ("device-int", _config(device=3), [], "device"),
    ("device-cuda-99", _config(device="cuda:99"), [], "device"),
    ("device-cpu-1", _config(device="cpu:1"), [], "device"),
    ("device-empty", _config(device=""), [], "device"),
    ("experiment-int", "experiment = 3\n", [], "experiment"),
    ("experiment-unknown", 'experiment = "nope"\n', [], "experiment"),
    ("experiment-missing", "seed = 1\n", [], "experiment"),
    ("top-level-unknown-key", _config(sede=1), [], "sede"),
    ("params-not-a-table", 'experiment = "demo"\nparams = 3\n', [], "params"),
    ("params-unknown-key", _config(params={"widht": 3}), [], "params.widht"),
    ("width-bool", _config(params={"width": True}), [], "params.width"),
    ("width-float", _config(params={"width": 4.5}), [], "params.width"),
    ("width-zero", _config(params={"width": 0}), [], "params.width"),
    ("n_samples-bool", _config(params={"n_samples": False}), [], "params.n_samples"),
    ("n_samples-too-small", _config(params={"n_samples": 2}), [], "params.n_samples"),
    ("eps-nan", _config(params={"eps": math.nan}), [], "params.eps"),
    ("eps-inf", _config(params={"eps": math.inf}), [], "params.eps"),
    ("eps-negative", _config(params={"eps": -1.0}), [], "params.eps"),
    ("eps-one", _config(params={"eps": 1.0}), [], "params.eps"),
    ("lr-inf", _config(params={"lr": math.inf}), [], "params.lr"),
    ("lr-nan", _config(params={"lr": math.nan}), [], "params.lr"),
    ("lr-zero", _config(params={"lr": 0.0}), [], "params.lr"),
    ("lr-bool", _config(params={"lr": True}), [], "params.lr"),
    ("t_max-minus-inf", _config(params={"t_max": -math.inf}), [], "params.t_max"),
    ("save_every-zero", _config(params={"save_every": 0}), [], "params.save_every"),
    ("save_every-float", _config(params={"save_every": 1.5}), [], "params.save_every"),
    ("singular_values-bool", _config(params={"singular_values": [1.0, True]}), [], "params.singular_values"),
    ("singular_values-empty", _config(params={"singular_values": []}), [], "params.singular_values"),
    ("singular_values-repeated", _config(params={"singular_values": [1.0, 1.0]}), [], "params.singular_values"),
    ("lv-eps-with-nan", _config("lv-staircase", {"eps": [1e-4, math.nan]}), [], "params.eps"),
    ("lv-eps-single", _config("lv-staircase", {"eps": [1e-4]}), [], "params.eps"),
    ("lv-eps-out-of-range", _config("lv-staircase", {"eps": [1e-4, 2.0]}), [], "params.eps"),
    ("lv-n_modes-zero", _config("lv-staircase", {"n_modes": 0}), [], "params.n_modes"),
    ("power-law-gamma-inf", _config("power-law", {"gamma": math.inf}), [], "params.gamma"),
    ("validity-model-unknown", _config("validity", {"model": "rnn"}), [], "params.model"),
    ("saddles-problem-unknown", _config("saddles", {"problems": ["mlp", "gru"]}), [], "params.problems"),
    ("modules-families-empty", _config("modules-vs-nqf", {"families": []}), [], "params.families"),
    ("interacting-eps-bool", _config("interacting-modes", {"eps": [1e-10, True]}), [], "params.eps"),
    # flags
    ("flag-seed-2^32", _config(), ["--seed", str(2**32)], "--seed"),
    ("flag-seed-negative", _config(), ["--seed", "-1"], "--seed"),
    ("flag-seed-text", _config(), ["--seed", "one"], "--seed"),
    ("flag-device-tpu", _config(), ["--device", "tpu"], "--device"),
    ("flag-device-empty", _config(), ["--device", ""], "--device"),
    ("flag-device-cuda-99", _config(), ["--device", "cuda:99"], "--device"),
    ("flag-threads-zero", _config(), ["--threads", "0"], "--threads"),
    ("flag-set-seed-true", _config(), ["--set", "seed=true"], "seed"),
    ("flag-set-lr-inf", _config(), ["--set", "lr=inf"], "params.lr"),
    ("flag-set-no-equals", _config(), ["--set", "lr"], "--set"),
]

# Cases that need the experiments' own cross-field checks (sizes that cannot work together): each names
# the parameters; listed in the issue.
CROSS_FIELD_CASES = [
    (
        "interacting-n_samples-below-modes",
        _config("interacting-modes", {"n_modes": 6, "n_samples": 3}),
        [],
        "n_samples",
    ),
    ("lv-n_samples-below-modes", _config("lv-staircase", {"n_modes": 6, "n_samples": 3}), [], "n_samples"),
    ("demo-eps-subnormal", _config(params={"eps": 5e-324}), [], "eps"),
    ("demo-lr-diverges", _config(params={"lr": 50.0}), [], "lr"),
]


def _cli_one_line(r, names):
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1, r.output
    assert names in lines[0], (names, lines[0])
    return lines[0]


@pytest.mark.parametrize(
    "case_id, text, args, names", CONFIG_CASES + CROSS_FIELD_CASES, ids=[c[0] for c in CONFIG_CASES + CROSS_FIELD_CASES]
)
def test_bad_config_or_flag(tmp_path, case_id, text, args, names):
    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    out = tmp_path / "out"
    r = runner.invoke(app, ["run", str(cfg), "--out", str(out), *args])
    line = _cli_one_line(r, names)
    assert line.startswith("error:") or "Usage" not in r.output
    if case_id not in {c[0] for c in CROSS_FIELD_CASES}:
        assert not out.exists(), "a refused config must not write a run directory"


# --------------------------------------------------------------------------- files given to the CLI
def _file_cases(tmp_path):
    d = tmp_path / "adir"
    d.mkdir()
    png = tmp_path / "binary.toml"
    png.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    latin = tmp_path / "latin1.toml"
    latin.write_bytes('experiment = "démo"\n'.encode("latin-1"))
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    bad = tmp_path / "bad.toml"
    bad.write_text('experiment = "demo\n')
    return [
        (d, "config file"),
        (png, "config file"),
        (latin, "config file"),
        (tmp_path / "missing.toml", "config file"),
        (empty, "experiment"),
        (bad, "not valid TOML"),
    ]


def test_bad_config_files(tmp_path):
    for path, names in _file_cases(tmp_path):
        r = runner.invoke(app, ["run", str(path), "--out", str(tmp_path / "o")])
        _cli_one_line(r, names)


def test_bad_out_paths(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(_config("lv-staircase"))
    f = tmp_path / "a-file"
    f.write_text("x")
    _cli_one_line(runner.invoke(app, ["run", str(cfg), "--out", str(f)]), "--out")
    d = tmp_path / "full"
    d.mkdir()
    (d / "x").write_text("x")
    _cli_one_line(runner.invoke(app, ["run", str(cfg), "--out", str(d)]), "--force")


def _results_cases(tmp_path):
    """(run directory, substring naming the problem) for broken results.json files."""
    good = {"schema": "nqf.results/2"}
    cases = []

    def make(name, data: bytes | None, names):
        d = tmp_path / name
        d.mkdir()
        if data is not None:
            (d / "results.json").write_bytes(data)
        cases.append((d, names))

    make("none", None, "results.json")
    make("empty", b"", "results.json")
    make("blank", b"  \n", "results.json")
    make("truncated", b'{"schema": "nqf.results/2", "experiment": "de', "results.json")
    make("non-utf8", b'{"schema": "nqf.results/2", "experiment": "d\xe9mo"}', "results.json")
    make("binary", bytes(range(256)), "results.json")
    make("array", b"[1, 2, 3]", "results.json")
    make("old-version", json.dumps({"schema": "nqf.results/1"}).encode(), "schema")
    make("no-version", json.dumps({"experiment": "demo"}).encode(), "schema")
    make("missing-fields", json.dumps(good).encode(), "results.json")
    make("deep", b"[" * 100000 + b"]" * 100000, "results.json")
    d = tmp_path / "dir-as-results"
    (d / "results.json").mkdir(parents=True)
    cases.append((d, "results.json"))
    return cases


def test_report_of_broken_results_files(tmp_path):
    for d, names in _results_cases(tmp_path):
        r = runner.invoke(app, ["report", str(d)])
        _cli_one_line(r, names)
        assert not (d / "report.html").exists()


# --------------------------------------------------------------------------- the public API
def _problem():
    from nqf.structure._mlp import mlp

    g = torch.Generator().manual_seed(0)
    X = torch.randn(12, 3, generator=g, dtype=F64)
    y = torch.sin(X[:, 0]) + 0.5 * X[:, 1]
    op = mlp(X, "tanh")
    W0 = 0.1 * torch.randn(op.p, 4, generator=g, dtype=F64)
    return X, y, op, W0


def _api_cases():
    from nqf.app._experiments import parse_config, run_experiment
    from nqf.app._report import validate_results
    from nqf.app._report._codec import loads
    from nqf.dynamics import Save, as_optimizer, gradient_flow, simulate, train_network
    from nqf.networks._mlp import TwoLayerMLP
    from nqf.reductions.lv import limit

    X, y, op, W0 = _problem()
    M0 = W0 @ W0.T
    net = TwoLayerMLP(3, 4, 1, "tanh").to(F64)
    exp = REGISTRY["lv-staircase"]

    def options(args):
        """The run's option objects, built from the keywords inside the call (their errors name the keyword)."""
        keys = ("lr", "momentum", "weight_decay", "batch_size")
        opt = {k: args.pop(k) for k in keys if k in args}
        every = {"every": args.pop("save_every")} if "save_every" in args else {}
        name = args.pop("optimizer", "gd")
        return lambda: dict(optimizer=as_optimizer(name, **opt), save=Save(**every), **args)

    def sim(**kw):
        args = dict(M0=M0, lr=0.05, steps=5)
        args.update(kw)
        built = options(args)
        return lambda: simulate(op, y, **built())

    def flow(**kw):
        args = dict(M0=M0, t_span=(0.0, 1.0))
        args.update(kw)
        return lambda: gradient_flow(op, y, **args)

    def net_run(**kw):
        args = dict(W0=0.1 * torch.ones(net.units.get_W(net).shape, dtype=F64), lr=0.05, steps=3)
        args.update(kw)
        Xn = args.pop("X", X)
        built = options(args)
        return lambda: train_network(net, net.units, Xn, y, **built())

    return [
        ("simulate-lr-inf", sim(lr=math.inf), "lr"),
        ("simulate-lr-nan", sim(lr=math.nan), "lr"),
        ("simulate-lr-bool", sim(lr=True), "lr"),
        ("simulate-lr-string", sim(lr="0.1"), "lr"),
        ("simulate-lr-negative", sim(lr=-0.1), "lr"),
        ("simulate-lr-tensor-vector", sim(lr=torch.tensor([0.1, 0.2])), "lr"),
        ("simulate-steps-inf", sim(steps=math.inf), "steps"),
        ("simulate-steps-none", sim(steps=None), "steps"),
        ("simulate-steps-float", sim(steps=2.5), "steps"),
        ("simulate-steps-float-integral", sim(steps=10.0), "steps"),
        ("simulate-steps-bool", sim(steps=True), "steps"),
        ("simulate-steps-negative", sim(steps=-1), "steps"),
        ("simulate-divergence_threshold-nan", sim(divergence_threshold=math.nan), "divergence_threshold"),
        ("simulate-divergence_threshold-below-1", sim(divergence_threshold=0.5), "divergence_threshold"),
        ("simulate-weight_decay-nan", sim(weight_decay=math.nan), "weight_decay"),
        ("simulate-weight_decay-negative", sim(weight_decay=-1.0), "weight_decay"),
        ("simulate-momentum-one", sim(momentum=1.0), "momentum"),
        ("simulate-momentum-nan", sim(momentum=math.nan), "momentum"),
        ("simulate-save_every-zero", sim(save_every=0), "save_every"),
        ("simulate-save_every-bool", sim(save_every=True), "save_every"),
        ("simulate-batch_size-bool", sim(optimizer="sgd", batch_size=True), "batch_size"),
        ("simulate-batch_size-too-big", sim(optimizer="sgd", batch_size=1000), "batch_size"),
        ("simulate-M0-nan", sim(M0=torch.full_like(M0, math.nan)), "M0"),
        ("simulate-y-inf", lambda: simulate(op, torch.full_like(y, math.inf), M0=M0, optimizer=GD(0.1), steps=2), "y"),
        ("simulate-diverges-raise", sim(lr=1e3, steps=50, on_divergence="raise"), "lr"),
        ("flow-weight_decay-nan", flow(weight_decay=math.nan), "weight_decay"),
        ("flow-t_span-inf", flow(t_span=(0.0, math.inf)), "t_span"),
        ("flow-t_span-nan", flow(t_span=(0.0, math.nan)), "t_span"),
        ("flow-t_span-reversed", flow(t_span=(1.0, 0.0)), "t_span"),
        ("flow-t_span-scalar", flow(t_span=3.0), "t_span"),
        ("flow-rtol-nan", flow(rtol=math.nan), "rtol"),
        ("flow-atol-negative", flow(atol=-1e-9), "atol"),
        ("flow-max_step-zero", flow(max_step=0.0), "max_step"),
        ("flow-t_eval-nan", flow(t_eval=[0.0, math.nan]), "t_eval"),
        ("network-X-none", net_run(X=None), "X"),
        ("network-X-nan", net_run(X=torch.full((12, 3), math.nan, dtype=F64)), "X"),
        ("network-X-empty", net_run(X=torch.zeros((0, 3), dtype=F64)), "X"),
        ("network-X-scalar", net_run(X=torch.tensor(1.0)), "X"),
        ("network-lr-inf", net_run(lr=math.inf), "lr"),
        ("network-steps-none", net_run(steps=None), "steps"),
        ("network-divergence_threshold-nan", net_run(divergence_threshold=math.nan), "divergence_threshold"),
        ("limit-K-zero", lambda: limit(np.zeros(0), np.zeros((0, 0))), "beta"),
        ("run-seed-bool", lambda: run_experiment(exp, exp.Params(**exp.tiny), "unused-dir", seed=True), "seed"),
        ("run-seed-2^32", lambda: run_experiment(exp, exp.Params(**exp.tiny), "unused-dir", seed=2**32), "seed"),
        ("run-seed-float", lambda: run_experiment(exp, exp.Params(**exp.tiny), "unused-dir", seed=1.0), "seed"),
        ("run-device-tpu", lambda: run_experiment(exp, exp.Params(**exp.tiny), "unused-dir", device="tpu"), "device"),
        ("config-seed-bool", lambda: parse_config({"experiment": "demo", "seed": True}), "seed"),
        ("config-width-bool", lambda: parse_config({"experiment": "demo", "params": {"width": True}}), "width"),
        ("config-eps-nan", lambda: parse_config({"experiment": "demo", "params": {"eps": math.nan}}), "eps"),
        ("results-garbage", lambda: validate_results(_write_tmp(b"\xff\xfe")), "results.json"),
        ("checkpoint-pickle", lambda: loads(b"\x80\x04K\x01.", "checkpoints/x.ckpt.npz"), "checkpoints/x"),
    ]


_TMP = {}


def _write_tmp(data: bytes):
    p = _TMP["dir"] / "results.json"
    p.write_bytes(data)
    return p


def test_api_bad_inputs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _TMP["dir"] = tmp_path
    cases = _api_cases()
    failures = []
    for case_id, call, names in cases:
        t0 = time.perf_counter()
        try:
            call()
        except NQFError as exc:
            if names not in str(exc):
                failures.append(f"{case_id}: message does not name {names!r}: {exc}")
        except Exception as exc:  # noqa: BLE001
            failures.append(f"{case_id}: {type(exc).__name__} is not an NQFError: {exc}")
        else:
            failures.append(f"{case_id}: no error")
        if time.perf_counter() - t0 > 5:
            failures.append(f"{case_id}: took {time.perf_counter() - t0:.1f} s")
    assert not failures, "\n".join(failures)
    assert not (tmp_path / "unused-dir").exists()
    assert len(cases) + len(CONFIG_CASES) + len(CROSS_FIELD_CASES) >= 60


def test_gradient_flow_refuses_in_under_a_second():
    from nqf.dynamics import gradient_flow

    _, y, op, W0 = _problem()
    for kw in (dict(weight_decay=math.nan), dict(t_span=(0.0, math.inf)), dict(t_span=(0.0, 1e308 * 10))):
        args = dict(M0=W0 @ W0.T, t_span=(0.0, 1.0))
        args.update(kw)
        t0 = time.perf_counter()
        with pytest.raises(NQFError):
            gradient_flow(op, y, **args)
        assert time.perf_counter() - t0 < 1.0


def test_numpy_and_tensor_scalars_are_accepted():
    from nqf.dynamics import simulate

    _, y, op, W0 = _problem()
    ref = simulate(op, y, W0=W0, optimizer=GD(0.1), steps=20)
    for lr in (np.float32(0.1), np.float64(0.1), torch.tensor(0.1, dtype=F64)):
        tr = simulate(op, y, W0=W0, optimizer=GD(lr), steps=np.int64(20))
        assert tr.success and len(tr) == len(ref)
    assert torch.equal(simulate(op, y, W0=W0, optimizer=GD(np.float64(0.1)), steps=20).loss, ref.loss)


def test_divergence_message_gives_step_loss_and_a_stable_lr():
    from nqf.dynamics import simulate

    _, y, op, W0 = _problem()
    tr = simulate(op, y, W0=W0, optimizer=GD(40.0), steps=200)
    assert tr.status == -1
    assert "diverged at step" in tr.message and "loss" in tr.message and "lr" in tr.message
    assert "curvature" in tr.message
    stable = float(tr.message.split("try lr = ")[1].rstrip("."))
    assert 0 < stable < 40.0
    again = simulate(op, y, W0=W0, optimizer=GD(stable), steps=200)
    assert again.success, again.message


def test_memory_estimate_refuses_with_a_save_every_that_fits(monkeypatch):
    from nqf._memory import check_saved_memory
    from nqf._validation import ParameterError
    from nqf.dynamics import simulate

    _, y, op, W0 = _problem()
    per = 8 * op.p * op.p
    monkeypatch.setenv("NQF_MEMORY_LIMIT", str(per * 50))
    with pytest.raises(ParameterError, match="save_every") as info:
        simulate(op, y, W0=W0, optimizer=GD(0.01), save=Save(every=1), steps=1000)
    fit = int(str(info.value).split("save_every ≥ ")[1].split(",")[0])
    tr = simulate(op, y, W0=W0, optimizer=GD(0.01), save=Save(every=fit), steps=1000)
    assert tr.success and len(tr) <= 50
    with pytest.raises(ParameterError):
        simulate(op, y, W0=W0, optimizer=GD(0.01), save=Save(every=fit - 1), steps=1000)
    monkeypatch.delenv("NQF_MEMORY_LIMIT")
    assert check_saved_memory(10, 1, 100, limit=10**9) == 1200


_MEMORY_SCRIPT = """
import resource, sys, torch
torch.set_num_threads(1)
from nqf.structure._mlp import mlp
from nqf.dynamics import GD, Save, simulate
F = torch.float64
g = torch.Generator().manual_seed(0)
X = torch.randn(2000, 10, dtype=F, generator=g)
y = torch.tanh(X[:, 0]) + 0.3 * X[:, 1]
grad = sys.argv[1] == "1"
X.requires_grad_(grad)
y.requires_grad_(grad)
op = mlp(X, "tanh")
W0 = (0.1 * torch.randn(op.p, 8, dtype=F, generator=g)).requires_grad_(grad)
tr = simulate(op, y, W0=W0, optimizer=GD(0.05), steps=2000, save=Save(every=100), form=sys.argv[2])
assert tr.success and not tr.loss.requires_grad and (tr.M is None or not tr.M.requires_grad)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


@pytest.mark.parametrize("form", ["order_parameter", "weights"])
def test_requires_grad_inputs_do_not_grow_a_graph(form):
    """Peak memory of a 2000-step simulate with requires_grad inputs stays within 10% of the same run without."""
    import subprocess
    import sys

    peaks = []
    for grad in ("0", "1"):
        r = subprocess.run(
            [sys.executable, "-c", _MEMORY_SCRIPT, grad, form], capture_output=True, text=True, timeout=300
        )
        assert r.returncode == 0, r.stderr
        peaks.append(int(r.stdout.split()[-1]))
    assert peaks[1] <= 1.10 * peaks[0], peaks


def test_inputs_are_detached_and_copied_on_request():
    from nqf._validation import as_tensor

    w = torch.ones(3, requires_grad=True)
    t = as_tensor("w", w)
    assert not t.requires_grad and t.grad_fn is None
    a = np.ones(3)
    c = as_tensor("a", a, copy=True)
    a[0] = 5.0
    assert float(c[0]) == 1.0
    c2 = as_tensor("w", w, copy=True)
    with torch.no_grad():
        w[0] = 7.0
    assert float(c2[0]) == 1.0


def test_unknown_names_are_nqf_errors_and_key_errors():
    """An unknown experiment name: an NQFError that existing ``except KeyError`` still catches, unquoted."""
    from nqf.errors import UnknownNameError

    with pytest.raises(UnknownNameError, match="unknown experiment 'nope'; available: ") as info:
        get_experiment("nope")
    assert isinstance(info.value, KeyError) and isinstance(info.value, NQFError)
    assert str(info.value).startswith("unknown experiment")  # not wrapped in quotes as KeyError would be
