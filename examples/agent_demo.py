"""A whole agent turn, with no API key: `python examples/agent_demo.py`.

It needs the `agent` extra (`pip install -e '.[agent]'`). A tiny stand-in model server starts
on 127.0.0.1 and answers the official Anthropic SDK in the real Messages streaming format with
two scripted replies: first a `run_python` call whose script uses the Python tool
`lookup_price` registered here, then a `finish` call. `toolscript.agent.Agent` runs the turn in
real sandboxed interpreters and the demo prints how it ended and what the model read.
"""

from __future__ import annotations

import asyncio
import json
import textwrap
from typing import Any

from toolscript import Runtime, tool
from toolscript.agent import Agent, ExecutionControl

PRICES = {"coffee": 4.5, "bagel": 2.25}

SCRIPT = """
order = ["coffee", "bagel", "coffee"]
prices = [await lookup_price(item=item) for item in order]
print("prices:", prices)
sum(prices)
"""

REPLIES = [  # what the stand-in model says, one reply per request: (tool name, input)
    ("run_python", {"code": SCRIPT, "time_limit_s": 10}),
    ("finish", {"summary": "The order costs 11.25: two coffees at 4.50 and a bagel at 2.25."}),
]


@tool
async def lookup_price(item: str) -> float:
    """The price of one item on the menu."""
    return PRICES[item]


def sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps({'type': event, **data})}\n\n".encode()


def anthropic_stream(name: str, arguments: dict[str, Any]) -> bytes:
    """One assistant message that calls tool `name`, as Anthropic Messages stream events."""
    message = {"id": "msg_demo", "type": "message", "role": "assistant", "model": "stand-in"}
    message |= {"content": [], "stop_reason": None, "usage": {"input_tokens": 1}}
    block = {"type": "tool_use", "id": f"toolu_{name}", "name": name, "input": {}}
    delta = {"type": "input_json_delta", "partial_json": json.dumps(arguments)}
    return b"".join(
        [
            sse("message_start", {"message": message}),
            sse("content_block_start", {"index": 0, "content_block": block}),
            sse("content_block_delta", {"index": 0, "delta": delta}),
            sse("content_block_stop", {"index": 0}),
            sse("message_delta", {"delta": {"stop_reason": "tool_use"}, "usage": {}}),
            sse("message_stop", {}),
        ]
    )


async def serve_replies(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answer one HTTP request (POST /v1/messages) with the next scripted reply."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").lower()
    length = int(head.split("content-length:")[1].split("\r\n")[0])
    await reader.readexactly(length)  # the request: system prompt, tools, messages so far
    body = anthropic_stream(*REPLIES.pop(0))
    writer.write(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body)
    )
    await writer.drain()
    writer.close()


async def main() -> None:
    server = await asyncio.start_server(serve_replies, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server, Runtime(tools=[lookup_price], journal=":memory:") as rt:
        agent = Agent(
            "anthropic:stand-in",
            runtime=rt,
            base_url=f"http://127.0.0.1:{port}",
            api_key="demo",  # the SDK needs a key; the stand-in ignores it
            control=ExecutionControl(request_timeout=30, lifetime_timeout=60),
        )
        turn = await agent.run("What does an order of two coffees and a bagel cost?")

    print("stop reason:", turn.stop_reason)
    print("steps:", turn.steps)
    read = [r for e in turn.transcript if e["role"] == "tool_results" for r in e["results"]]
    for result in read:
        if result["name"] == "run_python":
            print("the script's result, as the model read it:")
            print(textwrap.indent(result["text"].strip(), "    "))
    print("summary:", turn.summary)


if __name__ == "__main__":
    asyncio.run(main())
