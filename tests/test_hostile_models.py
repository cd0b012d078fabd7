"""Model files that misbehave (issue 23, classes 5 and 6).

A model file or factory that calls ``sys.exit``, prints, raises, returns the wrong thing or has the wrong
output width is reported in one line naming the model (exit 2, no traceback, no run directory); what a
factory prints goes to stderr, so that ``--json`` stays one JSON document; the factory runs once.
"""

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from _hostile import assert_one_line
from nqf.app._cli import app
from nqf.app._study import build_model
from nqf.errors import ModelSpecError

runner = CliRunner()
HEAD = "import sys\nimport torch\nfrom torch import nn\n\n"


def _model(body):
    return HEAD + body


# iris: D = 4 inputs, C = 3 one-hot targets
GOOD = (
    "def make(in_features, n_outputs):\n"
    "    return nn.Sequential(nn.Linear(in_features, 6), nn.Tanh(), nn.Linear(6, n_outputs, bias=False))\n"
)


def _returning(expr):
    """A model file whose module's forward returns ``expr`` (of ``y = self.a(x)``)."""
    return _model(
        "class M(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.a = nn.Linear(4, 3)\n"
        f"    def forward(self, x):\n        y = self.a(x)\n        return {expr}\n\ndef make():\n    return M()\n"
    )


# (id, file text or a builder(tmp_path) -> path, factory name, substrings of the message)
CASES = [
    ("sys-exit-0-at-import", _model("sys.exit(0)\n" + GOOD), "make", ["sys.exit(0)", "importing"]),
    ("sys-exit-3-at-import", _model("sys.exit(3)\n" + GOOD), "make", ["sys.exit(3)"]),
    ("sys-exit-in-factory", _model("def make():\n    sys.exit(0)\n"), "make", ["the factory", "sys.exit(0)"]),
    ("raise-systemexit-text", _model("def make():\n    raise SystemExit('bye')\n"), "make", ["sys.exit('bye')"]),
    ("exit-builtin-in-factory", _model("def make():\n    exit(5)\n"), "make", ["sys.exit(5)"]),
    (
        "one-output-on-three-targets",
        _model("def make(in_features):\n    return nn.Linear(in_features, 1)\n"),
        "make",
        ["output width 1", "3 target"],
    ),
    (
        "five-outputs-on-three-targets",
        _model("def make(in_features):\n    return nn.Sequential(nn.Linear(in_features, 5, bias=False))\n"),
        "make",
        ["output width 5"],
    ),
    (
        "forward-returns-a-tuple",
        _returning("y, x"),
        "make",
        ["tuple", "one tensor"],
    ),
    (
        "forward-returns-a-dict",
        _returning("{'y': y}"),
        "make",
        ["dict"],
    ),
    (
        "factory-returns-a-list",
        _model("def make():\n    return [nn.Linear(4, 3)]\n"),
        "make",
        ["torch.nn.Module", "list"],
    ),
    ("factory-recursion-error", _model("def make():\n    return make()\n"), "make", ["RecursionError"]),
    ("factory-raises-key-error", _model("def make():\n    return {}['rows']\n"), "make", ["KeyError"]),
    ("syntax-error-at-import", "def make(:\n", "make", ["importing", "SyntaxError"]),
    ("no-such-factory", _model(GOOD), "nope", ["'nope'"]),
    ("missing-file", None, "make", ["not found"]),
    ("model-file-is-a-directory", lambda t: (t / "dir.py").mkdir() or t / "dir.py", "make", ["directory"]),
    ("model-file-is-a-fifo", lambda t: os.mkfifo(t / "pipe.py") or t / "pipe.py", "make", ["FIFO"]),
    ("model-file-is-dev-zero", lambda t: (t / "zero.py").symlink_to("/dev/zero") or t / "zero.py", "make", ["device"]),
    ("model-file-over-1-MiB", lambda t: _sparse(t / "big.py", 2**20 + 1), "make", ["MiB"]),
]


def _sparse(p, size):
    with open(p, "wb") as fh:
        fh.truncate(size)
    return p


def _path(tmp_path, text):
    if callable(text):
        return text(tmp_path)
    p = tmp_path / "model_file.py"
    if text is not None:
        p.write_text(text)
    return p


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_misbehaving_model_file_is_one_line_naming_it(case, tmp_path):
    _, text, name, needles = case
    path = _path(tmp_path, text)
    out = tmp_path / "run"
    res = runner.invoke(app, ["analyze", "--data", "iris", "--model", f"{path}:{name}", "--out", str(out)])
    assert_one_line(res, [path.name, *needles])
    assert not out.exists()


def test_a_good_factory_passes_the_same_checks(tmp_path):
    """The checks can fail: a well-formed factory gets through them (--list-units runs nothing)."""
    path = _path(tmp_path, _model(GOOD))
    res = runner.invoke(app, ["analyze", "--data", "iris", "--model", f"{path}:make", "--list-units"])
    assert res.exit_code == 0, res.output


def test_the_factory_is_called_once_for_the_same_file_and_sizes(tmp_path):
    calls = tmp_path / "calls.txt"
    path = _path(
        tmp_path,
        _model(
            f"def make(in_features, n_outputs):\n    open({str(calls)!r}, 'a').write('x')\n" + GOOD.split(":\n", 1)[1]
        ),
    )
    a = build_model(f"{path}:make", 4, 3, seed=0)
    b = build_model(f"{path}:make", 4, 3, seed=0)
    assert calls.read_text() == "x"
    assert a is not b and all((p == q).all() for p, q in zip(a.parameters(), b.parameters(), strict=True))
    build_model(f"{path}:make", 4, 2, seed=0)  # other sizes: built anew
    assert calls.read_text() == "xx"


def test_sys_exit_in_a_real_process_is_exit_2_with_one_line(tmp_path):
    path = _path(tmp_path, _model("sys.exit(0)\n"))
    env = dict(os.environ, OMP_NUM_THREADS="1", NQF_TRACEBACK="")
    env.pop("NQF_TRACEBACK")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "nqf.app._cli",
            "analyze",
            "--data",
            "iris",
            "--model",
            f"{path}:make",
            "--out",
            str(tmp_path / "r"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout, r.stderr)
    assert (
        r.stderr.strip().startswith("error: ")
        and len(r.stderr.strip().splitlines()) == 1
        and "model_file.py" in r.stderr
    )


def test_model_errors_from_the_api_are_model_spec_errors(tmp_path):
    path = _path(tmp_path, _model("def make():\n    sys.exit(0)\n"))
    with pytest.raises(ModelSpecError, match="sys.exit"):
        build_model(f"{path}:make", 4, 3)


@pytest.mark.slow  # a full analysis in a subprocess (~1 min on a shared machine)
def test_a_printing_factory_keeps_json_stdout_one_document_and_runs_once(tmp_path):
    calls = tmp_path / "calls.txt"
    body = (
        "def make(in_features, n_outputs):\n    print('building my model!')\n"
        f"    open({str(calls)!r}, 'a').write('x')\n" + GOOD.split(":\n", 1)[1]
    )
    path = _path(tmp_path, _model(body))
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "nqf.app._cli",
            "analyze",
            "--data",
            "iris",
            "--subset",
            "60",
            "--model",
            f"{path}:make",
            "--steps",
            "200",
            "--out",
            str(tmp_path / "r"),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)  # one JSON document: the factory's print went to stderr
    assert "analysis" in doc and "building my model!" in r.stderr
    assert calls.read_text() == "x"
