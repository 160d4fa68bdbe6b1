"""A lone surrogate in a script's value or error (a `__repr__`, an exception's message) is
escaped in the result, as in its output, so the result always writes as UTF-8: the CLI prints
it, `--json` dumps it, and `serve` can answer with it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.runtime.test_cli import toolscript_exec
from toolscript import Runtime

SURROGATES = {
    "an error message": ("raise ValueError('bad \\ud800 here')", "error"),
    "a value's repr": (
        "class A:\n    def __repr__(self):\n        return 'odd \\udcff'\nA()",
        "ok",
    ),
}


@pytest.mark.timeout(20)
@pytest.mark.parametrize("source, status", SURROGATES.values(), ids=list(SURROGATES))
async def test_a_lone_surrogate_in_the_value_or_error_is_escaped(
    runtime: Runtime, source: str, status: str
) -> None:
    result = await runtime.run(source)
    assert result.status == status, result.text
    result.text.encode("utf-8")
    json.dumps(result.to_dict(), ensure_ascii=False).encode("utf-8")
    assert "\\ud800" in result.text or "\\udcff" in result.text


@pytest.mark.timeout(40)
@pytest.mark.parametrize("source, status", SURROGATES.values(), ids=list(SURROGATES))
def test_exec_prints_a_result_holding_a_lone_surrogate(
    tmp_path: Path, source: str, status: str
) -> None:
    done = toolscript_exec(tmp_path, source + "\n")
    assert done.stdout.startswith(f"exit {0 if status == 'ok' else 1} · {status}\n"), done.stderr
    assert done.returncode == (0 if status == "ok" else 1)
    assert "Traceback" not in done.stderr
