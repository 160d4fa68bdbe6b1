"""Reading the `{"mcpServers": {...}}` file that MCP clients already use."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from toolscript.tools.mcp.config import (
    HTTPServerConfig,
    MCPConfigError,
    StdioServerConfig,
    load_mcp_config,
)


def one(entry: dict[str, Any]) -> Any:
    return load_mcp_config({"mcpServers": {"srv": entry}}).servers["srv"]


def test_a_stdio_entry_is_read_with_its_command_args_env_and_cwd() -> None:
    config = one({"command": "uvx", "args": ["mcp-server-time"], "env": {"TZ": "UTC"}, "cwd": "/"})
    assert config == StdioServerConfig(
        name="srv", command="uvx", args=("mcp-server-time",), env={"TZ": "UTC"}, cwd="/"
    )


def test_an_http_entry_is_read_with_its_url_and_headers() -> None:
    config = one({"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer x"}})
    assert config == HTTPServerConfig(
        name="srv", url="https://example.com/mcp", headers={"Authorization": "Bearer x"}
    )


@pytest.mark.parametrize("kind", ["stdio", "http", "streamable-http"])
def test_a_type_field_is_tolerated(kind: str) -> None:
    entry = {"type": kind, "command": "x"} if kind == "stdio" else {"type": kind, "url": "http://h"}
    assert one(entry).name == "srv"


def test_the_sse_transport_is_refused_with_a_message_that_says_what_to_use() -> None:
    with pytest.raises(MCPConfigError, match=r"'srv'.*SSE transport is not supported") as caught:
        one({"type": "sse", "url": "http://h/sse"})
    assert (caught.value.server, caught.value.field) == ("srv", "type")


def test_keys_other_clients_use_are_ignored() -> None:
    assert one({"command": "x", "disabled": False, "autoApprove": []}).command == "x"


def test_servers_keep_the_files_order() -> None:
    config = load_mcp_config({"mcpServers": {"b": {"command": "x"}, "a": {"command": "y"}}})
    assert list(config.servers) == ["b", "a"]


def test_a_file_is_read_from_its_path(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"t": {"command": "x"}}}))
    assert list(load_mcp_config(path).servers) == ["t"]
    assert list(load_mcp_config(str(path)).servers) == ["t"]


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(MCPConfigError, match=r"Cannot read the MCP config file .*nope\.json"):
        load_mcp_config(tmp_path / "nope.json")


def test_invalid_json_says_where(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text('{"mcpServers": {,}}')
    with pytest.raises(MCPConfigError, match=r"not valid JSON.*line 1, column 17"):
        load_mcp_config(path)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, 'no "mcpServers" key'),
        ({"mcpServers": []}, '"mcpServers" must be an object'),
        ({"mcpServers": {"srv": "uvx"}}, "MCP server 'srv': its settings must be an object"),
        ({"mcpServers": {"srv": {}}}, "MCP server 'srv' has neither \"command\""),
        ({"mcpServers": {"srv": {"command": "x", "url": "http://h"}}}, 'both "command" and "url"'),
        (
            {"mcpServers": {"srv": {"command": ""}}},
            "'command' must be a non-empty string, not an empty string",
        ),
        (
            {"mcpServers": {"srv": {"command": "x", "args": ["-v", 1]}}},
            "'args' must be a list of strings, not a list holding a number",
        ),
        (
            {"mcpServers": {"srv": {"command": 3}}},
            "'command' must be a non-empty string, not a number",
        ),
        (
            {"mcpServers": {"srv": {"command": "x", "args": "-v"}}},
            "'args' must be a list of strings",
        ),
        ({"mcpServers": {"srv": {"command": "x", "env": {"A": 1}}}}, "env.A must be a string"),
        ({"mcpServers": {"srv": {"url": "ftp://h"}}}, '"url" must start with http'),
        (
            {"mcpServers": {"srv": {"type": "stdio", "url": "http://h"}}},
            'type "stdio" but has no "command"',
        ),
        ({"mcpServers": {"srv": {"type": "ws", "url": "http://h"}}}, "unknown \"type\" 'ws'"),
    ],
)
def test_bad_input_is_refused_with_a_sentence_naming_the_server_and_field(
    data: dict[str, Any], message: str
) -> None:
    with pytest.raises(MCPConfigError) as caught:
        load_mcp_config(data)
    assert message in str(caught.value)


def test_variables_are_expanded_in_env_headers_args_and_url(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TOKEN", "s3cret")
    monkeypatch.setenv("HOST", "example.com")
    stdio = one({"command": "x", "args": ["--key=${TOKEN}"], "env": {"KEY": "${TOKEN}"}})
    assert stdio.args == ("--key=s3cret",) and stdio.env == {"KEY": "s3cret"}
    http = one({"url": "https://${HOST}/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}})
    assert http.url == "https://example.com/mcp"
    assert http.headers == {"Authorization": "Bearer s3cret"}


def test_an_unset_variable_uses_its_default_or_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TOOLSCRIPT_UNSET", raising=False)
    assert one({"command": "x", "env": {"A": "${TOOLSCRIPT_UNSET:-fallback}"}}).env == {
        "A": "fallback"
    }
    with pytest.raises(MCPConfigError, match=r"'srv': env.A uses \$\{TOOLSCRIPT_UNSET\}") as caught:
        one({"command": "x", "env": {"A": "${TOOLSCRIPT_UNSET}"}})
    assert caught.value.field == "env.A"


def test_a_doubled_dollar_keeps_a_literal_variable_reference() -> None:
    assert one({"command": "x", "args": ["$${HOME}"]}).args == ("${HOME}",)


def test_the_example_config_points_at_the_notes_server() -> None:
    root = Path(__file__).resolve().parents[2]
    config = load_mcp_config(root / "examples" / "mcp.json").servers["notes"]
    assert isinstance(config, StdioServerConfig)
    assert config.cwd is not None and (Path(config.cwd) / config.args[0]).is_file()


def test_python_as_a_command_is_the_python_running_toolscript() -> None:
    for command in ("python", "python3"):
        assert one({"command": command}).command == sys.executable
    assert one({"command": "python3.11"}).command == "python3.11"


def test_a_relative_cwd_in_a_file_is_relative_to_the_file_s_folder(tmp_path: Path) -> None:
    (tmp_path / "servers").mkdir()
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"a": {"command": "x", "cwd": "servers"}}}))
    absolute = {"mcpServers": {"a": {"command": "x", "cwd": "/srv"}}}

    assert load_mcp_config(path).servers["a"].cwd == str(tmp_path / "servers")  # type: ignore[union-attr]
    path.write_text(json.dumps(absolute))
    assert load_mcp_config(path).servers["a"].cwd == "/srv"  # type: ignore[union-attr]


def test_a_server_marked_disabled_is_not_started_and_is_listed_as_disabled() -> None:
    config = load_mcp_config(
        {
            "mcpServers": {
                "on": {"command": "a"},
                "off": {"command": "b", "disabled": True},
                "also-on": {"command": "c", "disabled": False},
            }
        }
    )
    assert list(config.servers) == ["on", "also-on"]
    assert config.disabled == ("off",)
