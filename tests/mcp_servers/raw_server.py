"""An MCP stdio server written by hand, for what the SDK's server never does on the wire.

It answers `initialize`, `tools/list` and these tools (any other request: a JSON-RPC error):

    noisy(text)     writes a line that is not JSON and an empty line, then the answer cut in
                    two writes with a pause between (one line across reads), then echoes `text`
    deafen()        answers, then closes its stdin (every descriptor of it) and lives on with
                    its stdout open, as a server whose input broke: the client's next write
                    fails
    flood(bytes)    writes `bytes` bytes of one line that never ends, and lives on
    orphan(pid_file) starts a child that inherits its pipes (writing the child's pid to
                    `pid_file`), then dies mid-call: the pipes stay open
    null()          answers `"result": null`, which JSON-RPC does not allow

With `--unreadable-tool`, it also lists `loose`, whose schema the SDK's model rejects
(`"required": "text"`, not a list); called, it echoes its arguments as JSON.

Run: python raw_server.py [--unreadable-tool]
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

TOOLS = [
    {"name": name, "description": text, "inputSchema": {"type": "object", "properties": {}}}
    for name, text in (
        ("noisy", "Garbage around an answer cut in two."),
        ("deafen", "Stop reading stdin."),
        ("flood", "Write bytes without a line's end."),
        ("orphan", "Leave a child holding the pipes, and die."),
        ("null", "Answer a null result."),
    )
]

if "--unreadable-tool" in sys.argv:
    TOOLS.append(
        {
            "name": "loose",
            "description": "Echo the arguments.",
            "inputSchema": {
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": "text",
            },
        }
    )


def write(data: bytes) -> None:
    os.write(1, data)


def send(message: dict[str, Any]) -> None:
    write(json.dumps(message).encode() + b"\n")


def text_result(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": False}


def main() -> None:
    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        message = json.loads(line)
        method, ident = message.get("method"), message.get("id")
        if ident is None:
            continue  # a notification
        params = message.get("params") or {}
        if method == "initialize":
            send(
                {
                    "jsonrpc": "2.0",
                    "id": ident,
                    "result": {
                        "protocolVersion": params.get("protocolVersion"),
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "raw", "version": "1"},
                    },
                }
            )
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": ident, "result": {"tools": TOOLS}})
        elif method == "tools/call" and params.get("name") == "noisy":
            text = (params.get("arguments") or {}).get("text", "")
            write(b"this is not JSON-RPC\n\n")
            answer = json.dumps({"jsonrpc": "2.0", "id": ident, "result": text_result(text)})
            half = len(answer) // 2
            write(answer[:half].encode())
            time.sleep(0.05)
            write(answer[half:].encode() + b"\n")
        elif method == "tools/call" and params.get("name") == "flood":
            size = int((params.get("arguments") or {}).get("bytes", 0))
            for _ in range(size >> 16):
                write(b"x" * (1 << 16))
            time.sleep(600)
            return
        elif method == "tools/call" and params.get("name") == "orphan":
            import subprocess

            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
            with open((params.get("arguments") or {})["pid_file"], "w") as pid_file:
                pid_file.write(str(child.pid))
            os._exit(3)
        elif method == "tools/call" and params.get("name") == "loose":
            arguments = json.dumps(params.get("arguments") or {}, sort_keys=True)
            send({"jsonrpc": "2.0", "id": ident, "result": text_result(arguments)})
        elif method == "tools/call" and params.get("name") == "null":
            send({"jsonrpc": "2.0", "id": ident, "result": None})
        elif method == "tools/call" and params.get("name") == "deafen":
            # Deaf before it answers: a client that writes its next request at once, in the
            # moment between an answer and a close after it, would find the pipe still read.
            os.close(0)
            os.closerange(3, 1 << 16)  # and the copies of it uvloop's spawn leaves open here
            send({"jsonrpc": "2.0", "id": ident, "result": text_result("deaf now")})
            time.sleep(600)
            return
        else:
            error = {"code": -32601, "message": f"no such method here: {method}"}
            send({"jsonrpc": "2.0", "id": ident, "error": error})


if __name__ == "__main__":
    main()
