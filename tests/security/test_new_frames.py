"""The paths from a script to the host that came with images, the check's names and the
keeper's take-back, attacked from inside the sandbox: forged `image` frames, strings in the
script's globals that are not names, and an unasked-for `holding` frame."""

from __future__ import annotations

import base64
import time

import pytest

from tests.conftest import MakeRuntime
from toolscript import Runtime
from toolscript.tools.python import tool

from .conftest import forging

PNG = base64.b64encode(
    base64.b64decode(
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
    )
).decode()


@tool
async def add_note(text: str) -> str:
    """Keep a note."""
    return f"kept {text}"


@pytest.mark.timeout(60)
async def test_forged_images_beyond_the_bounds_are_dropped_and_counted(
    make_runtime: MakeRuntime,
) -> None:
    runtime: Runtime = await make_runtime(max_images=3)
    code = forging("for _ in range(50):\n    show(bytes.fromhex('89504e470d0a1a0a') + b'x' * 16)\n")
    result = await runtime.run(code, time_limit=20)
    assert result.status == "ok", result.text
    assert len(result.images) == 3
    assert "47 image(s) shown" in result.note


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("mime_type", "data"),
    [("text/html", PNG), ("image/png", "not base64 at all!"), ("image/png", 12345)],
    ids=["unknown-type", "not-base64", "not-text"],
)
async def test_a_forged_image_frame_the_kernel_never_sends_costs_the_script_its_interpreter(
    make_runtime: MakeRuntime, mime_type: str, data: object
) -> None:
    runtime: Runtime = await make_runtime()
    first = await runtime.run("0")
    code = forging(
        "script = kernel._script.id\n"
        f"forge({{'t': 'image', 'script': script, 'mime_type': {mime_type!r}, 'data': {data!r}}})\n"
        "time.sleep(30)\n"
    )
    started = time.monotonic()
    result = await runtime.run(code, time_limit=20)
    assert time.monotonic() - started < 15, "a forged frame held the host"
    assert result.status != "ok", result.text
    assert result.images == ()
    after = await runtime.run("1 + 1")
    assert (after.status, after.value) == ("ok", "2")
    assert after.generation > first.generation


@pytest.mark.timeout(90)
async def test_strings_in_globals_that_are_not_names_cannot_write_into_the_checked_file(
    make_runtime: MakeRuntime,
) -> None:
    runtime: Runtime = await make_runtime(tools=[add_note], check="refuse")
    planted = await runtime.shell("s").run(
        "globals()['x: int\\nawait add_note(txt=1)\\ny'] = 1\nglobals()['ok_name'] = 2\n"
    )
    assert planted.status == "ok", planted.text
    # The planted string is not declared: the checked file keeps its shape, and a real
    # finding is still found on its line.
    refused = await runtime.shell("s").run("print(ok_name)\nawait add_note(txt='a')\n")
    assert refused.status == "refused", refused.text
    assert ":2:" in refused.note and "txt" in refused.note
    fine = await runtime.shell("s").run("print(ok_name)\nprint(await add_note(text='a'))\n")
    assert fine.status == "ok", fine.text
    assert fine.stdout == "2\nkept a\n"


@pytest.mark.timeout(90)
async def test_more_globals_than_the_bound_leave_the_check_working(
    make_runtime: MakeRuntime,
) -> None:
    runtime: Runtime = await make_runtime(tools=[add_note], check="refuse")
    planted = await runtime.shell("s").run("for i in range(20_000):\n    globals()[f'v{i}'] = i\n")
    assert planted.status == "ok", planted.text
    refused = await runtime.shell("s").run("await add_note(txt='a')\n")
    assert refused.status == "refused", refused.text
    fine = await runtime.shell("s").run("print(v19999, await add_note(text='b'))\n")
    assert fine.stdout == "19999 kept b\n", fine.text


@pytest.mark.timeout(60)
async def test_an_unasked_for_holding_frame_dispatches_nothing(make_runtime: MakeRuntime) -> None:
    made: list[str] = []

    @tool
    async def record(text: str) -> str:
        """Record `text`."""
        made.append(text)
        return text

    runtime: Runtime = await make_runtime(tools=[record])
    code = forging(
        "forge({'t': 'holding', 'token': 'guess', 'running': None, 'done': None,"
        " 'calls': [{'t': 'call', 'id': 99, 'tool': 'record', 'args': {'text': 'forged'}}]})\n"
        "print(await record(text='real'))\n"
    )
    await runtime.run(code, time_limit=20)
    assert "forged" not in made
    assert made in ([], ["real"])
    after = await runtime.run("print(await record(text='after'))")
    assert after.status == "ok", after.text
    assert "forged" not in made


@pytest.mark.timeout(60)
async def test_a_forged_call_of_too_many_containers_costs_the_script_its_interpreter(
    make_runtime: MakeRuntime,
) -> None:
    # The kernel refuses such a call itself; one that reaches the host was forged, and the
    # host does not decode it (a million empty dicts cost 64 MB and its loop's time).
    runtime: Runtime = await make_runtime(tools=[add_note])
    first = await runtime.run("0")
    code = forging(
        "script = kernel._script.id\n"
        'body = (\'{"t": "call", "n": 1, "tool": "add_note", "script": \' + json.dumps(script)'
        " + ', \"args\": {\"text\": [' + '{},' * 1_200_000 + '{}]}}').encode()\n"
        "import socket\n"
        "sock = socket.socket(fileno=os.dup(channel()))\n"
        "sock.setblocking(True)\n"  # the whole frame, however long the host takes to read it
        "sock.sendall(struct.pack('>I', len(body)) + body)\n"
        "time.sleep(30)\n"
    )
    result = await runtime.run(code, time_limit=20)
    assert result.status != "ok", result.text
    assert "objects and arrays" in result.text, result.text
    assert result.calls.made == 0
    after = await runtime.run("1 + 1")
    assert (after.status, after.value) == ("ok", "2")
    assert after.generation > first.generation
