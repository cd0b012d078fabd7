"""The example notebooks (examples/*.py, jupytext percent format) run as notebooks, cell by cell in a real
kernel, in their small configuration (issue 38); each writes its figure."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).parents[1] / "examples").glob("[0-9]*.py"))


def _run_notebook(nb, cwd: Path, timeout: int = 600):
    from nbclient import NotebookClient

    NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute()
    return nb


@pytest.fixture
def notebook_env(tmp_path, monkeypatch):
    pytest.importorskip("nbclient")
    pytest.importorskip("jupytext")
    pytest.importorskip("ipykernel")
    monkeypatch.setenv("NQF_EXAMPLES_SMALL", "1")
    monkeypatch.setenv("NQF_EXAMPLES_OUT", str(tmp_path))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    return tmp_path


def test_there_are_examples():
    assert len(EXAMPLES) >= 3, EXAMPLES


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_an_example_notebook_runs_and_draws_its_figure(path, notebook_env):
    import jupytext

    nb = _run_notebook(jupytext.read(path), notebook_env)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, errors
    png = notebook_env / f"{path.stem}.png"
    assert png.is_file() and png.stat().st_size > 10_000, os.listdir(notebook_env)


def test_a_failing_cell_fails_the_run(notebook_env):
    """The check can fail: a notebook whose cell raises stops with the cell's error."""
    import jupytext
    from nbclient.exceptions import CellExecutionError

    nb = jupytext.reads("# %%\nx = 1\n\n# %%\nraise ValueError('planted')\n", fmt="py:percent")
    with pytest.raises(CellExecutionError, match="planted"):
        _run_notebook(nb, notebook_env)
