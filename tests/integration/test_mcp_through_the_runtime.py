"""MCP servers' tools inside scripts: real server processes (stdio and streamable HTTP), the
official SDK client, a real kernel, all driven through `Runtime(mcp_config=...)`.

One runtime is shared by the module: the demo server over stdio (`demo`) and over HTTP
(`web`), two servers that cannot start, and a few Python tools for the catalogue tests. Its
`tool_timeout` is short so the never-answering tool costs little; tests that restart a server
have runtimes of their own.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal

import pytest
import pytest_asyncio

from toolscript import Runtime, ToolSpec, tool
from toolscript.tools.spec import ToolOutcome

from .conftest import broken_servers, error_of, http_demo, run, stdio_demo, value_of

pytestmark = pytest.mark.asyncio(loop_scope="module")

TOOL_TIMEOUT = 1.5
PNG_SIZE = 70
"""Bytes of the demo server's one-pixel PNG."""
SERVERS = ["demo", "web"]
"""The same demo server over stdio (`demo`) and over streamable HTTP (`web`)."""


@tool
async def search(query: str, limit: int = 10, tags: list[str] | None = None) -> list[str]:
    """Search the notes.

    Args:
        query: What to look for.
        limit: At most this many.
        tags: Only notes with all of these tags.
    """
    return [query] * limit


@tool
def set_mode(mode: Literal["fast", "slow"], level: float = 0.5) -> dict[str, float]:
    """Choose how to work."""
    return {mode: level}


async def _arguments_as_received(arguments: dict[str, Any]) -> ToolOutcome:
    return ToolOutcome(value=arguments)


AWKWARD = ToolSpec(
    name="get-sum",
    description="Give back the arguments exactly as the host received them.",
    input_schema={
        "type": "object",
        "properties": {
            "file-path": {"type": "string", "description": "A path."},
            "class": {"type": "string"},
            "kwargs": {"type": "object"},
            "from": {"type": "integer", "default": 0},
            "timeout": {"type": "number"},
            "!!!": {"type": "string", "description": "Not a name at all."},
        },
        "required": ["file-path"],
    },
    handler=_arguments_as_received,
)
"""A top-level tool whose name and parameters are not identifiers (and one is `timeout`)."""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def rt(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Runtime]:
    async with http_demo() as url:
        config = {"mcpServers": {"demo": stdio_demo(), "web": {"url": url}, **broken_servers()}}
        runtime = Runtime(
            tools=[search, set_mode, AWKWARD],
            mcp_config=config,
            journal=":memory:",
            state_dir=tmp_path_factory.mktemp("state"),
            tool_timeout=TOOL_TIMEOUT,
            grace=0.5,
        )
        await asyncio.wait_for(runtime.start(), 40)
        try:
            yield runtime
        finally:
            await asyncio.wait_for(runtime.aclose(), 20)


def compiled_prompt(rt: Runtime) -> dict[str, Any]:
    """`rt.prompt()` compiled and run in this process: the stubs' namespace."""
    namespace: dict[str, Any] = {"__name__": "tools"}  # the module the kernel's types are in
    exec(compile(rt.prompt(), "<prompt>", "exec", dont_inherit=True), namespace)
    return namespace


def stub_signatures(namespace: dict[str, Any]) -> dict[str, tuple[str, str | None]]:
    """Every stub as `{"name" or "server.name": (signature, docstring)}`."""
    found: dict[str, tuple[str, str | None]] = {}
    for name, item in namespace.items():
        if inspect.iscoroutinefunction(item):
            found[name] = (str(inspect.signature(item)), inspect.getdoc(item))
        elif inspect.isclass(item) and item.__module__ == "tools":
            for member, attribute in vars(item).items():
                if isinstance(attribute, staticmethod):
                    function = attribute.__func__
                    found[f"{name}.{member}"] = (
                        str(inspect.signature(function)),
                        inspect.getdoc(function),
                    )
    return found


LIVE_SIGNATURES = """
import inspect, types

def _every_tool():
    found = {}
    for name in dir(tools):
        item = getattr(tools, name)
        if inspect.iscoroutinefunction(item):
            assert globals()[name] is item, name
            found[name] = (str(inspect.signature(item)), inspect.getdoc(item))
        elif isinstance(item, types.ModuleType):
            assert globals()[name] is item, name
            for member in dir(item):
                function = getattr(item, member)
                found[name + "." + member] = (
                    str(inspect.signature(function)), inspect.getdoc(function)
                )
    return found

_every_tool()
"""


# --- the catalogue and the live functions -----------------------------------------------------


async def test_every_stub_of_the_prompt_compiles_and_matches_the_live_function_in_the_kernel(
    rt: Runtime,
) -> None:
    stubs = stub_signatures(compiled_prompt(rt))
    live = await value_of(rt, LIVE_SIGNATURES)
    assert live == stubs
    assert {"search", "set_mode", "get_sum", "demo.odd_names", "web.odd_names"} <= set(live)
    assert live["demo.odd_names"][0] == (
        "(*, file_path: str, class_: str | None = None, "
        "kwargs: dict[str, typing.Any] | None = None, from_: int | None = None, "
        "timeout: float | None = None) -> dict[str, typing.Any]"
    )
    assert live["get_sum"][0] == (
        "(*, file_path: str, class_: str | None = None, "
        "kwargs: dict[str, typing.Any] | None = None, from_: int = 0, "
        "timeout: float | None = None, call_timeout: float | None = None, "
        "**extra: Any) -> Any"
    )
    assert live["set_mode"][0] == (
        "(*, mode: Literal['fast', 'slow'], level: float = 0.5, "
        "timeout: float | None = None) -> dict[str, float]"
    )


async def test_the_tools_of_a_server_that_started_are_all_listed_under_its_name(
    rt: Runtime,
) -> None:
    for server in SERVERS:
        listed = {spec.name for spec in rt.catalogue.specs if spec.server == server}
        assert {"echo", "add", "image", "fail", "odd_names", "crash", "hang"} <= listed
        in_script = await value_of(rt, f"(sorted(dir({server})), tools.{server} is {server})")
        assert in_script == (sorted(listed), True)


async def test_help_on_a_tool_shows_its_signature_and_docstring(rt: Runtime) -> None:
    signature, _ = stub_signatures(compiled_prompt(rt))["demo.odd_names"]
    result = await run(rt, "help(demo.odd_names)")
    assert result.status == "ok", result.text
    assert f"async odd_names{signature}" in result.stdout
    assert "Parameters that are not Python identifiers, or are keywords." in result.stdout
    assert "file_path (sent as 'file-path'): A path." in result.stdout
    assert "class_ (sent as 'class')" in result.stdout


async def test_a_server_stays_reachable_as_tools_dot_its_name_when_its_name_is_shadowed(
    rt: Runtime,
) -> None:
    shell = rt.shell("shadowed")
    result = await asyncio.wait_for(
        shell.run("demo = 'a variable'\nawait tools.demo.echo(text='still here')"), 30
    )
    assert result.status == "ok", result.text
    assert result.value == "'still here'"


# --- calls and their results ------------------------------------------------------------------


@pytest.mark.parametrize("server", SERVERS)
async def test_a_single_text_block_is_a_str(rt: Runtime, server: str) -> None:
    answer = await value_of(rt, f"r = await {server}.echo(text='hello')\n(type(r).__name__, r)")
    assert answer == ("str", "hello")


@pytest.mark.parametrize("server", SERVERS)
async def test_structured_content_is_python_data(rt: Runtime, server: str) -> None:
    answer = await value_of(rt, f"r = await {server}.add(a=2, b=40)\n(type(r).__name__, r)")
    assert answer == ("dict", {"sum": 42})


@pytest.mark.parametrize("server", SERVERS)
async def test_an_image_is_an_object_with_its_mime_type_size_and_bytes(
    rt: Runtime, server: str
) -> None:
    code = f"""
[picture] = await {server}.image()
(type(picture).__name__, picture.mime_type, picture.size, picture.data[:4], repr(picture))
"""
    kind, mime_type, size, head, shown = await value_of(rt, code)
    assert (kind, mime_type, head) == ("Image", "image/png", b"\x89PNG")
    assert size == PNG_SIZE
    assert shown == f"<Image image/png {PNG_SIZE} bytes>"


async def test_a_result_of_several_blocks_is_a_list_of_str_and_content_objects(
    rt: Runtime,
) -> None:
    code = """
blocks = await demo.mixed()
[(type(b).__name__, getattr(b, "mime_type", None), getattr(b, "size", None)) for b in blocks]
"""
    assert await value_of(rt, code) == [
        ("str", None, None),
        ("Image", "image/png", PNG_SIZE),
        ("Audio", "audio/wav", 4),
        ("Resource", "text/plain", 5),
        ("Resource", "application/octet-stream", 2),
        ("ResourceLink", "text/csv", None),
    ]


@pytest.mark.parametrize("server", SERVERS)
async def test_a_tool_error_raises_tool_error_with_the_servers_message_and_can_be_caught(
    rt: Runtime, server: str
) -> None:
    message, result = await error_of(rt, f"{server}.fail(message='access denied to /etc')")
    assert message == "access denied to /etc"
    [record] = result.calls.records
    assert (record.tool, record.fate, record.is_error) == (f"{server}/fail", "seen", True)


async def test_an_uncaught_tool_error_ends_the_script_as_an_error_naming_the_message(
    rt: Runtime,
) -> None:
    result = await run(rt, "await demo.fail(message='quota exceeded')")
    assert result.status == "error"
    assert result.error is not None
    assert result.error.rstrip().endswith("tools.ToolError: quota exceeded")
    assert result.calls.by_fate == {"seen": 1}


@pytest.mark.parametrize("server", SERVERS)
async def test_parameters_named_file_path_class_kwargs_and_from_reach_the_server_by_their_own_names(
    rt: Runtime, server: str
) -> None:
    code = f"""
everything = await {server}.odd_names(file_path="/tmp/a", class_="B", kwargs={{"x": 1}}, from_=3)
only_required = await {server}.odd_names(file_path="/tmp/b")
(everything, only_required)
"""
    assert await value_of(rt, code) == (
        {"file-path": "/tmp/a", "class": "B", "kwargs": {"x": 1}, "from": 3},
        {"file-path": "/tmp/b"},
    )


async def test_a_top_level_tool_with_unspellable_names_gets_its_arguments_by_their_own_names(
    rt: Runtime,
) -> None:
    code = """
await get_sum(
    file_path="p", class_="c", kwargs={}, from_=1, timeout=2.5, call_timeout=5, **{"!!!": "x"}
)
"""
    assert await value_of(rt, code) == {
        "file-path": "p",
        "class": "c",
        "kwargs": {},
        "from": 1,
        "timeout": 2.5,
        "!!!": "x",
    }


async def test_an_argument_that_does_not_fit_the_schema_is_refused_naming_it(
    rt: Runtime,
) -> None:
    message, result = await error_of(rt, "demo.add(a='two', b=2)")
    assert message == "demo/add: argument 'a' must be of type integer, got 'two'"
    [record] = result.calls.records
    assert (record.fate, record.cause) == ("refused", None)


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ("file_path='p', kwargs={'x': float('nan')}", "holds nan, which JSON cannot carry"),
        ("file_path='p', kwargs={'x': [float('-inf')]}", "holds -inf, which JSON cannot carry"),
        ("file_path='\\ud800'", "a lone surrogate"),
    ],
)
async def test_an_argument_json_cannot_carry_to_a_server_is_refused_not_changed(
    rt: Runtime, arguments: str, problem: str
) -> None:
    # Sent, NaN and the infinities reached the server as null; a lone surrogate failed the
    # write after dispatch and was reported `seen`.
    message, result = await error_of(rt, f"demo.odd_names({arguments})")
    assert problem in message and "not sent" in message, message
    [record] = result.calls.records
    assert (record.fate, record.cause) == ("refused", None)


async def test_a_tool_coroutine_never_awaited_is_named_in_the_result_and_never_sent(
    rt: Runtime,
) -> None:
    result = await run(rt, "demo.echo(text='never sent')\n1")
    assert result.status == "ok", result.text
    assert "never awaited" in result.note
    assert "demo.echo" in result.note
    assert result.calls.made == 0


# --- a server that never answers ---------------------------------------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize("server", SERVERS)
async def test_a_call_past_the_tool_timeout_raises_tool_timeout_is_pending_and_cancelled_upstream(
    rt: Runtime, server: str, tmp_path: Path
) -> None:
    marker = tmp_path / f"{server}.cancelled"
    code = f"""
try:
    await {server}.hang(marker={str(marker)!r})
except ToolTimeout as error:
    timed_out = (isinstance(error, TimeoutError), str(error))
seen_by_server = await {server}.cancellations(timeout=10)
(timed_out, seen_by_server)
"""
    result = await run(rt, code, time_limit=20)
    assert result.status == "ok", result.text
    (is_timeout_error, message), seen = ast.literal_eval(result.value or "")
    assert is_timeout_error is True
    assert f"within its timeout of {TOOL_TIMEOUT:g} s" in message
    assert "may still take effect" in message
    assert seen == {"markers": [str(marker)]}
    assert marker.read_text() == "cancelled"
    hang = next(record for record in result.calls.records if record.tool == f"{server}/hang")
    assert (hang.fate, hang.cause, hang.answered_at) == ("pending", "tool_timeout", None)
    assert result.calls.by_fate == {"seen": 1, "pending": 1}
    assert hang.id in {call.call_id for call in rt.journal.uncertain()}


# --- servers that cannot start -----------------------------------------------------------------


async def test_servers_that_cannot_start_are_named_with_why_and_the_others_work(
    rt: Runtime,
) -> None:
    assert set(rt.mcp_failures) == {"broken", "missing"}
    assert "missing API key" in rt.mcp_failures["broken"]
    assert "not found" in rt.mcp_failures["missing"]
    code = """
(
    [name for name in ("broken", "missing") if name in globals() and name in dir(tools)],
    await demo.echo(text="up"),
    await web.echo(text="up too"),
)
"""
    assert await value_of(rt, code) == (["broken", "missing"], "up", "up too")


async def test_a_server_that_did_not_start_raises_tool_error_and_every_run_using_it_says_why(
    rt: Runtime,
) -> None:
    message, result = await error_of(rt, "broken.anything(x=1)")
    assert message.startswith("server 'broken' did not start, so it has no tools: ")
    assert "missing API key" in message
    for text in (result.note, result.text):
        assert "The MCP server 'broken' did not start" in text and "missing API key" in text
        assert "'missing'" not in text  # not used by this run
    message, result = await error_of(rt, "tools.missing.search(q='x')")
    assert "server 'missing' did not start" in message and "not found" in message
    assert "The MCP server 'missing' did not start" in result.note
    unrelated = await run(rt, "await demo.echo(text='up')")
    assert unrelated.status == "ok" and "did not start" not in unrelated.text


async def test_the_prompt_names_each_server_that_did_not_start_in_a_comment(rt: Runtime) -> None:
    for prompt in (rt.prompt(), rt.prompt(matching="echo")):
        lines = prompt.splitlines()
        [broken] = [line for line in lines if line.startswith("# `broken` has no tools: ")]
        assert "'broken' could not start" in broken and "missing API key" in broken
        [missing] = [line for line in lines if line.startswith("# `missing` has no tools: ")]
        assert "not found" in missing
    compiled_prompt(rt)


# --- servers that die --------------------------------------------------------------------------


@pytest.mark.timeout(60)
async def test_a_stdio_server_that_crashes_mid_call_leaves_the_call_pending_and_is_restarted(
    tmp_path: Path,
) -> None:
    config = {"mcpServers": {"demo": stdio_demo()}}
    async with Runtime(mcp_config=config, journal=":memory:", state_dir=tmp_path) as rt:
        code = """
try:
    await demo.crash()
except ToolError as error:
    crashed = str(error)
(crashed, await demo.echo(text="back again"))
"""
        result = await run(rt, code, time_limit=30)
        assert result.status == "ok", result.text
        crashed, after = ast.literal_eval(result.value or "")
        assert crashed.startswith("demo/crash: the server behind this tool stopped")
        assert "may have taken effect" in crashed
        assert after == "back again"
        crash, echo = sorted(result.calls.records, key=lambda record: record.made_at)
        assert (crash.tool, crash.fate, crash.cause) == ("demo/crash", "pending", "source_gone")
        assert (echo.tool, echo.fate) == ("demo/echo", "seen")
        assert "the tool's server stopped" in result.text
        log = (tmp_path / "logs" / "demo.log").read_text()
        assert "crashing on purpose" in log
        assert log.count(f": starting {sys.executable}") == 2


@pytest.mark.timeout(60)
async def test_a_server_restarted_after_a_crash_comes_back_even_when_calls_time_out_meanwhile(
    tmp_path: Path,
) -> None:
    # The demo server needs longer than this tool timeout to start (it imports the SDK), so
    # the calls made while it restarts time out; the restart itself must go on, not count as
    # the server dying again.
    config = {"mcpServers": {"demo": stdio_demo()}}
    async with Runtime(
        mcp_config=config, journal=":memory:", state_dir=tmp_path, tool_timeout=0.3
    ) as rt:
        code = """
import time
try:
    await demo.crash()
except ToolError:
    pass
outcomes = []
deadline = time.monotonic() + 25
while time.monotonic() < deadline:
    try:
        outcomes.append(await demo.echo(text="back"))
        break
    except ToolTimeout:
        outcomes.append("timed out")
    except ToolError as error:
        outcomes.append(str(error))
        break
outcomes[-1]
"""
        result = await run(rt, code, time_limit=30)
        assert result.status == "ok", result.text
        assert result.value == "'back'"
        log = (tmp_path / "logs" / "demo.log").read_text()
        assert log.count(f": starting {sys.executable}") == 2


@pytest.mark.timeout(60)
async def test_an_http_server_that_dies_mid_call_leaves_the_call_pending_and_later_calls_fail(
    tmp_path: Path,
) -> None:
    async with http_demo() as url:
        config = {"mcpServers": {"web": {"url": url}}}
        async with Runtime(mcp_config=config, journal=":memory:", state_dir=tmp_path) as rt:
            code = """
errors = []
for call in (web.crash, web.image):
    try:
        await call()
    except ToolError as error:
        errors.append(str(error))
errors
"""
            result = await run(rt, code, time_limit=30)
    assert result.status == "ok", result.text
    crashed, later = ast.literal_eval(result.value or "")
    assert crashed.startswith("web/crash: the server behind this tool stopped")
    assert "'web' could not start: cannot connect" in later
    crash, image = sorted(result.calls.records, key=lambda record: record.made_at)
    assert (crash.fate, crash.cause) == ("pending", "source_gone")
    assert (image.fate, image.is_error) == ("seen", True)


@pytest.mark.parametrize("server", SERVERS)
async def test_every_call_sends_its_idempotency_key_in_the_requests_meta(
    rt: Runtime, server: str
) -> None:
    code = f"[await {server}.request_meta(), await {server}.request_meta()]"
    result = await run(rt, code)
    assert result.status == "ok", result.text
    first, second = (json.loads(said) for said in ast.literal_eval(result.value or "[]"))
    keys = [first.get("idempotencyKey"), second.get("idempotencyKey")]
    assert all(isinstance(key, str) and key.startswith(f"{result.script_id}.") for key in keys)
    assert keys[0] != keys[1], keys
