"""The read stream the SDK's session takes, made of a `receive` alone."""

from __future__ import annotations

from typing import Self

import anyio
from mcp.shared.message import SessionMessage

__all__ = ["MessageReader"]


class MessageReader:
    """A stream of a session's messages for a subclass that gives `receive` (the next one, or
    `anyio.EndOfStream` at the end): iterating it receives until the end; entering, leaving
    and closing it do nothing, since the transport under it owns what it reads."""

    async def receive(self) -> SessionMessage | Exception:
        raise NotImplementedError

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        pass

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        pass
