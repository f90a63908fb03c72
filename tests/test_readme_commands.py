"""CI runs exactly the README's set-up and test commands (``.ci/run``), in a fresh venv."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _first_block_after(heading: str, text: str) -> str:
    section = text.split(heading, 1)[1]
    match = re.search(r"```bash\n(.*?)\n```", section, re.DOTALL)
    assert match, f"README.md: no bash block after {heading!r}"
    return match.group(1).strip()


def test_ci_runs_the_readme_commands_verbatim_in_a_venv() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    ci_lines = [line.strip() for line in ci.splitlines()]
    for heading in ("## Set up", "## Test"):
        command = _first_block_after(heading, readme)
        assert command in ci_lines, f".ci/run does not run README's {heading[3:]} command:\n{command}"
    venv = next(i for i, line in enumerate(ci_lines) if re.match(r"python3? -m venv ", line))
    setup = ci_lines.index(_first_block_after("## Set up", readme))
    assert venv < setup and any(line.startswith("source ") and "/bin/activate" in line
                                for line in ci_lines[venv:setup])
