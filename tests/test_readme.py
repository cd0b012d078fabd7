"""The README's Python tour runs as written."""

import re
from pathlib import Path


def test_readme_python_blocks_run():
    text = (Path(__file__).parents[1] / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "README has no python block"
    for code in blocks:
        exec(compile(code, "README.md", "exec"), {})


def test_every_module_path_the_readme_names_imports_as_written():
    """Every `nqf.x.y` the README names resolves: modules import (`from nqf.x import …` works), other names
    are attributes of the module before them (issue 19: short names that fail as imports are gone)."""
    from helpers import resolves

    text = (Path(__file__).parents[1] / "README.md").read_text()
    names = sorted(set(re.findall(r"`(nqf(?:\.[A-Za-z_][A-Za-z0-9_]*)+)", text)))
    assert names, "the README names no nqf path"
    bad = [dotted for dotted in names if not resolves(dotted)]
    assert not bad, f"README names that do not resolve: {bad}"
