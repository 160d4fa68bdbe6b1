"""A stdio MCP server's pipes, read and written in the session's own tasks.

Goal: an MCP call through toolscript costs what the server and the SDK's session cost, no
more. What fails: the SDK's `stdio_client` puts a task between each pipe and the session: a
reader that parses the server's lines and hands each over a memory stream of size 0, and a
writer that takes each message off another. Every request and every answer takes one more
task switch and pass of the event loop, about 110 µs of the host's CPU per call here (on
cold caches, between the kernel's frames), a quarter of what toolscript added to a call.
What we do: the session's own `receive` reads the next line from the server's stdout and
parses it, and its own `send` writes to the server's stdin. The session, the messages and
their parsing are the SDK's (`ClientSession`, `jsonrpc_message_adapter`); only the pipes'
plumbing is ours. The process starts and stops as `stdio_client` starts and stops it: the
same environment, a session of its own, and at the end stdin closed, the SDK's grace period,
then the process group terminated and killed (the SDK's `terminate_posix_process_tree`),
while its stdout is drained so that a server blocked writing can see its stdin close.

The failures look as they did through `stdio_client`: a line that is not a JSON-RPC message
reaches the session as an exception (an empty line is skipped), and a server that exits ends
the read stream (`anyio.EndOfStream`). So does a write to a server that is gone, so that the
calls in flight fail as the session fails them when the connection ends, and so does a line
longer than `MAX_LINE`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import signal
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, suppress
from typing import TextIO

import anyio
import mcp_types as types
from anyio.abc import ByteReceiveStream, ByteSendStream, Process
from mcp.client.stdio import PROCESS_TERMINATION_TIMEOUT, get_default_environment
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

from .config import StdioServerConfig
from .streams import MessageReader

__all__ = ["MAX_LINE", "ServerInput", "ServerOutput", "stdio_streams"]

logger = logging.getLogger(__name__)

_KILL_TIMEOUT = 2.0
"""Seconds between SIGTERM and SIGKILL to the server's process group, and then for the
killed server to be seen gone (the SDK's figures)."""

_EXIT_POLL = 0.01
_WATCH_POLL = 0.25
"""Seconds between looks at whether a running server's process has exited."""
_CHUNK = 1 << 16

MAX_LINE = 256 * 1024 * 1024
"""The longest line a server may write, in bytes: four times the largest frame the kernel
takes (an answer that long could not reach the script anyway). A longer one ends the session,
as if the server had gone, instead of filling the host's memory."""


@asynccontextmanager
async def stdio_streams(
    config: StdioServerConfig, errlog: TextIO
) -> AsyncIterator[tuple[ServerOutput, ServerInput]]:
    """Start the server of `config` (its stderr to `errlog`) and give the session its stdout
    as a stream of messages and its stdin as a stream to send messages on; stop it on exit,
    even when cancelled, within about 2 + 2 + 2 seconds."""
    env = get_default_environment() | dict(config.env)
    process = await anyio.open_process(
        _dying_with_host([config.command, *config.args], env, config.cwd),
        env=env,
        cwd=config.cwd,
        stderr=errlog,
        start_new_session=True,
    )
    assert process.stdin is not None and process.stdout is not None
    output = ServerOutput(process.stdout)
    watch = asyncio.get_running_loop().create_task(_end_with(process))
    try:
        yield output, ServerInput(process.stdin, output)
    finally:
        watch.cancel()
        with anyio.CancelScope(shield=True):
            await _stop(process)


# Goal: a local server ends when its host does, however the host ends.
# What fails: a host killed with SIGKILL runs no stop. Its pipes close, and a server that
# reads its stdin sees the end and exits; one wedged in a call, or one that lives on after
# its stdin closes, runs on, an orphan nobody will stop.
# What we do: start it through util-linux's `setpriv --pdeathsig KILL`, which sets
# `PR_SET_PDEATHSIG` and then execs the command in place (the same process, pid and return
# code; `anyio.open_process` takes no `preexec_fn` to do it ourselves). The kernel kills the
# server when the thread that started it (the event loop's) ends. Only the server itself:
# what it started lives on as before, where nothing but its host would stop it. Without
# `setpriv`, or when the command would not start, it is started as before, so that a
# missing command fails as itself and not as `setpriv`'s exit code.
_SETPRIV = shutil.which("setpriv") if sys.platform == "linux" else None


def _dying_with_host(argv: list[str], env: Mapping[str, str], cwd: str | None) -> list[str]:
    """`argv`, started so that the kernel kills it when its host dies, where it can be."""
    command = argv[0]
    if _SETPRIV is None:
        return argv
    if os.sep in command:  # as the child's exec finds it: from its working folder
        found = os.path.join(cwd or os.getcwd(), command)
        runnable = os.path.isfile(found) and os.access(found, os.X_OK)
    else:
        runnable = shutil.which(command, path=env.get("PATH", os.defpath)) is not None
    if not runnable:
        return argv
    return [_SETPRIV, "--pdeathsig", "KILL", "--", *argv]


class ServerOutput(MessageReader):
    """The server's stdout as the session reads it: one parsed message (or the exception its
    parse raised) per line; `anyio.EndOfStream` once the server closed it or it was ended.
    Its pipe is closed when the process is stopped, not when the session closes this."""

    def __init__(self, stdout: ByteReceiveStream) -> None:
        self._stdout = stdout
        self._buffer = bytearray()
        self._start = 0  # where the next line begins in `_buffer`
        self._searched = 0  # `_buffer[_start:_searched]` holds no newline
        self._ended = False

    async def receive(self) -> SessionMessage | Exception:
        buffer = self._buffer
        while True:
            end = buffer.find(b"\n", self._searched)
            if end >= 0:
                with memoryview(buffer) as view:
                    line = bytes(view[self._start : end])
                self._start = self._searched = end + 1
                if line.strip():
                    return _parse(line)
                continue  # an empty line is no message
            if self._start:  # keep only the unfinished line, so a long one is copied once
                del buffer[: self._start]
                self._start = 0
            self._searched = len(buffer)
            if self._ended:
                raise anyio.EndOfStream
            try:
                buffer += await self._stdout.receive(_CHUNK)
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                self._ended = True
                raise anyio.EndOfStream from None
            except OSError as error:
                self._ended = True
                raise anyio.EndOfStream from error
            if len(buffer) > MAX_LINE and buffer.find(b"\n", self._searched) < 0:
                buffer.clear()
                self._start = self._searched = 0
                await self.end()
                return ValueError(
                    f"the server wrote more than {MAX_LINE >> 20} MiB without a line's end, "
                    "so its session was ended"
                )

    async def end(self) -> None:
        """End the stream: a `receive` waiting now, and every later one, raises `EndOfStream`."""
        self._ended = True
        with suppress(OSError, anyio.ClosedResourceError, anyio.BrokenResourceError):
            await self._stdout.aclose()


# Goal: a request goes to the server without a pass of the event loop of its own. What
# fails: anyio's `send` on the process's stdin, which after its write and `drain` always
# yields to the loop once more (a "checkpoint"), so every MCP call paid a pass of the loop
# (a `select` and its bookkeeping) between its request and its answer. What we do: write
# to the asyncio `StreamWriter` under anyio's stream and `drain` it, which waits only while
# the pipe is full and raises once the server is gone, as anyio's `send` did; the session's
# own checkpoint before its write still delivers a cancellation. Where the stream is not
# asyncio's, anyio's `send` is used as before.
class ServerInput:
    """The server's stdin as the session writes it: one JSON line per message. A write that
    fails (the server is gone) ends `output`, as `stdio_client` ends its read stream."""

    def __init__(self, stdin: ByteSendStream, output: ServerOutput) -> None:
        self._stdin = stdin
        self._output = output
        writer = getattr(stdin, "_stream", None)  # anyio's wrapper of asyncio's stream
        self._writer = writer if isinstance(writer, asyncio.StreamWriter) else None

    async def send(self, message: SessionMessage, /) -> None:
        line = message.message.model_dump_json(by_alias=True, exclude_unset=True).encode()
        writer = self._writer
        try:
            if writer is None:
                await self._stdin.send(line + b"\n")
            elif writer.transport.is_closing():
                raise anyio.BrokenResourceError
            else:
                writer.writelines((line, b"\n"))
                await writer.drain()
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError, RuntimeError):
            # RuntimeError: uvloop's write to a pipe that is closed
            await self._output.end()

    async def aclose(self) -> None:
        pass  # closed when the process is stopped

    async def __aenter__(self) -> ServerInput:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        pass


def _parse(line: bytes) -> SessionMessage | Exception:
    try:
        message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError as error:
        unusable = _unusable_answer(line, error)
        if unusable is not None:
            return unusable
        return error  # the session hands it on, and the server's log says it
    return SessionMessage(message)


# Goal: a call the server answered ends, whatever the answer looks like.
# What fails: an answer JSON-RPC does not allow (`"result": null`, a result that is not an
# object) fails validation as a whole, so the session never learns which request it
# answered, and the call waits out its tool timeout, said to be "sent and may still take
# effect" though the server had answered.
# What we do: a line that names a request's id and holds a result or an error is that
# request's answer; one that cannot be read is an error answer saying so.
def _unusable_answer(line: bytes, error: ValueError) -> SessionMessage | None:
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict) or "method" in data or not ("result" in data or "error" in data):
        return None
    ident = data.get("id")
    if type(ident) not in (int, str):
        return None
    said = str(error).splitlines()[0] if str(error) else type(error).__name__
    return SessionMessage(
        types.JSONRPCError(
            jsonrpc="2.0",
            id=ident,
            error=types.ErrorData(
                code=types.INTERNAL_ERROR,
                message=f"the server's answer is not one JSON-RPC allows ({said[:300]})",
            ),
        )
    )


async def _stop(process: Process) -> None:
    """Close stdin, give the server the SDK's grace period to exit, then terminate and kill
    its process group; its stdout is drained meanwhile. Bounded: about 2 + 2 + 2 seconds."""
    assert process.stdin is not None and process.stdout is not None
    async with anyio.create_task_group() as group:
        group.start_soon(_drain, process.stdout)
        with suppress(OSError, anyio.ClosedResourceError, anyio.BrokenResourceError):
            await process.stdin.aclose()
        if not await _exited(process, PROCESS_TERMINATION_TIMEOUT):
            await terminate_posix_process_tree(process, _KILL_TIMEOUT)
            if not await _exited(process, _KILL_TIMEOUT):
                logger.warning("MCP server process %d outlived its kill; left behind", process.pid)
        if process.returncode is not None:
            _kill_group(process.pid)  # what it started and left, so none outlives it
        group.cancel_scope.cancel()
    with suppress(OSError, anyio.ClosedResourceError, anyio.BrokenResourceError):
        await process.stdout.aclose()
    # The asyncio transport stays open while a survivor holds a pipe, and warns when it is
    # collected; nothing public closes it (the SDK's `stdio_client` reaches it the same way).
    transport = getattr(getattr(process, "_process", None), "_transport", None)
    close = getattr(transport, "close", None)
    if callable(close):
        with suppress(PermissionError):
            close()


# Goal: a server that exits ends its stream, and leaves nothing of its own running.
# What fails: the stream ends when its stdout reaches its end, and a child the server
# started holds the same pipes (it inherited them): when the server dies, no end comes. Every
# call then waits out its tool timeout, the server is never started again, and the child
# outlives the runtime (the stop kills the process group only when the server itself is slow
# to exit).
# What we do: once the server's own process has exited, what is left of its process group
# (its session's, made at its start) is killed; the pipes then close, the stream ends after
# the last line the server wrote, and a call in flight is reported gone.
async def _end_with(process: Process) -> None:
    while process.returncode is None:
        await asyncio.sleep(_WATCH_POLL)
    _kill_group(process.pid)


def _kill_group(pid: int) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def _drain(stdout: ByteReceiveStream) -> None:
    with suppress(OSError, anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
        while True:
            await stdout.receive(_CHUNK)


async def _exited(process: Process, timeout: float) -> bool:
    """Whether the process exited within `timeout` seconds (by its return code: waiting for
    it would also wait for its pipes, which a child of the server may hold open)."""
    with anyio.move_on_after(timeout):
        while process.returncode is None:
            await anyio.sleep(_EXIT_POLL)
    return process.returncode is not None
