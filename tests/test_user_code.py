"""The user's own code (issue 37, class 5): what a model file's import, factory or forward does wrong is one
line naming the model, exit 2, no traceback and no run directory (``nqf._usercode``).

Each case is a model file on iris (D = 4, C = 3).  Before issue 37: ``sys.exit(0)`` in forward ended
``nqf analyze`` with exit 0 and no output; in-place, integer, random, recursive and ``meta`` forwards gave
torch's exception with exit 1; a detached output was blamed on "a ReLU or another kink", a NaN output on
"`A` must be finite"; a model file that changed the working directory was "not found"; a sleeping
forward or a non-daemon thread hung the run.
"""

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from _hostile import assert_one_line
from nqf._usercode import alive_foreign_threads, probe_forward, time_budget, users_code
from nqf.app._cli import app
from nqf.errors import InvalidParameterError, ModelCodeError

runner = CliRunner()
HEAD = "import os, random, sys, threading, time\nimport numpy as np\nimport torch\nfrom torch import nn\n\n"


def _forward(body: str, init: str = "") -> str:
    """A model file whose module (``self.a``: 4 → 16, tanh, ``self.b``: 16 → 3) runs ``body`` in forward."""
    return (
        HEAD + "class M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.a = nn.Linear(4, 16)\n        self.b = nn.Linear(16, 3, bias=False)\n"
        f"{init}    def forward(self, x):\n{body}\n\ndef make():\n    return M()\n"
    )


OUT = "        return self.b(torch.tanh(self.a(x)))"

# (id, model file text, substrings of the one line besides the file name)
CASES = [
    ("forward-sys-exit-0", _forward("        sys.exit(0)"), ["the forward", "sys.exit(0)"]),
    ("forward-raise-systemexit", _forward("        raise SystemExit('done')"), ["sys.exit('done')"]),
    ("forward-mul_-input", _forward("        x.mul_(2.0)\n" + OUT), ["modifies its input in place"]),
    ("forward-setitem-input", _forward("        x[0] = 0.0\n" + OUT), ["in place"]),
    ("forward-returns-long", _forward(OUT + ".round().long()"), ["int64", "floating-point"]),
    ("forward-returns-bool", _forward(OUT + " > 0"), ["bool"]),
    ("forward-torch-randn", _forward("        x = x + torch.randn_like(x)\n" + OUT), ["random numbers"]),
    ("forward-numpy-random", _forward("        x = x * float(np.random.rand())\n" + OUT), ["random numbers"]),
    ("forward-python-random", _forward("        x = x * random.random()\n" + OUT), ["random numbers"]),
    ("forward-functional-dropout", _forward("        x = nn.functional.dropout(x, 0.5, True)\n" + OUT), ["random"]),
    ("forward-recursion", _forward("        return self.forward(x)"), ["RecursionError", "the forward"]),
    ("forward-raises-keyerror", _forward("        return {}['logits']"), ["the forward", "KeyError"]),
    ("forward-wrong-layer-size", _forward("        return self.b(self.a(torch.cat([x, x], 1)))"), ["shapes"]),
    ("forward-returns-nan", _forward(OUT + " * float('nan')"), ["NaN or infinite"]),
    ("forward-returns-inf", _forward(OUT + " / 0.0"), ["NaN or infinite"]),
    ("forward-detach", _forward(OUT + ".detach()"), ["does not depend", "parameters"]),
    ("forward-no-grad", _forward("        with torch.no_grad():\n    " + OUT), ["does not depend"]),
    (
        "forward-via-tolist",
        _forward(OUT.replace("return ", "y = ") + "\n        return torch.tensor(y.tolist())"),
        ["does not depend"],
    ),  # fmt: skip
    ("meta-device", _forward(OUT, "        self.to_empty(device='meta')\n"), ["meta device", "a.weight"]),
    ("meta-buffer", _forward(OUT, "        self.register_buffer('s', torch.empty(3, device='meta'))\n"), ["meta"]),
    ("long-message", _forward("        raise ValueError('x' * 100000)"), ["ValueError"]),
    (
        "unprintable-exception",
        HEAD
        + "class E(Exception):\n    def __str__(self):\n        raise RuntimeError\n\n"
        + _forward("        raise E()").removeprefix(HEAD),
        ["raised E"],
    ),  # fmt: skip
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_misbehaving_forward_is_one_line_naming_the_model(case, tmp_path):
    _, text, needles = case
    path = tmp_path / "usermodel.py"
    path.write_text(text)
    out = tmp_path / "run"
    res = runner.invoke(app, ["analyze", "--data", "iris", "--model", f"{path}:make", "--out", str(out)])
    assert_one_line(res, ["`model`", "usermodel.py", *needles])
    assert len(res.output) < 1000
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["usermodel.py"]


@pytest.mark.parametrize(
    "where, text",
    [
        ("the forward", _forward("        time.sleep(10**6)")),
        ("the forward", _forward("        while True:\n            pass")),
        ("the factory", HEAD + "def make():\n    time.sleep(10**6)\n"),
        ("importing", HEAD + "time.sleep(10**6)\n"),
    ],
    ids=["forward-sleeps", "forward-loops", "factory-sleeps", "import-sleeps"],
)
def test_user_code_past_its_time_budget_is_refused(where, text, tmp_path):
    path = tmp_path / "usermodel.py"
    path.write_text(text)
    res = runner.invoke(  # without the budget the sleep (10⁶ s) outlasts pytest's own timeout: the test fails
        app, ["analyze", "--data", "iris", "--model", f"{path}:make", "--timeout", "1", "--out", str(tmp_path / "r")]
    )
    assert_one_line(res, [where, "usermodel.py", "--timeout 1 s"])
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "1e9"])
def test_a_bad_timeout_is_refused_naming_it(value):
    res = runner.invoke(app, ["analyze", "--data", "iris", "--timeout", value])
    assert_one_line(res, ["--timeout"])


@pytest.mark.parametrize(
    "text",
    [
        HEAD + "os.chdir('/')\n" + _forward(OUT).removeprefix(HEAD),
        _forward(OUT).replace("def make():\n", "def make():\n    os.chdir('/')\n"),
    ],
    ids=["at-import", "in-the-factory"],
)
def test_a_model_file_that_changes_directory_is_found_and_the_directory_restored(text, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "usermodel.py").write_text(text)
    res = runner.invoke(app, ["analyze", "--data", "iris", "--model", "usermodel.py:make", "--list-units"])
    assert res.exit_code == 0, res.output
    assert "16 units" in res.output
    assert os.getcwd() == str(tmp_path)


def test_a_factory_that_leaves_a_non_daemon_thread_is_refused_and_nqf_exits(tmp_path):
    """In a real process: the refusal is one line, exit 2, and the process ends although the thread runs."""
    path = tmp_path / "usermodel.py"
    path.write_text(_forward(OUT, "        threading.Thread(target=time.sleep, args=(10**6,)).start()\n"))
    env = {k: v for k, v in os.environ.items() if k != "NQF_TRACEBACK"}
    r = subprocess.run(
        [sys.executable, "-m", "nqf", "analyze", "--data", "iris", "--model", f"{path}:make", "--out",
         str(tmp_path / "r")],
        capture_output=True, text=True, timeout=120, env={**env, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stdout == "" and len(r.stderr.strip().splitlines()) == 1
    assert "not daemons" in r.stderr and "usermodel.py" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("when", ["exit", "raise"])
def test_user_code_failing_during_the_run_names_the_model(when, tmp_path):
    """The probe passes (the first calls are fine); a later forward call exits or raises during the run."""
    fail = "sys.exit(0)" if when == "exit" else "raise ValueError('boom at call 7')"
    path = tmp_path / "usermodel.py"
    path.write_text(
        _forward(f"        self.n += 1\n        if self.n > 6:\n            {fail}\n" + OUT, "        self.n = 0\n")
    )
    res = runner.invoke(
        app, ["analyze", "--data", "iris", "--model", f"{path}:make", "--eps", "1e-4", "--out", str(tmp_path / "r")]
    )
    last = res.output.strip().splitlines()[-1]  # after the progress lines of the run
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert last.startswith("error: `model`: the model ") and "usermodel.py" in last
    assert ("sys.exit(0)" if when == "exit" else "raised ValueError: boom at call 7") in last


# ------------------------------------------------------------------ the helpers, from the Python API


class _Net(nn.Module):
    def __init__(self, forward):
        super().__init__()
        self.a = nn.Linear(4, 3, dtype=torch.float64)
        self._f = forward

    def forward(self, x):
        return self._f(self, x)


X = np.random.default_rng(0).normal(size=(8, 4))


def test_a_good_forward_passes_the_probe():
    """The probe can pass: a plain forward is returned unchanged, the global generators untouched."""
    net = _Net(lambda s, x: s.a(x))
    state = torch.random.get_rng_state()
    out = probe_forward(net, X, "net")
    assert out.shape == (8, 3) and torch.equal(state, torch.random.get_rng_state())


def test_analyze_from_python_refuses_an_in_place_forward():
    import nqf

    def inplace(s, x):
        x.add_(1.0)
        return s.a(x)

    with pytest.raises(ModelCodeError, match="in place"):
        nqf.analyze(_Net(inplace), X, np.eye(3)[np.arange(8) % 3])


def test_users_code_restores_the_directory_and_keeps_daemon_threads(tmp_path):
    cwd = os.getcwd()
    with users_code("the factory f"):
        os.chdir(tmp_path)
        threading.Thread(target=time.sleep, args=(0.5,), daemon=True).start()
    assert os.getcwd() == cwd and not alive_foreign_threads()


def test_users_code_blames_only_the_users_files():
    """An exception raised outside the user's files propagates as it is (nqf's own bug stays exit 1)."""
    with pytest.raises(ZeroDivisionError):
        with users_code("the model m", [__file__ + ".other"]):
            _ = 1 / 0
    with pytest.raises(ModelCodeError, match="the model m raised ZeroDivisionError"):
        with users_code("the model m", [__file__]):
            _ = 1 / 0


def test_time_budget_checks_its_seconds_and_nests():
    with pytest.raises(InvalidParameterError, match="timeout"):
        with time_budget(-1):
            pass
    with time_budget(30), users_code("outer"), users_code("inner", timeout=0.01):
        time.sleep(0.05)  # the outer budget counts: the inner one does not ring
