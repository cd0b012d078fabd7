"""Paths that are not what they seem, and raw exceptions that must become one line (issue 23, classes 4 and 5).

Every path is checked to be a regular file of bounded size before it is read (a FIFO or ``/dev/zero`` is
never opened, so nothing hangs), archives are refused when their members would inflate past the cap, and
an input fault (an unwritable or impossible ``--out``, running out of memory for the sizes asked for) is
one line naming the input with exit 2; exit 1 is left to nqf's own faults.
"""

import errno
import os
import struct
import threading
import zipfile

import numpy as np
import pytest
from typer.testing import CliRunner

import nqf.app._experiments
from _hostile import assert_one_line
from nqf.app._cli import app
from nqf.app._data import MAX_FILE_BYTES, MAX_INFLATED_BYTES

runner = CliRunner()
ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def _fifo(tmp_path, name):
    """A FIFO with a writer that feeds it junk if anyone opens it (so a regression fails instead of hanging)."""
    p = tmp_path / name
    os.mkfifo(p)

    def feed():
        try:
            with open(p, "wb") as fh:
                fh.write(b"not data\n")
        except OSError:
            pass

    threading.Thread(target=feed, daemon=True).start()
    return p


def _link(tmp_path, name, target):
    p = tmp_path / name
    p.symlink_to(target)
    return p


def _dir(tmp_path, name):
    p = tmp_path / name
    p.mkdir()
    return p


def _text(tmp_path, name, text="this is not an archive\n"):
    p = tmp_path / name
    p.write_text(text)
    return p


def _sparse(tmp_path, name, size):
    p = tmp_path / name
    with open(p, "wb") as fh:
        fh.truncate(size)
    return p


def _forged_zip(tmp_path, name, n_members=2, declared=0xFFFFFFF0):
    """A small zip whose central directory declares members of ``declared`` bytes each (a zip bomb's header)."""
    p = tmp_path / name
    with zipfile.ZipFile(p, "w", zipfile.ZIP_STORED) as zf:
        for i in range(n_members):
            zf.writestr(f"m{i}.npy", b"x" * 16)
    raw = bytearray(p.read_bytes())
    at = 0
    while (at := raw.find(b"PK\x01\x02", at)) >= 0:  # central directory entries: uncompressed size at +24
        raw[at + 24 : at + 28] = struct.pack("<I", declared)
        at += 4
    p.write_bytes(bytes(raw))
    return p


# (id, path builder, substrings of the message besides the file name)
DATA_CASES = [
    ("fifo-csv", lambda t: _fifo(t, "pipe.csv"), ["FIFO"]),
    ("fifo-npz", lambda t: _fifo(t, "pipe.npz"), ["FIFO"]),
    ("fifo-pt", lambda t: _fifo(t, "pipe.pt"), ["FIFO"]),
    ("dev-zero-as-npz", lambda t: _link(t, "zero.npz", "/dev/zero"), ["device"]),
    ("dev-zero-as-csv", lambda t: _link(t, "zero.csv", "/dev/zero"), ["device"]),
    ("dev-zero-as-pt", lambda t: _link(t, "zero.pt", "/dev/zero"), ["device"]),
    ("dev-urandom-as-csv", lambda t: _link(t, "rand.csv", "/dev/urandom"), ["device"]),
    ("directory-as-csv", lambda t: _dir(t, "folder.csv"), ["directory"]),
    ("directory-as-npz", lambda t: _dir(t, "folder.npz"), ["directory"]),
    ("text-named-npz", lambda t: _text(t, "fake.npz"), ["not a valid .npz"]),
    ("text-named-pt", lambda t: _text(t, "fake.pt"), ["torch.load"]),
    ("empty-npz", lambda t: _text(t, "empty.npz", ""), ["not a valid .npz"]),
    ("npz-zip-bomb-header", lambda t: _forged_zip(t, "bomb.npz"), ["inflate", "MiB"]),
    ("pt-zip-bomb-header", lambda t: _forged_zip(t, "bomb.pt"), ["inflate", "MiB"]),
    ("csv-larger-than-the-cap", lambda t: _sparse(t, "huge.csv", MAX_FILE_BYTES + 1), ["MiB"]),
    ("npz-larger-than-the-cap", lambda t: _sparse(t, "huge.npz", MAX_FILE_BYTES + 2**20), ["MiB"]),
]


@pytest.mark.parametrize("case", DATA_CASES, ids=[c[0] for c in DATA_CASES])
def test_data_path_refused_before_it_is_read(case, tmp_path):
    _, build, needles = case
    path = build(tmp_path)
    out = tmp_path / "run"
    res = runner.invoke(app, ["analyze", "--data", str(path), "--target", "y", "--out", str(out)])
    assert_one_line(res, [path.name, "`data`", *needles])
    assert not out.exists()


def test_the_caps_are_documented_constants():
    assert MAX_FILE_BYTES == 2 * 2**30 and MAX_INFLATED_BYTES == 4 * 2**30


def test_a_real_npz_below_the_caps_is_read(tmp_path):
    """The checks can fail: a normal archive passes them."""
    from nqf.app._data import load_dataset

    X = np.random.default_rng(0).normal(size=(10, 2))
    np.savez(tmp_path / "ok.npz", X=X, Y=np.arange(10) % 2)
    assert load_dataset(tmp_path / "ok.npz").n_samples == 10


LONG = "x" * 300

# (id, argv builder, substrings)
OUT_CASES = [
    ("out-name-too-long", lambda t: ["demo", "--out", str(t / LONG)], [LONG[:50]]),
    ("out-under-a-regular-file", lambda t: ["demo", "--out", str(_text(t, "afile.txt") / "run")], ["afile.txt"]),
]


@pytest.mark.parametrize("case", OUT_CASES, ids=[c[0] for c in OUT_CASES])
def test_impossible_out_is_one_line_exit_2(case, tmp_path):
    _, argv, needles = case
    assert_one_line(runner.invoke(app, argv(tmp_path)), needles)


@pytest.mark.skipif(ROOT, reason="root can write into a read-only folder")
def test_unwritable_out_is_one_line_exit_2(tmp_path):
    ro = _dir(tmp_path, "ro")
    ro.chmod(0o555)
    try:
        assert_one_line(runner.invoke(app, ["demo", "--out", str(ro / "run")]), ["ro"])
    finally:
        ro.chmod(0o755)


def _raiser(exc):
    def run_experiment(*args, **kwargs):
        raise exc

    return run_experiment


ALLOC = "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: not enough memory: you tried to allocate 8 TB."

# (id, exception raised where the run starts, exit code, substrings)
RAISED = [
    ("memory-error", MemoryError(), 2, ["out of memory", "MemoryError"]),
    ("torch-alloc-cpu", RuntimeError(ALLOC), 2, ["out of memory", "alloc_cpu"]),
    ("cuda-out-of-memory", RuntimeError("CUDA out of memory. Tried to allocate 20 GiB"), 2, ["out of memory"]),
    ("read-only-fs", OSError(errno.EROFS, "Read-only file system", "/mnt/ro/run"), 2, ["/mnt/ro/run", "Read-only"]),
    ("name-too-long", OSError(errno.ENAMETOOLONG, "File name too long", "/tmp/" + LONG), 2, [LONG[:40]]),
    ("file-exists", FileExistsError(errno.EEXIST, "File exists", "/tmp/there"), 2, ["/tmp/there"]),
    ("is-a-directory", IsADirectoryError(errno.EISDIR, "Is a directory", "/tmp/dir"), 2, ["/tmp/dir"]),
    ("disk-full", OSError(errno.ENOSPC, "No space left on device", "/tmp/full/run"), 2, ["/tmp/full/run"]),
    ("our-own-fault-is-exit-1", ZeroDivisionError("division by zero"), 1, ["ZeroDivisionError", "--debug"]),
    ("a-runtime-error-of-ours-is-exit-1", RuntimeError("shape mismatch inside nqf"), 1, ["RuntimeError"]),
]


@pytest.mark.parametrize("case", RAISED, ids=[c[0] for c in RAISED])
def test_raw_exceptions_become_one_line_with_the_right_exit_code(case, tmp_path, monkeypatch):
    _, exc, code, needles = case
    monkeypatch.setattr(nqf.app._experiments, "run_experiment", _raiser(exc))
    monkeypatch.delenv("NQF_TRACEBACK", raising=False)
    res = runner.invoke(app, ["demo", "--out", str(tmp_path / "run")])
    assert_one_line(res, needles, code=code)


def test_debug_still_shows_the_traceback(tmp_path, monkeypatch):
    monkeypatch.setattr(nqf.app._experiments, "run_experiment", _raiser(MemoryError()))
    res = runner.invoke(app, ["--debug", "demo", "--out", str(tmp_path / "run")])
    assert res.exit_code != 0 and isinstance(res.exception, MemoryError)
