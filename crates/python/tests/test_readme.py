"""The "From Python" example of docs/python.md runs as written."""

from __future__ import annotations

import contextlib
import io
import re

START, END = "<!-- python-example:start -->", "<!-- python-example:end -->"


def test_readme_python_example_runs(repo):
    readme = (repo / "docs" / "python.md").read_text(encoding="utf-8")
    assert readme.count(START) == 1 and readme.count(END) == 1, "docs/python.md's Python example markers"
    block = readme.split(START, 1)[1].split(END, 1)[0]
    match = re.fullmatch(r"\s*```python\n(.*)```\s*", block, flags=re.S)
    assert match, "the example is one ```python block between the markers"
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        exec(compile(match.group(1), "docs/python.md (From Python)", "exec"), {"__name__": "readme_example"})
    printed = output.getvalue().splitlines()
    assert len(printed) == 4
    changed, moved = map(int, printed[1].split())
    assert 0 < changed == moved < 100_000 * 3 / 65 * 1.3
