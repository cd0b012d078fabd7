"""The README's Python tour runs as written."""

import re
from pathlib import Path


def test_readme_python_blocks_run():
    text = (Path(__file__).parents[1] / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "README has no python block"
    for code in blocks:
        exec(compile(code, "README.md", "exec"), {})
