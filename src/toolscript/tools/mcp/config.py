"""The `{"mcpServers": {...}}` file that MCP clients already use, read into typed server configs.

Each entry is either a stdio server (`command`, optional `args`, `env`, `cwd`) or a streamable
HTTP server (`url`, optional `headers`). A `type` field is tolerated: `stdio`, `http` or
`streamable-http`; `sse` is refused with a message saying so. Keys this reader does not use are
ignored, so a file written for another client still loads.

`${VAR}` and `${VAR:-default}` in `command`, `args`, `env`, `cwd`, `url` and `headers` are
replaced by the host's environment variable (or the default) when the file is read; a variable
that is not set and has no default is an error naming the server and the field. Write `$${` for
a literal `${`.

Read from a file, a relative `cwd` is relative to the file's folder, so a config and the
servers beside it work from any folder. A `command` of `python` or `python3` is the Python
running toolscript (`PYTHON_COMMANDS`).
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PYTHON_COMMANDS = ("python", "python3")
"""A server whose `command` is one of these runs under the Python running toolscript, not
whichever `python` is first on `PATH`: a config written as `"command": "python"` then finds
the packages installed beside toolscript (a virtual environment that is not activated)."""


class MCPConfigError(ValueError):
    """The MCP config is not usable. The message names the server and the field at fault.

    `server` is the server's name when the problem is inside one entry, else `None`;
    `field` is the offending key, when there is one.
    """

    def __init__(self, message: str, *, server: str | None = None, field: str | None = None):
        super().__init__(message)
        self.server = server
        self.field = field


@dataclass(frozen=True, slots=True)
class StdioServerConfig:
    """A server toolscript starts as a child process and talks to over its stdin and stdout."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None


@dataclass(frozen=True, slots=True)
class HTTPServerConfig:
    """A server reached over streamable HTTP at `url`, with `headers` sent on every request."""

    name: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)


ServerConfig = StdioServerConfig | HTTPServerConfig


@dataclass(frozen=True, slots=True)
class MCPConfig:
    """Every configured server, by its name in the file, in the file's order."""

    servers: dict[str, ServerConfig] = field(default_factory=dict)
    disabled: tuple[str, ...] = ()
    """Servers the file marks `"disabled": true`, as MCP clients do: not started."""


def load_mcp_config(source: str | os.PathLike[str] | Mapping[str, Any]) -> MCPConfig:
    """Read an MCP config from a file path or from the already-parsed dict.

    Raises `MCPConfigError` with a sentence naming the server and the field for anything it
    cannot use: a missing file, invalid JSON, a missing `mcpServers`, an entry with neither
    `command` nor `url`, a value of the wrong type, an unset `${VAR}`.
    """
    if isinstance(source, Mapping):
        return _parse(source, None)
    path = Path(source)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise MCPConfigError(
            f"Cannot read the MCP config file {str(path)!r}: {exc.strerror or exc}."
        ) from exc
    except UnicodeDecodeError as exc:
        raise MCPConfigError(
            f"The MCP config file {str(path)!r} is not UTF-8 text ({exc.reason} at byte "
            f"{exc.start})."
        ) from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MCPConfigError(
            f"The MCP config file {str(path)!r} is not valid JSON: {exc.msg} "
            f"at line {exc.lineno}, column {exc.colno}."
        ) from exc
    if not isinstance(data, Mapping):
        raise MCPConfigError(
            f"The MCP config file {str(path)!r} must hold a JSON object with an "
            f'"mcpServers" key, not {_json_kind(data)}.'
        )
    return _parse(data, path.resolve().parent)


def _parse(data: Mapping[str, Any], folder: Path | None) -> MCPConfig:
    if "mcpServers" not in data:
        raise MCPConfigError(
            'The MCP config has no "mcpServers" key; expected {"mcpServers": {name: {...}}}.',
            field="mcpServers",
        )
    entries = data["mcpServers"]
    if not isinstance(entries, Mapping):
        raise MCPConfigError(
            f'"mcpServers" must be an object mapping server names to settings, '
            f"not {_json_kind(entries)}.",
            field="mcpServers",
        )
    servers: dict[str, ServerConfig] = {}
    disabled: list[str] = []
    for name, entry in entries.items():
        if not isinstance(name, str) or not name:
            raise MCPConfigError(f"An MCP server name must be a non-empty string, not {name!r}.")
        if isinstance(entry, Mapping) and entry.get("disabled") is True:
            disabled.append(name)  # the user switched it off in their client: so do we
            continue
        servers[name] = _parse_server(name, entry, folder)
    return MCPConfig(servers=servers, disabled=tuple(disabled))


def _parse_server(name: str, entry: Any, folder: Path | None) -> ServerConfig:
    if not isinstance(entry, Mapping):
        raise MCPConfigError(
            f"MCP server {name!r}: its settings must be an object, not {_json_kind(entry)}.",
            server=name,
        )
    kind = entry.get("type")
    if kind is not None and kind not in ("stdio", "http", "streamable-http", "streamableHttp"):
        if kind == "sse":
            raise MCPConfigError(
                f"MCP server {name!r}: the legacy SSE transport is not supported; "
                'use a streamable HTTP endpoint ("type": "http") or a stdio command.',
                server=name,
                field="type",
            )
        raise MCPConfigError(
            f"MCP server {name!r}: unknown \"type\" {kind!r}; expected 'stdio' or 'http'.",
            server=name,
            field="type",
        )
    has_command, has_url = "command" in entry, "url" in entry
    if has_command and has_url:
        raise MCPConfigError(
            f'MCP server {name!r} has both "command" and "url"; give one: '
            '"command" for a local process, "url" for streamable HTTP.',
            server=name,
        )
    if kind == "stdio" and not has_command:
        raise MCPConfigError(
            f'MCP server {name!r} is of type "stdio" but has no "command".',
            server=name,
            field="command",
        )
    if kind is not None and kind != "stdio" and not has_url:
        raise MCPConfigError(
            f'MCP server {name!r} is of type {kind!r} but has no "url".',
            server=name,
            field="url",
        )
    if has_command:
        command = _expand(name, "command", _text(name, entry, "command", required=True))
        cwd = _optional_expand(name, "cwd", _text(name, entry, "cwd", required=False))
        if cwd is not None and folder is not None:
            cwd = str(folder / cwd)  # an absolute cwd stays as it is
        return StdioServerConfig(
            name=name,
            command=sys.executable if command in PYTHON_COMMANDS else command,
            args=tuple(_expand(name, "args", arg) for arg in _strings(name, entry, "args")),
            env={
                key: _expand(name, f"env.{key}", value)
                for key, value in _string_map(name, entry, "env").items()
            },
            cwd=cwd,
        )
    if has_url:
        url = _expand(name, "url", _text(name, entry, "url", required=True))
        if not url.startswith(("http://", "https://")):
            raise MCPConfigError(
                f'MCP server {name!r}: "url" must start with http:// or https://, got {url!r}.',
                server=name,
                field="url",
            )
        return HTTPServerConfig(
            name=name,
            url=url,
            headers={
                key: _expand(name, f"headers.{key}", value)
                for key, value in _string_map(name, entry, "headers").items()
            },
        )
    raise MCPConfigError(
        f'MCP server {name!r} has neither "command" (a local process) nor "url" (streamable HTTP).',
        server=name,
    )


def _text(name: str, entry: Mapping[str, Any], key: str, *, required: bool) -> str | None:
    value = entry.get(key)
    if value is None:
        if required:
            raise MCPConfigError(
                f"MCP server {name!r}: {key!r} is required.", server=name, field=key
            )
        return None
    if not isinstance(value, str) or (required and not value):
        said = "an empty string" if value == "" else _json_kind(value)
        raise MCPConfigError(
            f"MCP server {name!r}: {key!r} must be a non-empty string, not {said}.",
            server=name,
            field=key,
        )
    return value


def _strings(name: str, entry: Mapping[str, Any], key: str) -> list[str]:
    value = entry.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        said = (
            f"a list holding {_json_kind(next(i for i in value if not isinstance(i, str)))}"
            if isinstance(value, list)
            else _json_kind(value)
        )
        raise MCPConfigError(
            f"MCP server {name!r}: {key!r} must be a list of strings, not {said}.",
            server=name,
            field=key,
        )
    return list(value)


def _string_map(name: str, entry: Mapping[str, Any], key: str) -> dict[str, str]:
    value = entry.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise MCPConfigError(
            f"MCP server {name!r}: {key!r} must be an object of strings, not {_json_kind(value)}.",
            server=name,
            field=key,
        )
    result: dict[str, str] = {}
    for item_key, item in value.items():
        if not isinstance(item, str):
            raise MCPConfigError(
                f"MCP server {name!r}: {key}.{item_key} must be a string, not {_json_kind(item)}.",
                server=name,
                field=f"{key}.{item_key}",
            )
        result[str(item_key)] = item
    return result


_VARIABLE = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _expand(name: str, where: str, text: str | None) -> str:
    assert text is not None
    if "${" not in text:
        return text

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$${":
            return "${"
        variable, default = match.group(1), match.group(2)
        value = os.environ.get(variable)
        if value is not None:
            return value
        if default is not None:
            return default
        raise MCPConfigError(
            f"MCP server {name!r}: {where} uses ${{{variable}}}, which is not set in the "
            f"environment; set it or write ${{{variable}:-default}}.",
            server=name,
            field=where,
        )

    return _VARIABLE.sub(replace, text)


def _optional_expand(name: str, where: str, text: str | None) -> str | None:
    return None if text is None else _expand(name, where, text)


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return f"a {type(value).__name__}"
