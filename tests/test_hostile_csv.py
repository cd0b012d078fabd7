"""CSV files and arrays as people really write them (issue 23, class 8).

Every refusal is one line ``error: …`` naming the file (or the flag), exit 2, no traceback, and no run
directory; every accepted file is read as its author meant it.
"""

import numpy as np
import pytest
from typer.testing import CliRunner

from _hostile import assert_one_line
from nqf.app._cli import app
from nqf.app._data import load_dataset
from nqf.errors import NQFError

runner = CliRunner()


def _rows(n=12, seed=0):
    rng = np.random.default_rng(seed)
    return [
        [f"{a:.6f}", f"{b:.6f}", str(int(c))]
        for a, b, c in zip(rng.normal(size=n), rng.normal(size=n), rng.integers(0, 3, n), strict=True)
    ]


def _csv_text(header, rows):
    return "\n".join([",".join(header), *[",".join(r) for r in rows]]) + "\n"


def _write(tmp_path, name, content):
    p = tmp_path / name
    (p.write_bytes if isinstance(content, bytes) else p.write_text)(content)
    return p


def _npz(tmp_path, name, **arrays):
    p = tmp_path / name
    np.savez(p, **arrays)
    return p


RNG = np.random.default_rng(1)
X20 = RNG.normal(size=(20, 3))

# (id, builder(tmp_path) -> (path, extra CLI args), substrings the message must hold)
REFUSED = [
    (
        "duplicate-columns",
        lambda t: (_write(t, "dup.csv", _csv_text(["a", "a", "y"], _rows())), ["--target", "y"]),
        ["'a'", "dup.csv"],
    ),
    (
        "duplicate-target-column",
        lambda t: (_write(t, "dupy.csv", _csv_text(["a", "y", "y"], _rows())), ["--target", "y"]),
        ["'y'", "dupy.csv"],
    ),
    (
        "ragged-short-row",
        lambda t: (_write(t, "ragged.csv", _csv_text(["a", "b", "y"], _rows()[:3]) + "1.0,2.0\n"), ["--target", "y"]),
        ["ragged.csv", "row 4"],
    ),
    (
        "ragged-long-row",
        lambda t: (_write(t, "long.csv", "a,b,y\n1,2,0\n1,2,1,9\n3,4,0\n"), ["--target", "y"]),
        ["long.csv", "row 2"],
    ),
    (
        "constant-regression-target",
        lambda t: (
            _write(t, "const.csv", _csv_text(["a", "b", "y"], [[r[0], r[1], "3.5"] for r in _rows()])),
            ["--target", "y", "--task", "regression"],
        ),
        ["const.csv", "constant"],
    ),
    (
        "one-class-only",
        lambda t: (
            _write(t, "oneclass.csv", _csv_text(["a", "b", "y"], [[r[0], r[1], "cat"] for r in _rows()])),
            ["--target", "y"],
        ),
        ["oneclass.csv", "2 classes"],
    ),
    (
        "single-sample",
        lambda t: (_write(t, "single.csv", "a,b,y\n1.0,2.0,0.5\n"), ["--target", "y"]),
        ["single.csv", "2 samples"],
    ),
    (
        "not-utf8",
        lambda t: (_write(t, "latin.csv", b"a,b,y\n" + "é,1,2\n".encode("latin-1")), ["--target", "y"]),
        ["latin.csv", "UTF-8"],
    ),
    ("csv-that-is-binary", lambda t: (_write(t, "bin.csv", bytes(range(256)) * 4), ["--target", "y"]), ["bin.csv"]),
    (
        "complex-X-npz",
        lambda t: (_npz(t, "cplx.npz", X=X20 + 1j * X20, Y=np.arange(20) % 2), []),
        ["cplx.npz", "complex"],
    ),
    ("complex-Y-npz", lambda t: (_npz(t, "cplxy.npz", X=X20, Y=X20[:, 0] + 1j), []), ["cplxy.npz", "complex"]),
    (
        "object-labels-npz",
        lambda t: (_npz(t, "obj.npz", X=X20, Y=np.array(["a", 1] * 10, dtype=object)), []),
        ["obj.npz", "dtype=str"],
    ),
    (
        "constant-target-npz",
        lambda t: (_npz(t, "constn.npz", X=X20, Y=np.full(20, 2.5)), []),
        ["constn.npz", "constant"],
    ),
    ("single-sample-npz", lambda t: (_npz(t, "one.npz", X=X20[:1], Y=np.array([0.5])), []), ["one.npz", "2 samples"]),
    (
        "ragged-lists-pt",
        lambda t: (_pt(t, "ragged.pt", {"X": [[1.0, 2.0], [3.0]], "Y": [0.0, 1.0]}), []),
        ["ragged.pt", "`X`"],
    ),
    ("scalar-Y-pt", lambda t: (_pt(t, "scalar.pt", {"X": X20.tolist(), "Y": 3.0}), []), ["scalar.pt", "`Y`"]),
    ("string-X-pt", lambda t: (_pt(t, "strx.pt", {"X": [["a", "b"], ["c", "d"]], "Y": [0, 1]}), []), ["strx.pt"]),
    ("no-samples-npz", lambda t: (_npz(t, "empty.npz", X=np.zeros((0, 3)), Y=np.zeros(0)), []), ["empty.npz", "N ≥ 1"]),
    ("one-dimensional-X-npz", lambda t: (_npz(t, "flat.npz", X=np.zeros(5), Y=np.arange(5)), []), ["flat.npz", "`X`"]),
    (
        "X-Y-lengths-differ-npz",
        lambda t: (_npz(t, "len.npz", X=X20, Y=np.arange(19) % 2), []),
        ["len.npz", "20 inputs"],
    ),
    (
        "nan-in-X-npz",
        lambda t: (_npz(t, "nan.npz", X=np.where(X20 > 1.5, np.nan, X20), Y=np.arange(20) % 2), []),
        ["nan.npz", "finite"],
    ),
    ("header-only-csv", lambda t: (_write(t, "header.csv", "a,b,y\n"), ["--target", "y"]), ["header.csv", "data row"]),
    (
        "unknown-target-csv",
        lambda t: (_write(t, "unk.csv", _csv_text(["a", "b", "y"], _rows())), ["--target", "zz"]),
        ["unk.csv", "'zz'"],
    ),
    (
        "unclosed-quote-csv",
        lambda t: (_write(t, "quote.csv", 'a,b,y\n"1,2,0\n3,4,1\n'), ["--target", "y"]),
        ["quote.csv"],
    ),
    ("npz-missing-Y", lambda t: (_npz(t, "noy.npz", X=X20), []), ["noy.npz", "`Y`"]),
    (
        "target-given-for-an-npz",
        lambda t: (_npz(t, "tg.npz", X=X20, Y=np.arange(20) % 2), ["--target", "y"]),
        ["tg.npz", "`target`", "CSV", "'y'"],
    ),
    (
        "target-given-for-a-pt",
        lambda t: (_pt(t, "tg.pt", {"X": X20.tolist(), "Y": [0, 1] * 10}), ["--target", "0"]),
        ["tg.pt", "`target`", "CSV"],
    ),
]


def _pt(tmp_path, name, obj):
    import torch

    p = tmp_path / name
    torch.save(obj, p)
    return p


@pytest.mark.parametrize("case", REFUSED, ids=[c[0] for c in REFUSED])
def test_refused_with_one_line_naming_the_file_and_no_run_directory(case, tmp_path):
    _, build, needles = case
    path, extra = build(tmp_path)
    out = tmp_path / "run"
    res = runner.invoke(app, ["analyze", "--data", str(path), *extra, "--model", "mlp:width=4", "--out", str(out)])
    assert_one_line(res, needles)
    assert not out.exists()


@pytest.mark.parametrize("case", REFUSED, ids=[c[0] for c in REFUSED])
def test_the_api_raises_an_nqf_error(case, tmp_path):
    _, build, needles = case
    path, extra = build(tmp_path)
    target = extra[extra.index("--target") + 1] if "--target" in extra else None
    task = extra[extra.index("--task") + 1] if "--task" in extra else "auto"
    with pytest.raises(NQFError) as info:
        load_dataset(path, target=target, task=task)
    assert path.name in str(info.value)


@pytest.mark.parametrize("name", ["iris", "digits"])
def test_target_given_for_a_bundled_data_set_is_refused_not_ignored(name, tmp_path):
    out = tmp_path / "run"
    argv = ["analyze", "--data", name, "--target", "zz", "--model", "mlp:width=4", "--out", str(out)]
    assert_one_line(runner.invoke(app, argv), ["`target`", f"'{name}'", "bundled", "'zz'"])
    assert not out.exists()


def test_utf8_bom_before_the_header_is_not_part_of_the_first_column_name(tmp_path):
    rows = _rows()
    plain = load_dataset(_write(tmp_path, "plain.csv", _csv_text(["a", "b", "y"], rows)), target="y")
    p = tmp_path / "bom.csv"
    p.write_bytes(b"\xef\xbb\xbf" + _csv_text(["a", "b", "y"], rows).encode())
    with_bom = load_dataset(p, target="y")
    np.testing.assert_array_equal(with_bom.X, plain.X)
    np.testing.assert_array_equal(with_bom.Y, plain.Y)
    first = load_dataset(p, target="a")  # the first column is found by its name, not by "\ufeffa"
    assert first.task == "regression" and first.n_features == 2


def test_string_class_labels_in_an_npz_are_class_names_like_in_a_csv(tmp_path):
    y = np.array(["cat", "dog", "eel", "dog"] * 5)
    as_str = load_dataset(_npz(tmp_path, "s.npz", X=X20, Y=y))
    as_bytes = load_dataset(_npz(tmp_path, "b.npz", X=X20, Y=np.char.encode(y, "utf-8")))
    for ds in (as_str, as_bytes):
        assert ds.task == "classification" and ds.classes == ("cat", "dog", "eel")
    np.testing.assert_array_equal(as_str.Y, as_bytes.Y)


def test_the_checks_can_fail_a_good_file_is_accepted(tmp_path):
    ds = load_dataset(_write(tmp_path, "good.csv", _csv_text(["a", "b", "y"], _rows())), target="y")
    assert ds.n_samples == 12 and ds.task == "classification"
