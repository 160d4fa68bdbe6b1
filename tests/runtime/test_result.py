"""`ScriptResult`: the fields of docs/api/results.md, `text` as docs/design.md#how-a-script-can-end, and `to_dict()` JSON-safe."""

from __future__ import annotations

import json

import pytest

from tests.conftest import MakeRuntime
from toolscript import CallReport, Runtime, ScriptResult


@pytest.mark.timeout(20)
async def test_a_result_carries_every_field_of_the_contract(runtime: Runtime) -> None:
    first = await runtime.run("0")  # without a sandbox, an interpreter's first result says so
    result = await runtime.run("import sys\nprint('out')\nprint('err', file=sys.stderr)\n6 * 7")
    assert isinstance(result, ScriptResult)
    assert result.status == "ok" and result.exit_code == 0
    assert result.stdout == "out\n" and result.stderr == "err\n"
    assert result.value == "42" and result.error is None
    assert result.note == ""
    assert isinstance(result.calls, CallReport) and result.calls.made == 0
    assert result.generation == 1
    assert result.script_id.startswith("default:")
    assert result.shell == "default"
    assert result.time_limit == runtime.default_time_limit
    assert 0 < result.duration < 5
    assert [s.script_id for s in runtime.journal.scripts()] == [first.script_id, result.script_id]


@pytest.mark.timeout(20)
async def test_every_status_gives_a_json_safe_dict_with_the_same_facts(
    runtime: Runtime,
) -> None:
    results = [
        await runtime.run("'fine'"),
        await runtime.run("raise ValueError('bad')"),
        await runtime.run("import time\ntime.sleep(10)", time_limit=0.5),
        await runtime.run("import os\nos._exit(9)"),
        await runtime.run("1", time_limit=-1),
    ]
    assert [r.status for r in results] == ["ok", "error", "time_limit", "crashed", "refused"]
    for result in results:
        data = json.loads(json.dumps(result.to_dict()))
        assert data["status"] == result.status
        assert data["exit_code"] == result.exit_code
        assert data["note"] == result.note
        assert data["stdout"] == result.stdout and data["value"] == result.value
        assert data["error"] == result.error
        assert data["generation"] == result.generation
        assert data["script_id"] == result.script_id
        assert data["calls"]["made"] == 0
        assert result.text.startswith(f"exit {result.exit_code} · {result.status}\n")


@pytest.mark.timeout(20)
async def test_the_text_puts_status_and_note_before_the_output(runtime: Runtime) -> None:
    result = await runtime.run("print('x' * 100)\nimport time\ntime.sleep(10)", time_limit=0.5)
    text = result.text
    assert text.index("time_limit") < text.index("Stopped at the time limit") < text.index("xxx")


@pytest.mark.timeout(20)
async def test_output_over_its_share_of_the_text_is_cut_in_the_middle_keeping_head_and_tail(
    make_runtime: MakeRuntime,
) -> None:
    runtime = await make_runtime(text_limit=5_000)
    result = await runtime.run(
        "print('OUT-HEAD' + 'o' * 50_000 + 'OUT-TAIL')\n"
        "import sys\n"
        "print('ERR-HEAD' + 'e' * 50_000 + 'ERR-TAIL', file=sys.stderr)\n"
        "'VAL-HEAD' + 'v' * 50_000 + 'VAL-TAIL'"
    )
    assert result.status == "ok"
    assert len(result.stdout) > 50_000  # the result keeps the output; only text is cut
    text = result.text
    assert len(text) < 5_000 + 500
    for name in ("OUT", "ERR", "VAL"):
        assert f"{name}-HEAD" in text and f"{name}-TAIL" in text
    assert text.count("characters cut") == 3
    assert text.index("stderr:") < text.index("stdout:") < text.index("value:")


@pytest.mark.timeout(20)
async def test_a_long_error_keeps_its_end_in_the_text(make_runtime: MakeRuntime) -> None:
    runtime = await make_runtime(text_limit=2_000)
    result = await runtime.run("raise ValueError('START' + 'm' * 10_000 + 'THE-END')")
    assert result.status == "error"
    assert result.error is not None and "THE-END" in result.error
    assert "characters cut" in result.text
    assert "ValueError" in result.text and "THE-END" in result.text
