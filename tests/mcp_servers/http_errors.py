"""A streamable HTTP MCP server, in raw JSON-RPC, whose calls end in HTTP errors: what a
reverse proxy in front of a server answers. Prints `PORT <n>` once it listens.

    ok                 answers "ok"
    gateway_timeout    HTTP 504 with an HTML page (a proxy gave up; the tool may run on)
    bad_params         HTTP 400 with a JSON-RPC error in its body (the server's own refusal)
"""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOOLS = [
    {"name": name, "description": name, "inputSchema": {"type": "object", "properties": {}}}
    for name in ("ok", "gateway_timeout", "bad_params")
]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("mcp-session-id", "one")
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.send(405, b"")

    def do_DELETE(self) -> None:
        self.send(200, b"")

    def do_POST(self) -> None:
        message = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        if "id" not in message:
            self.send(202, b"")
            return
        ident, method = message["id"], message.get("method")
        params = message.get("params") or {}

        def answer(result: dict[str, Any], status: int = 200) -> None:
            self.send(status, json.dumps({"jsonrpc": "2.0", "id": ident, **result}).encode())

        if method == "initialize":
            answer(
                {
                    "result": {
                        "protocolVersion": params.get("protocolVersion"),
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "http-errors", "version": "1"},
                    }
                }
            )
        elif method == "tools/list":
            answer({"result": {"tools": TOOLS}})
        elif method == "tools/call" and params.get("name") == "ok":
            answer({"result": {"content": [{"type": "text", "text": "ok"}]}})
        elif method == "tools/call" and params.get("name") == "gateway_timeout":
            self.send(504, b"<html><h1>504 Gateway Time-out</h1></html>", "text/html")
        elif method == "tools/call" and params.get("name") == "bad_params":
            answer({"error": {"code": -32602, "message": "bad params"}}, status=400)
        else:
            answer({"error": {"code": -32601, "message": "no such method"}})


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
