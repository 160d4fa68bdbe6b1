"""A real MCP server for toolscript's tests, built on the SDK's low-level server.

The low-level server takes raw JSON Schemas, which is how a tool gets parameters named
`file-path`, `class`, `kwargs` and `from`. Tools (one per behaviour a test needs):

    echo(text)                 a text result; annotated read-only, titled "Echo"
    add(a, b)                  structured content {"sum": ...} with an output schema
    image()                    one PNG image block
    mixed()                    text, image, audio, embedded resources and a resource link
    fail(message)              an error result (isError)
    odd_names(file-path, class, kwargs, from)    returns the arguments it received
    crash()                    the process exits in the middle of the call
    hang(marker)               never answers; on cancellation it writes `marker` and records it
    cancellations(timeout)     waits (bounded) until a `hang` was cancelled; lists the markers
    slow(seconds)              answers after `seconds`
    grow(name)                 adds a tool called `name` and sends tools/list_changed
    client_capabilities()      the capabilities the client declared
    header(name)               an HTTP request header as the server received it ("" on stdio)
    to_stderr(text)            writes `text` to stderr
    request_meta()             the request's `_meta`, as JSON

Run over stdio:           python demo_server.py [--linger] [--pid-file F]
Run over streamable HTTP: python demo_server.py --http
(binds 127.0.0.1 on a port the OS chooses and prints `PORT <n>` on stdout once listening).
`--linger` keeps the process alive after stdin closes and ignores SIGTERM, like a server that
does not exit when its client goes.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def _schema(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required or []}


TOOLS: list[types.Tool] = [
    types.Tool(
        name="echo",
        description="Say the text back.",
        input_schema=_schema({"text": {"type": "string"}}, ["text"]),
        annotations=types.ToolAnnotations(title="Echo", read_only_hint=True),
    ),
    types.Tool(
        name="add",
        description="Add two integers.",
        input_schema=_schema({"a": {"type": "integer"}, "b": {"type": "integer"}}, ["a", "b"]),
        output_schema=_schema({"sum": {"type": "integer"}}, ["sum"]),
    ),
    types.Tool(name="image", description="A tiny PNG.", input_schema=_schema({})),
    types.Tool(name="mixed", description="One block of each kind.", input_schema=_schema({})),
    types.Tool(
        name="fail",
        description="Report an error.",
        input_schema=_schema({"message": {"type": "string"}}, ["message"]),
    ),
    types.Tool(
        name="odd_names",
        description="Parameters that are not Python identifiers, or are keywords.",
        input_schema=_schema(
            {
                "file-path": {"type": "string", "description": "A path."},
                "class": {"type": "string"},
                "kwargs": {"type": "object"},
                "from": {"type": "integer"},
            },
            ["file-path"],
        ),
        output_schema={"type": "object", "description": "The arguments it received."},
    ),
    types.Tool(name="crash", description="Exit mid-call.", input_schema=_schema({})),
    types.Tool(
        name="hang",
        description="Never answer.",
        input_schema=_schema({"marker": {"type": "string"}}, ["marker"]),
    ),
    types.Tool(
        name="cancellations",
        description="Wait until a hang was cancelled.",
        input_schema=_schema({"timeout": {"type": "number"}}),
        output_schema=_schema({"markers": {"type": "array", "items": {"type": "string"}}}),
    ),
    types.Tool(
        name="slow",
        description="Answer after a delay.",
        input_schema=_schema({"seconds": {"type": "number"}}, ["seconds"]),
    ),
    types.Tool(
        name="grow",
        description="Add a tool and announce the change.",
        input_schema=_schema({"name": {"type": "string"}}, ["name"]),
    ),
    types.Tool(
        name="client_capabilities",
        description="What the client declared.",
        input_schema=_schema({}),
        output_schema={"type": "object"},
    ),
    types.Tool(
        name="header",
        description="An HTTP request header.",
        input_schema=_schema({"name": {"type": "string"}}, ["name"]),
    ),
    types.Tool(
        name="request_meta",
        description="The request's _meta.",
        input_schema=_schema({}),
    ),
    types.Tool(
        name="to_stderr",
        description="Write to stderr.",
        input_schema=_schema({"text": {"type": "string"}}, ["text"]),
    ),
]

cancelled_markers: list[str] = []
cancelled = anyio.Event()


def _text(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)])


async def list_tools(
    ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(
    ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
) -> types.CallToolResult:
    global cancelled
    args = params.arguments or {}
    name = params.name
    if name == "echo":
        return _text(args["text"])
    if name == "add":
        total = int(args["a"]) + int(args["b"])
        return types.CallToolResult(
            content=[types.TextContent(text=f'{{"sum": {total}}}')],
            structured_content={"sum": total},
        )
    if name == "image":
        return types.CallToolResult(
            content=[types.ImageContent(data=base64.b64encode(PNG).decode(), mime_type="image/png")]
        )
    if name == "mixed":
        return types.CallToolResult(
            content=[
                types.TextContent(text="caption"),
                types.ImageContent(data=base64.b64encode(PNG).decode(), mime_type="image/png"),
                types.AudioContent(data=base64.b64encode(b"RIFF").decode(), mime_type="audio/wav"),
                types.EmbeddedResource(
                    resource=types.TextResourceContents(
                        uri="note://1", mime_type="text/plain", text="hello"
                    )
                ),
                types.EmbeddedResource(
                    resource=types.BlobResourceContents(
                        uri="blob://1",
                        mime_type="application/octet-stream",
                        blob=base64.b64encode(b"\x00\x01").decode(),
                    )
                ),
                types.ResourceLink(
                    uri="file:///tmp/report.csv", name="report", mime_type="text/csv"
                ),
            ]
        )
    if name == "fail":
        return types.CallToolResult(
            content=[types.TextContent(text=args["message"])], is_error=True
        )
    if name == "odd_names":
        return types.CallToolResult(
            content=[types.TextContent(text="received")], structured_content=dict(args)
        )
    if name == "crash":
        sys.stderr.write("crashing on purpose\n")
        sys.stderr.flush()
        os._exit(3)
    if name == "hang":
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                Path(args["marker"]).write_text("cancelled")
                cancelled_markers.append(args["marker"])
                cancelled.set()
    if name == "cancellations":
        with anyio.move_on_after(float(args.get("timeout", 5.0))):
            await cancelled.wait()
        markers = list(cancelled_markers)
        cancelled_markers.clear()
        cancelled = anyio.Event()
        return types.CallToolResult(
            content=[types.TextContent(text=",".join(markers))],
            structured_content={"markers": markers},
        )
    if name == "slow":
        await anyio.sleep(float(args["seconds"]))
        return _text("slept")
    if name == "grow":
        TOOLS.append(
            types.Tool(
                name=args["name"], description="Added at run time.", input_schema=_schema({})
            )
        )
        await ctx.session.send_tool_list_changed()
        return _text("grown")
    if name == "client_capabilities":
        capabilities = ctx.session.client_capabilities
        dumped = capabilities.model_dump(mode="json", exclude_none=True) if capabilities else {}
        return types.CallToolResult(
            content=[types.TextContent(text=str(dumped))], structured_content=dumped
        )
    if name == "header":
        request = ctx.request
        headers = getattr(request, "headers", None)
        return _text("" if headers is None else headers.get(args["name"], ""))
    if name == "request_meta":
        meta = params.meta
        dumped = meta if isinstance(meta, dict) else getattr(meta, "model_dump", dict)()
        return _text(json.dumps(dumped or {}, default=str))
    if name == "to_stderr":
        sys.stderr.write(args["text"] + "\n")
        sys.stderr.flush()
        return _text("written")
    return types.CallToolResult(
        content=[types.TextContent(text=f"Unknown tool: {name}")], is_error=True
    )


server = Server("toolscript-demo", on_list_tools=list_tools, on_call_tool=call_tool)


async def serve_stdio() -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        await server.run(
            read,
            write,
            server.create_initialization_options(NotificationOptions(tools_changed=True)),
        )


async def serve_http() -> None:
    import uvicorn

    app = server.streamable_http_app()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    print(f"PORT {listener.getsockname()[1]}", flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve(sockets=[listener])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", action="store_true")
    parser.add_argument("--linger", action="store_true")
    parser.add_argument("--pid-file")
    options = parser.parse_args()
    if options.pid_file:
        Path(options.pid_file).write_text(str(os.getpid()))
    if options.linger:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    anyio.run(serve_http if options.http else serve_stdio)
    if options.linger:
        sys.stderr.write("stdin closed; lingering\n")
        sys.stderr.flush()
        time.sleep(3600)


if __name__ == "__main__":
    main()
