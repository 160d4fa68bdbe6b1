"""Model providers: one streamed request in, one `ModelReply` out.

A provider speaks one API through its official SDK, with the SDK's own retries turned off: the
loop retries itself, and only before any content of the step has streamed. A provider never
decides the turn's stop reason; it reports what the stream did (`ModelReply.complete`,
`ModelReply.broken`) or raises `ModelError`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

from ..conversation import ActionTool, Message, ModelReply, StreamProgress

PROVIDERS = ("anthropic", "openai")

T = TypeVar("T")

SDK_TIMEOUT_MARGIN = 5.0
"""The SDK's own timeout is looser than the loop's deadline, so the loop's always fires first."""


class ModelError(Exception):
    """A model request failed before or while it streamed.

    `retryable` is true for rate limits, overloads, server errors and failed connections;
    `status` is the HTTP status when there was one; `retry_after` the seconds the server asked
    to wait, if it said.
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status
        self.retry_after = retry_after


class Provider(Protocol):
    """One model behind one API."""

    name: str
    model: str

    async def stream(
        self,
        system: str,
        history: Sequence[Message],
        tools: Sequence[ActionTool],
        progress: StreamProgress,
    ) -> ModelReply:
        """Send one request and read its stream to the end, writing `progress` as it reads.

        Returns the reply, `complete` only if the terminal event came; raises `ModelError`
        when the request failed. The caller bounds the time.
        """
        ...


RETRYABLE_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
RETRYABLE_ERROR_TYPES = frozenset({"overloaded_error", "rate_limit_error", "api_error"})


def status_error(
    message: str, status: int, error_type: str | None, retry_after_header: str | None
) -> ModelError:
    """A `ModelError` for an HTTP error status, or an error event inside a stream (whose
    `status` is the stream's 200, so its `error_type` decides)."""
    retry_after: float | None = None
    if retry_after_header is not None:
        try:
            retry_after = max(0.0, float(retry_after_header))
        except ValueError:
            retry_after = None
    in_stream = status < 300
    retryable = status in RETRYABLE_STATUSES or (in_stream and error_type in RETRYABLE_ERROR_TYPES)
    said = (
        f"the model API sent an error in the stream ({error_type or 'no type'}): {message}"
        if in_stream
        else f"the model API answered {status}: {message}"
    )
    return ModelError(
        said,
        retryable=retryable,
        status=status,
        retry_after=retry_after,
    )


async def send(request: Awaitable[T], request_error: Callable[[Exception], ModelError]) -> T:
    """Await the SDK call that opens a stream; any failure becomes a `ModelError`."""
    try:
        return await request
    except Exception as err:
        raise request_error(err) from err


def could_not_send(err: Exception, connection_error: type[Exception]) -> ModelError:
    """The `ModelError` for a request that failed without an HTTP status: a failed
    connection may be retried, anything else (no credentials, a bad argument) not."""
    if isinstance(err, connection_error):
        return ModelError(f"could not reach the model API: {err}", retryable=True)
    return ModelError(
        f"could not send the model request: {type(err).__name__}: {err}", retryable=False
    )


async def read_to_end(
    events: AsyncIterator[Any],
    take: Callable[[Any], None],
    stream_error: Callable[[Exception], ModelError | None],
    reply: ModelReply,
) -> None:
    """Feed each item of `events` to `take` until the stream ends.

    An exception while reading is turned by `stream_error` into a `ModelError` (raised: the
    API said something went wrong), or, when it returns `None`, means the connection broke:
    the reply is marked `broken` unless its terminal event had already come. Nothing after
    the terminal event is read: the model's reply ended there, and a tool call a broken
    server streams after it is no call of the model's.
    """
    iterator = events.__aiter__()
    while True:
        try:
            item = await iterator.__anext__()
        except StopAsyncIteration:
            return
        except Exception as err:
            error = stream_error(err)
            if error is not None:
                raise error from err
            if not reply.complete:
                reply.broken = _broken_words(err)
            return
        take(item)
        if reply.complete:
            return


def _broken_words(err: Exception) -> str:
    """Why a stream that failed while being read broke: its data, or the connection."""
    if isinstance(err, json.JSONDecodeError):
        return f"the model server sent an event that is not valid JSON ({err})"
    if isinstance(err, UnicodeDecodeError):
        return f"the model server sent bytes that are not UTF-8 text ({err})"
    return f"the connection broke mid-stream ({type(err).__name__}: {err})"


def split_model(model: str) -> tuple[str, str]:
    """`"anthropic:claude-x"` → `("anthropic", "claude-x")`; a `ValueError` naming `model`
    otherwise."""
    provider, sep, name = model.partition(":")
    if not sep or provider not in PROVIDERS or not name:
        raise ValueError(f"model: expected 'anthropic:MODEL' or 'openai:MODEL', not {model!r}")
    return provider, name


def check_base_url(base_url: object) -> None:
    """Raise `ValueError` unless `base_url` is None or an http(s) URL with a host: anything
    else would only fail at the first request, as a connection error after its retries."""
    if base_url is None:
        return
    from urllib.parse import urlsplit

    if not isinstance(base_url, str):
        raise ValueError(f"base_url: expected an http(s) URL, not {base_url!r}")
    try:
        parts = urlsplit(base_url)
        host = parts.hostname
    except ValueError:
        host = None
    else:
        if parts.scheme not in ("http", "https"):
            host = None
    if not host:
        raise ValueError(
            f"base_url: expected an http(s) URL such as http://127.0.0.1:8000/v1, "
            f"not {base_url[:200]!r}"
        )


def make_provider(
    model: str,
    *,
    base_url: str | None,
    api_key: str | None,
    request_timeout: float,
    max_tokens: int,
) -> Provider:
    """The provider for `model` (`"anthropic:MODEL"` or `"openai:MODEL"`)."""
    provider, name = split_model(model)
    check_base_url(base_url)
    if provider == "anthropic":
        from .anthropic import AnthropicProvider

        return AnthropicProvider(
            name,
            base_url=base_url,
            api_key=api_key,
            request_timeout=request_timeout,
            max_tokens=max_tokens,
        )
    from .openai import OpenAIProvider

    return OpenAIProvider(
        name,
        base_url=base_url,
        api_key=api_key,
        request_timeout=request_timeout,
        max_tokens=max_tokens,
    )
