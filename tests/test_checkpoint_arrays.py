"""Checkpoints hold arrays and nqf's own records, never third-party private classes (issue 19, step 4).

The codec refuses an object of a class it does not know (it neither pickles nor introspects it), a file
naming SciPy's ODE interpolants is refused on load, and the one experiment that integrates a
Lotka–Volterra flow with dense output checkpoints what it needs of it as arrays and resumes to the same
numbers without integrating again.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import torch
from scipy.integrate import solve_ivp

from nqf.app._experiments import get_experiment, run_experiment
from nqf.app._report import _codec as codec
from nqf.app._report._codec import CheckpointError
from nqf.reductions import lv


def _dense_solution():
    return solve_ivp(lambda t, y: -y, (0.0, 1.0), [1.0], dense_output=True).sol


def _tree(data: bytes) -> dict:
    z = np.load(io.BytesIO(data), allow_pickle=False)
    try:
        return json.loads(z["__nqf__"].tobytes().decode("utf-8"))["value"]
    finally:
        z.close()


def _tags(tree) -> list[str]:
    if isinstance(tree, list):
        return [t for v in tree for t in _tags(v)]
    if isinstance(tree, dict):
        own = [tree["$obj"]] if "$obj" in tree else []
        return own + [t for v in tree.values() for t in _tags(v)]
    return []


def test_allow_list_names_only_nqf_classes():
    assert all(mod.startswith("nqf.") for mod, _ in codec.ALLOWED_TYPES.values())
    assert not {"OdeSolution", "RkDenseOutput", "RadauDenseOutput", "BdfDenseOutput"} & set(codec.ALLOWED_TYPES)


def test_codec_refuses_an_unknown_class_by_name():
    with pytest.raises(CheckpointError, match=r"value\['sol'\].*scipy\.integrate.*OdeSolution.*not checkpointable"):
        codec.dumps({"sol": _dense_solution()}, {})

    class Opaque:
        def __init__(self):
            self.x = np.zeros(2)

        def __reduce__(self):  # pragma: no cover - must never be called
            raise AssertionError("the codec must not pickle")

    with pytest.raises(CheckpointError, match="Opaque are not checkpointable"):
        codec.dumps([Opaque()], {})


def test_lv_solution_is_stored_without_its_dense_output():
    system = lv.LotkaVolterra(np.array([1.0, 0.5]), np.array([[1.0, 0.2], [0.2, 1.0]]), np.full(2, 1e-6))
    sol = system.flow(40.0, n_points=60)
    with pytest.raises(CheckpointError, match="OdeSolution"):
        codec.dumps(sol, {})
    plain = system.flow(40.0, n_points=60, dense_output=False)
    _, back = codec.loads(codec.dumps(plain, {}))
    assert torch.equal(back.log_z, plain.log_z) and torch.equal(back.t, plain.t)
    torch.testing.assert_close(back.loss, plain.loss, rtol=0, atol=0)


def test_a_file_naming_a_scipy_interpolant_is_refused():
    blob = json.dumps({"format": codec.CHECKPOINT_FORMAT, "value": {"$obj": "OdeSolution", "state": {}}}).encode()
    buf = io.BytesIO()
    np.savez(buf, __nqf__=np.frombuffer(blob, dtype=np.uint8))
    with pytest.raises(CheckpointError, match="allow-list"):
        codec.loads(buf.getvalue())


def test_interacting_modes_checkpoints_arrays_and_resumes_without_integrating(tmp_path, monkeypatch):
    exp = get_experiment("interacting-modes")
    params = exp.Params(**exp.tiny)
    first = run_experiment(exp, params, tmp_path / "r")
    files = sorted((tmp_path / "r" / "checkpoints").iterdir())
    assert len(files) == len(params.eps)
    for p in files:
        tags = _tags(_tree(p.read_bytes()))
        assert tags and set(tags) <= set(codec.ALLOWED_TYPES), tags

    def no_flow(*args, **kwargs):
        raise AssertionError("a resumed run must read the checkpointed flow, not integrate again")

    monkeypatch.setattr(lv.LotkaVolterra, "flow", no_flow)
    again = run_experiment(exp, params, tmp_path / "r", resume=True)
    assert again["status"] == "complete"
    assert [c["measured"] for c in again["checks"]] == [c["measured"] for c in first["checks"]]
    assert again["metrics"] == first["metrics"]
