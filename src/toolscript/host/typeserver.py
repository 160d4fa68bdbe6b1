"""`TypeServer`: one `ty server` process, asked for the diagnostics of one file at a time.

Goal: the check before running costs a few milliseconds, so that it can be on by default.

What fails: `ty check` as a process per script. Each process reads and types the standard
library's stubs again before it reads a line of the script: some 60 ms on a quiet machine,
most of the budget, however short the script.

What we do: keep one `ty server` (the language server in the same binary) per folder of
stubs, speaking the Language Server Protocol over its stdin and stdout. It keeps what it has
typed, so a script costs only its own lines. Each check opens the script as an unsaved
document (nothing is written to disk), pulls its diagnostics, and closes it. Requests are
answered in turn, one check at a time. A server that dies, or does not answer within the
timeout, is killed; the next check starts another.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
from pathlib import Path
from typing import Any

from ..tools.check import Diagnostic

__all__ = ["TypeServer", "TypeServerError"]


class TypeServerError(Exception):
    """The type server could not start or answer; the message says why."""


class TypeServer:
    """A `ty server` whose project is `folder`."""

    def __init__(self, binary: str, folder: Path) -> None:
        self.folder = folder
        self._binary = binary
        self._process: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._numbers = itertools.count(1)
        self._documents = itertools.count(1)
        self._lock = asyncio.Lock()

    async def diagnostics(self, text: str, timeout: float) -> list[Diagnostic]:
        """The diagnostics of `text`, read as a file of the project. Raises `TypeServerError`."""
        async with self._lock:
            try:
                async with asyncio.timeout(timeout):
                    return await self._diagnose_on_a_live_server(text)
            except TimeoutError:
                await self.close()
                raise TypeServerError(f"ty did not answer within {timeout:g} s") from None
            except (OSError, ConnectionError, asyncio.IncompleteReadError) as error:
                await self.close()
                raise TypeServerError(f"ty server failed: {error}") from None

    async def _diagnose_on_a_live_server(self, text: str) -> list[Diagnostic]:
        """`_diagnose` on the running server; once more on a new one if that one has gone (it
        may have died since the last check, before its end was seen)."""
        reader = self._reader
        if reader is not None and not reader.done():
            try:
                return await self._diagnose(text)
            except (OSError, ConnectionError, asyncio.IncompleteReadError):
                await self.close()
        await self._start()
        return await self._diagnose(text)

    async def _diagnose(self, text: str) -> list[Diagnostic]:
        uri = (self.folder / f"script_{next(self._documents)}.py").as_uri()
        document = {"uri": uri, "languageId": "python", "version": 1, "text": text}
        self._notify("textDocument/didOpen", {"textDocument": document})
        try:
            answer = await self._request("textDocument/diagnostic", {"textDocument": {"uri": uri}})
        finally:
            self._notify("textDocument/didClose", {"textDocument": {"uri": uri}})
        found = []
        for item in (answer or {}).get("items", []):
            start = item.get("range", {}).get("start", {})
            found.append(
                Diagnostic(
                    int(start.get("line", 0)) + 1,
                    int(start.get("character", 0)),
                    str(item.get("code", "")),
                    str(item.get("message", "")),
                )
            )
        return found

    async def _start(self) -> None:
        await self.close()
        environment = {
            name: value
            for name, value in os.environ.items()
            if name not in ("VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONPATH")
        }
        self._process = await asyncio.create_subprocess_exec(
            self._binary,
            "server",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            cwd=self.folder,
            env=environment,
        )
        self._reader = asyncio.get_running_loop().create_task(self._read(self._process))
        root = self.folder.as_uri()
        await self._request(
            "initialize",
            {
                "processId": os.getpid(),
                "rootUri": root,
                "workspaceFolders": [{"uri": root, "name": "check"}],
                # Columns in characters, as Python's own `str` counts them.
                "capabilities": {
                    "general": {"positionEncodings": ["utf-32"]},
                    "textDocument": {"diagnostic": {}},
                },
            },
        )
        self._notify("initialized", {})

    def _notify(self, method: str, params: dict[str, Any]) -> None:
        self._send({"jsonrpc": "2.0", "method": method, "params": params})

    async def _request(self, method: str, params: dict[str, Any]) -> Any:
        number = next(self._numbers)
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[number] = answer
        try:
            self._send({"jsonrpc": "2.0", "id": number, "method": method, "params": params})
            return await answer
        finally:
            self._waiting.pop(number, None)

    def _send(self, message: dict[str, Any]) -> None:
        process = self._process
        if process is None or process.stdin is None:
            raise ConnectionError("ty server is not running")
        body = json.dumps(message).encode("utf-8")
        process.stdin.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))

    async def _read(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None
        stream = process.stdout
        try:
            while True:
                length = 0
                while (header := await stream.readline()) not in (b"\r\n", b""):
                    name, _, value = header.decode("ascii", "replace").partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                if header == b"":
                    raise ConnectionError("ty server exited")
                message = json.loads(await stream.readexactly(length))
                self._take(message)
        except (ConnectionError, ValueError, asyncio.IncompleteReadError) as error:
            for waiting in self._waiting.values():
                if not waiting.done():
                    waiting.set_exception(ConnectionError(f"ty server: {error}"))

    def _take(self, message: dict[str, Any]) -> None:
        number = message.get("id")
        if "method" in message:
            if number is not None:  # a request of the server's own: no setting, no capability
                items = message.get("params", {}).get("items")
                result = [None] * len(items) if isinstance(items, list) else None
                self._send({"jsonrpc": "2.0", "id": number, "result": result})
            return
        waiting = self._waiting.get(number) if isinstance(number, int) else None
        if waiting is None or waiting.done():
            return
        if "error" in message:
            waiting.set_exception(ConnectionError(f"ty server: {message['error']}"))
        else:
            waiting.set_result(message.get("result"))

    async def close(self) -> None:
        """End the server (bounded); the next check starts another."""
        process, self._process = self._process, None
        reader, self._reader = self._reader, None
        if process is not None and process.returncode is None:
            process.kill()
            with contextlib.suppress(ProcessLookupError):
                await process.wait()
        if process is not None and process.stdin is not None:
            # A write the server could no longer read (it had died, or was just killed) left
            # its error on the pipe's close waiter: taken here. Left alone, Python 3.11.2
            # logs it as never retrieved when the collector frees it, and its own bug then
            # makes whatever `ast.parse` runs at that moment raise `SystemError` (the check
            # of the next script, say).
            process.stdin.close()
            with contextlib.suppress(Exception):
                await process.stdin.wait_closed()
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
