"""Every ```python block of every page in docs/ runs as written (issue 38), each in a fresh namespace and an
empty working folder.

Conventions of the pages: a block fenced ```python is executed here; a block that only shows a shape (a
cluster the tests do not have, elided arguments ``...``) is fenced ```py and is not; a block holding the
comment ``# (slow)`` runs only with ``-m slow``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).parents[1] / "docs"
FENCE = re.compile(r"^```python\n(.*?)^```", flags=re.S | re.M)


def _blocks() -> list:
    out = []
    for page in sorted(DOCS.glob("*.md")):
        for i, m in enumerate(FENCE.finditer(page.read_text(encoding="utf-8"))):
            code = m.group(1)
            marks = [pytest.mark.slow] if "# (slow)" in code else []
            out.append(pytest.param(page.name, code, id=f"{page.stem}-{i}", marks=marks))
    return out


BLOCKS = _blocks()


def test_the_pages_have_blocks_to_run():
    assert len(BLOCKS) >= 3, [b.id for b in BLOCKS]


@pytest.mark.parametrize("page, code", BLOCKS)
def test_a_docs_python_block_runs(page, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(code, f"docs/{page}", "exec"), {"__name__": "__docs__"})


def test_a_failing_block_is_caught():
    """The check can fail: a block that raises is an error of this test, not skipped."""
    with pytest.raises(NameError):
        exec(compile("undefined_name + 1", "docs/planted.md", "exec"), {})
