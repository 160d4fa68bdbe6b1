"""The house's own rule (issue 13): no module under `src/` over 500 lines unless its
docstring says why it is one concept."""

from __future__ import annotations

import ast
from pathlib import Path

import toolscript

SOURCE = Path(toolscript.__file__).resolve().parent


def test_every_module_over_500_lines_says_why_it_is_one_concept() -> None:
    unexplained = []
    for path in sorted(SOURCE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if text.count("\n") <= 500:
            continue
        docstring = ast.get_docstring(ast.parse(text)) or ""
        if "One concept, though" not in docstring:
            unexplained.append(str(path.relative_to(SOURCE)))
    assert unexplained == []
