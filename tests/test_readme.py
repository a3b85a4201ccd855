"""The README's example runs as written (so the README stays true)."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README has no python example"
    namespace: dict = {}
    for block in blocks:  # the blocks build on each other, as a reader runs them
        exec(compile(block, str(README), "exec"), namespace)  # our own README, not user input
    assert namespace["exact"].shape == (10_000, 10)
    assert namespace["grad"].shape == (64, 10)
    assert namespace["info"].accepted.shape == (500, 64)
    assert 0.3 < namespace["acceptance"] <= 1.0
