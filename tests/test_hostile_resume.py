"""Resume that is clean (issue 23, class 3): a stale sibling directory from another run never changes what
`--resume` produces — foreign siblings are ignored (or the resume is refused), and the arrays are bit-identical
to a clean run."""

import os
import shutil
import signal
import time

import numpy as np
import pytest

from nqf.app._experiments import Experiment, Outcome, Params, run_experiment
from nqf.app._report import ResumeMismatchError, _codec as codec


class _P(Params):
    parts: int = 3
    size: int = 8


class _Parts(Experiment):
    """``parts`` random vectors, each a checkpoint; records which parts were computed."""

    name = "parts-test"
    description = "checkpointed random parts"
    Params = _P
    calls: list = []
    delay: float = 0.0

    def run(self, params, ctx, out: Outcome):
        import torch

        for i in range(params.parts):

            def compute(i=i):
                self.calls.append(i)
                if self.delay:
                    time.sleep(self.delay)
                return torch.rand(params.size, generator=ctx.generator(i), dtype=torch.float64).numpy()

            out.arrays[f"v{i}"] = ctx.checkpoint(f"part{i}", compute)


def _arrays(path):
    with np.load(path / "arrays.npz") as z:
        return {k: z[k].tobytes() for k in z.files}


@pytest.fixture
def clean(tmp_path):
    run_experiment(_Parts(), _P(), tmp_path / "clean", seed=3)
    return _arrays(tmp_path / "clean")


def _forge(src, dst, *, run_id=None, key=None, value=None):
    header, v = codec.loads(src.read_bytes())
    if run_id is not None:
        header["run_id"] = run_id
    if key is not None:
        header["key"] = key
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(codec.dumps(v if value is None else value, header))


def _sibling(tmp_path, run_id="0123456789abcdef"):
    return tmp_path / f".r.nqf-new-{run_id}" / "checkpoints"


def _other(tmp_path, seed=3, **params):
    out = tmp_path / f"other{seed}{sorted(params.items())}"
    run_experiment(_Parts(), _P(**params), out, seed=seed)
    return out / "checkpoints"


# Each case plants a stale sibling `.r.nqf-new-<id>/checkpoints/` before `--resume` of run `r`.
def _forged_values(tmp_path):  # the same identity, tampered values, written by another run id
    _forge(_other(tmp_path) / "part0.ckpt.npz", _sibling(tmp_path) / "part0.ckpt.npz", value=np.zeros(8))


def _another_seed(tmp_path):
    shutil.copytree(_other(tmp_path, seed=4), _sibling(tmp_path))


def _another_config(tmp_path):
    shutil.copytree(_other(tmp_path, size=9), _sibling(tmp_path))


def _renamed_part(tmp_path):  # part1's values under part0's name, run id made to match the sibling
    src = _other(tmp_path) / "part1.ckpt.npz"
    _forge(src, _sibling(tmp_path) / "part0.ckpt.npz", run_id="0123456789abcdef")


def _corrupt(tmp_path):
    d = _sibling(tmp_path)
    d.mkdir(parents=True)
    (d / "part0.ckpt.npz").write_bytes(b"PK\x03\x04 garbage")
    (d / "part1.ckpt.npz").write_bytes(b"")


def _a_pickle(tmp_path):
    d = _sibling(tmp_path)
    d.mkdir(parents=True)
    (d / "part0.ckpt.npz").write_bytes(b"\x80\x04\x95 pickle")
    (d / "part0.pkl").write_bytes(b"\x80\x04\x95 pickle")


def _symlinked_sibling(tmp_path):
    real = tmp_path / "elsewhere"
    _forge(_other(tmp_path) / "part0.ckpt.npz", real / "checkpoints" / "part0.ckpt.npz", value=np.ones(8))
    os.symlink(real, tmp_path / ".r.nqf-new-fedcba9876543210")


def _symlinked_checkpoint(tmp_path):
    target = tmp_path / "outside.ckpt.npz"
    _forge(_other(tmp_path) / "part0.ckpt.npz", target, run_id="0123456789abcdef", value=np.ones(8))
    _sibling(tmp_path).mkdir(parents=True)
    os.symlink(target, _sibling(tmp_path) / "part0.ckpt.npz")


def _another_runs_sibling_name(tmp_path):  # a sibling of another output `q`: never looked at for `r`
    _forge(
        _other(tmp_path) / "part0.ckpt.npz",
        tmp_path / ".q.nqf-new-0123456789abcdef" / "checkpoints" / "part0.ckpt.npz",
        run_id="0123456789abcdef",
        value=np.ones(8),
    )


def _foreign_old_sibling(tmp_path):  # `.r.nqf-old-*` that is not a run: never moved into place
    d = tmp_path / ".r.nqf-old-0123456789abcdef"
    (d / "checkpoints").mkdir(parents=True)
    (d / "checkpoints" / "model.pt").write_bytes(b"x")


STALE = {
    "forged values": _forged_values,
    "another seed": _another_seed,
    "another config": _another_config,
    "a part under another name": _renamed_part,
    "corrupt checkpoints": _corrupt,
    "a pickle": _a_pickle,
    "a symlinked sibling": _symlinked_sibling,
    "a symlinked checkpoint": _symlinked_checkpoint,
    "a sibling of another output": _another_runs_sibling_name,
    "a foreign old sibling": _foreign_old_sibling,
}


@pytest.mark.parametrize("case", list(STALE))
def test_a_stale_sibling_never_changes_what_resume_produces(tmp_path, clean, case):
    STALE[case](tmp_path)
    _Parts.calls = []
    run_experiment(_Parts(), _P(), tmp_path / "r", seed=3, resume=True)
    assert _arrays(tmp_path / "r") == clean
    assert _Parts.calls == [0, 1, 2], "nothing of a foreign sibling was adopted"
    assert not list(tmp_path.glob(".r.nqf-*-*")), "stale siblings are removed"
    if case == "a symlinked sibling":
        assert (tmp_path / "elsewhere" / "checkpoints" / "part0.ckpt.npz").is_file(), "only the link is removed"


@pytest.mark.parametrize("case", ["forged values", "another seed", "corrupt checkpoints", "a symlinked sibling"])
def test_a_stale_sibling_beside_an_interrupted_run(tmp_path, clean, case):
    """The run directory holds an interrupted run; the foreign sibling must not fill in its missing part."""
    _Parts.calls = []
    run_experiment(_Parts(), _P(parts=1), tmp_path / "r", seed=3)  # a run of another config: refused below
    STALE[case](tmp_path)
    with pytest.raises(ResumeMismatchError, match=r"params\.parts 1 \(in the run\) vs 3 \(now\)"):
        run_experiment(_Parts(), _P(), tmp_path / "r", seed=3, resume=True)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_the_killed_writers_own_sibling_is_still_adopted(tmp_path, clean):
    """Positive control: the sibling of a killed run of this very config is reused, and the result is clean."""
    out = tmp_path / "r"
    pid = os.fork()
    if pid == 0:
        try:
            _Parts.delay = 0.3
            run_experiment(_Parts(), _P(), out, seed=3)
        finally:
            os._exit(0)
    deadline = time.time() + 60
    while not list(tmp_path.glob(".r.nqf-new-*/checkpoints/part1.ckpt.npz")) and time.time() < deadline:
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    _forged_values(tmp_path)  # and a forged sibling beside it
    _Parts.calls = []
    run_experiment(_Parts(), _P(), out, seed=3, resume=True)
    assert 0 not in _Parts.calls and 1 not in _Parts.calls, _Parts.calls
    assert _arrays(out) == clean
