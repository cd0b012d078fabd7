"""CSV headers at sizes that used to hang, and a target named twice (issue 37, classes 7 and 8)."""

from __future__ import annotations

import pytest

from nqf.app._data import load_dataset
from nqf.errors import DataError


def _wide(path, n_cols: int, dup: bool = False):
    names = [f"c{j}" for j in range(n_cols)]
    if dup:
        names[-1] = names[0]
    with open(path, "w") as fh:
        fh.write(",".join(names) + "\n")
        fh.write(",".join("1" for _ in names) + "\n")
        fh.write(",".join("2" for _ in names) + "\n")
    return path


def test_duplicate_column_name_in_a_wide_header(tmp_path):
    """40 000 columns (the pairwise search took 16 s here; one pass over a set, milliseconds)."""
    path = _wide(tmp_path / "wide.csv", 40_000, dup=True)
    with pytest.raises(DataError, match="column name 'c0' appears 2 times"):
        load_dataset(str(path), target="c1")


def test_a_missing_target_in_a_wide_header_names_a_few_columns(tmp_path):
    path = _wide(tmp_path / "wide.csv", 5_000)
    with pytest.raises(DataError) as info:
        load_dataset(str(path), target="nope")
    msg = str(info.value)
    assert "'nope' not found" in msg and "(5000 columns)" in msg and len(msg) < 1000


@pytest.mark.parametrize("target", ["label,3", "label,label", "3,-1", "label, label"])
def test_a_target_named_twice_is_refused(tmp_path, target):
    path = tmp_path / "d.csv"
    path.write_text("a,b,c,label\n" + "".join(f"{i},{i + 1},{i % 3},{i % 2}\n" for i in range(12)))
    with pytest.raises(DataError, match="`target`: .* more than once"):
        load_dataset(str(path), target=target)


def test_report_of_a_missing_directory_names_it(tmp_path):
    """`nqf report missing-dir` had named the parent ("/tmp holds no results.json")."""
    from typer.testing import CliRunner

    from nqf.app._cli import app

    missing = tmp_path / "missing-run"
    res = CliRunner().invoke(app, ["report", str(missing)])
    assert res.exit_code == 2
    assert f"`RUN_DIR` {missing} does not exist" in res.output and "Traceback" not in res.output


def test_a_config_with_a_byte_order_mark_is_read(tmp_path):
    """An editor's "UTF-8 with BOM" had been refused as invalid TOML at line 1, column 1."""
    from nqf.app._experiments import load_config

    cfg = tmp_path / "bom.toml"
    cfg.write_bytes(b'\xef\xbb\xbfexperiment = "demo"\n')
    assert load_config(cfg)[1].name == "demo"
