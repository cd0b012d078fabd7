"""Every fully qualified reference in a docstring or comment of src/ (``:func:`nqf.x.y```, ``:class:``,
``:meth:``, ``:mod:``, ``:data:``, ``:attr:``, ``:exc:``, ``:obj:``) names something that exists (issue 38):
a renamed or removed function leaves no dangling reference behind.  Short references (``:meth:`commit```)
are relative to their class and are not checked here."""

from __future__ import annotations

import re
from pathlib import Path

from helpers import resolves

SRC = Path(__file__).parents[1] / "src" / "nqf"
ROLE = re.compile(r":(?:func|class|meth|mod|data|attr|exc|obj):`~?(nqf(?:\.[A-Za-z_][A-Za-z0-9_]*)+)`")


def references(text: str):
    for m in ROLE.finditer(text):
        yield text[: m.start()].count("\n") + 1, m.group(1)


def test_every_qualified_docstring_reference_resolves():
    found, bad = 0, []
    for path in sorted(SRC.rglob("*.py")):
        for line, dotted in references(path.read_text(encoding="utf-8")):
            found += 1
            if not resolves(dotted):
                bad.append(f"{path.relative_to(SRC.parent)}:{line}: {dotted}")
    assert found > 100, found  # the sources do use them: the scan sees them
    assert not bad, bad


def test_a_broken_reference_is_caught():
    """The check can fail: a planted reference to a function that does not exist is reported."""
    text = "see :func:`nqf.predict` and :func:`~nqf.dynamics.no_such_function`"
    assert [d for _, d in references(text) if not resolves(d)] == ["nqf.dynamics.no_such_function"]
