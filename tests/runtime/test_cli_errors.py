"""A mistake in how a command was called is one clear line and exit status 2, never a
traceback: a missing file, a config that cannot be used, a bad value, a missing extra, a
missing API key. Each case runs the real command in a fresh interpreter."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from toolscript import __file__ as PACKAGE
from toolscript.config import Settings

pytestmark = pytest.mark.timeout(60)

SOURCE = str(Path(PACKAGE).resolve().parents[1])


def toolscript(
    *arguments: str, cwd: Path, env: dict[str, str] | None = None, blocked: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`toolscript ARGUMENTS`; with `blocked`, as if that package were not installed."""
    start = "import sys\n"
    if blocked is not None:
        start += f"sys.modules[{blocked!r}] = None\n"
    start += "from toolscript.cli import main\nsys.argv[0] = 'toolscript'\nmain()\n"
    environment = {**(env if env is not None else os.environ), "PYTHONPATH": SOURCE}
    environment["TOOLSCRIPT_STATE"] = str(cwd / "state")
    return subprocess.run(
        [sys.executable, "-c", start, *arguments],
        capture_output=True,
        text=True,
        timeout=50,
        cwd=cwd,
        env=environment,
    )


def assert_one_line(done: subprocess.CompletedProcess[str], *words: str) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "script.py").write_text("print(1)\n")
    return tmp_path


def test_a_missing_script_is_one_line(folder: Path) -> None:
    done = toolscript("exec", "absent.py", cwd=folder)
    assert_one_line(done, "toolscript exec: error:", "absent.py", "No such file")


def test_a_missing_mcp_config_is_one_line(folder: Path) -> None:
    done = toolscript("exec", "script.py", "--mcp-config", "absent.json", cwd=folder)
    assert_one_line(done, "--mcp-config", "absent.json", "does not exist")


def test_an_mcp_config_or_journal_that_is_not_a_regular_file_says_so(folder: Path) -> None:
    done = toolscript("exec", "script.py", "--mcp-config", os.devnull, cwd=folder)
    assert_one_line(done, "--mcp-config", os.devnull, "is not a regular file")
    done = toolscript("calls", "--journal", os.devnull, cwd=folder)
    assert_one_line(done, "--journal", os.devnull, "is not a regular file")
    done = toolscript("exec", "script.py", "--mcp-config", str(folder), cwd=folder)
    assert_one_line(done, "--mcp-config", "is a folder")


def test_an_mcp_config_that_is_not_json_is_one_line_with_where(folder: Path) -> None:
    (folder / "mcp.json").write_text('{"mcpServers": {')
    done = toolscript("exec", "script.py", "--mcp-config", "mcp.json", cwd=folder)
    assert_one_line(done, "--mcp-config", "not valid JSON", "line 1")


def test_an_mcp_config_entry_without_a_command_names_the_server(folder: Path) -> None:
    (folder / "mcp.json").write_text(json.dumps({"mcpServers": {"notes": {"args": []}}}))
    for command in ("exec", "tools", "serve"):
        extra = ["script.py"] if command == "exec" else []
        done = toolscript(command, *extra, "--mcp-config", "mcp.json", cwd=folder)
        assert_one_line(done, f"toolscript {command}: error:", "'notes'", "command")


def test_an_unset_variable_in_the_config_names_it(folder: Path) -> None:
    config = {"mcpServers": {"gh": {"command": "x", "env": {"T": "${NO_SUCH_TOKEN_VAR}"}}}}
    (folder / "mcp.json").write_text(json.dumps(config))
    done = toolscript("exec", "script.py", "--mcp-config", "mcp.json", cwd=folder)
    assert_one_line(done, "NO_SUCH_TOKEN_VAR")


def test_a_bad_tool_reference_a_missing_mount_and_a_bad_time_limit_are_one_line(
    folder: Path,
) -> None:
    assert_one_line(
        toolscript("exec", "script.py", "--tools", "no_such_module:x", cwd=folder), "--tools"
    )
    assert_one_line(
        toolscript("exec", "script.py", "--mount", str(folder / "absent"), cwd=folder),
        "--mount",
        "does not exist",
    )
    assert_one_line(
        toolscript("exec", "script.py", "--mount", f"{folder}:rx", cwd=folder),
        "--mount",
        "'rx' is not 'ro' or 'rw'",
    )
    assert_one_line(
        toolscript("exec", "script.py", "--mount", f"{folder}:/", cwd=folder),
        "--mount",
        "/ cannot be replaced",
    )
    assert_one_line(
        toolscript("exec", "script.py", "--mount", f"{folder}:/x:rw:rw", cwd=folder),
        "--mount",
        "the mode is given twice",
    )
    assert_one_line(
        toolscript("exec", "script.py", "--time-limit", "-1", cwd=folder), "--time-limit"
    )
    assert_one_line(
        toolscript("exec", "script.py", "--time-limit", "99999", cwd=folder),
        "--time-limit",
        "over the most, 600 seconds",
    )
    assert_one_line(toolscript("calls", "--limit", "0", cwd=folder), "--limit")
    assert_one_line(toolscript("serve", "--http", "host", cwd=folder), "--http", "HOST:PORT")


def test_a_tool_reference_to_something_that_is_not_a_tool_is_one_line(folder: Path) -> None:
    (folder / "notatool.py").write_text("x = 5\n")
    for command in ("exec", "tools", "serve"):
        extra = ["script.py"] if command == "exec" else []
        for reference, why in (("notatool:x", "is not a tool"), ("json:dumps", "**kw")):
            done = toolscript(command, *extra, "--tools", reference, cwd=folder)
            assert_one_line(done, f"toolscript {command}: error:", "--tools", reference, why)


def test_calls_on_a_journal_that_does_not_exist_is_one_line_and_makes_nothing(
    folder: Path,
) -> None:
    done = toolscript("calls", "--journal", "typo/journal.db", cwd=folder)
    assert_one_line(done, "--journal", "typo/journal.db", "does not exist")
    assert not (folder / "typo").exists()


def test_the_agent_without_its_extra_says_what_to_install(folder: Path) -> None:
    env = {**os.environ, "ANTHROPIC_API_KEY": "k"}
    done = toolscript(
        "agent", "hi", "--model", "anthropic:m", cwd=folder, env=env, blocked="anthropic"
    )
    assert_one_line(done, "anthropic", "pip install 'toolscript[agent]'")


def test_the_agent_without_its_api_key_names_the_variable(folder: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    done = toolscript("agent", "hi", "--model", "anthropic:m", cwd=folder, env=env)
    assert_one_line(done, "ANTHROPIC_API_KEY is not set")
    done = toolscript("agent", "hi", "--model", "openai:m", cwd=folder, env=env)
    assert_one_line(done, "OPENAI_API_KEY is not set")


def test_the_agent_without_a_task_says_to_give_one(folder: Path) -> None:
    env = {**os.environ, "ANTHROPIC_API_KEY": "k"}
    done = toolscript("agent", "--model", "anthropic:m", cwd=folder, env=env)
    line = assert_one_line(done, "give a TASK")
    assert "not both" not in line


def test_the_agent_with_a_model_of_no_provider_is_one_line(folder: Path) -> None:
    done = toolscript("agent", "hi", "--model", "gpt-5", cwd=folder)
    assert_one_line(done, "--model", "anthropic:MODEL or openai:MODEL")


def test_the_agent_with_a_base_url_that_is_not_a_url_is_one_line(folder: Path) -> None:
    done = toolscript("agent", "hi", "--model", "openai:m", "--base-url", "notaurl", cwd=folder)
    assert_one_line(done, "--base-url", "expected an http(s) URL", "'notaurl'")


def test_help_shows_defaults_and_plain_argument_names(folder: Path) -> None:
    exec_help = toolscript("exec", "--help", cwd=folder)
    agent_help = toolscript("agent", "--help", cwd=folder)

    assert exec_help.returncode == 0 and agent_help.returncode == 0
    assert "(default: auto)" in exec_help.stdout
    assert "--mcp-config FILE" in exec_help.stdout and "SCRIPT" in exec_help.stdout
    assert "(default: 50)" in agent_help.stdout and "--model PROVIDER:MODEL" in agent_help.stdout
    # Each default as it is: the time limit's is the runtime's, and `--no-images` (whose
    # value is False when given) says no default that reads as "no images".
    flat = " ".join(exec_help.stdout.split())
    assert f"(default: {Settings().default_time_limit:g}," in flat
    images = " ".join(agent_help.stdout.split("--no-images", 2)[2].split("--json")[0].split())
    assert "default" not in images, images


def test_no_command_shows_the_commands_and_exits_2(folder: Path) -> None:
    done = toolscript(cwd=folder)
    assert done.returncode == 2
    for command in ("exec", "tools", "calls", "agent", "serve"):
        assert command in done.stdout


def test_an_mcp_config_that_is_not_utf8_is_one_line(folder: Path) -> None:
    (folder / "mcp.json").write_bytes(b"\xff\xfe{}")
    for command in ("exec", "tools"):
        extra = ["script.py"] if command == "exec" else []
        done = toolscript(command, *extra, "--mcp-config", "mcp.json", cwd=folder)
        assert_one_line(done, f"toolscript {command}: error:", "not UTF-8 text")


def test_a_journal_that_is_not_a_database_is_one_line(folder: Path) -> None:
    (folder / "notes.txt").write_text("not a database\n" * 100)
    for arguments in (["calls"], ["exec", "script.py"]):
        done = toolscript(*arguments, "--journal", "notes.txt", cwd=folder)
        assert_one_line(done, f"toolscript {arguments[0]}: error:", "not a toolscript journal")
    assert (folder / "notes.txt").read_text() == "not a database\n" * 100


@pytest.mark.parametrize(
    "module",
    [
        "from toolscript import tool\n@tool\ndef f(*args: int) -> int:\n    return 0\nTOOLS = [f]\n",
        "def broken(:\n",
        "raise RuntimeError('the module fails')\n",
    ],
    ids=["bad-tool-at-import", "syntax-error", "raises"],
)
def test_a_tools_module_whose_own_code_fails_is_one_line(folder: Path, module: str) -> None:
    (folder / "mytools.py").write_text(module)
    done = toolscript("exec", "script.py", "--tools", "mytools:TOOLS", cwd=folder)
    assert_one_line(done, "--tools", "importing 'mytools' failed")


def test_a_script_saved_with_a_byte_order_mark_runs_as_python_runs_it(folder: Path) -> None:
    (folder / "bom.py").write_bytes(b"\xef\xbb\xbfprint('hello')\n")
    done = toolscript("exec", "bom.py", "--sandbox", "off", cwd=folder)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "hello" in done.stdout


@pytest.mark.parametrize("command", ["exec", "serve"])
@pytest.mark.parametrize("journal", ["a-folder", "", "script.py/journal.sqlite3"])
def test_a_journal_that_cannot_be_opened_is_one_line(
    folder: Path, command: str, journal: str
) -> None:
    (folder / "a-folder").mkdir()
    arguments = ["exec", "script.py"] if command == "exec" else ["serve"]
    done = toolscript(*arguments, "--journal", journal, cwd=folder)
    assert_one_line(done, f"toolscript {command}: error:", "cannot open the journal")


def test_a_state_folder_that_is_a_file_is_one_line(folder: Path) -> None:
    env = {**os.environ}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys\nfrom toolscript.cli import main\nmain()\n",
            "exec",
            "script.py",
        ],
        capture_output=True,
        text=True,
        timeout=50,
        cwd=folder,
        env={**env, "PYTHONPATH": SOURCE, "TOOLSCRIPT_STATE": str(folder / "script.py")},
    )
    assert_one_line(done, "toolscript exec: error:", "cannot open the journal")


def test_a_script_without_end_is_one_line_not_a_memory_error(folder: Path) -> None:
    # /dev/zero never ends: read whole, it exhausts the host's memory.
    done = toolscript("exec", "/dev/zero", cwd=folder)
    assert_one_line(done, "toolscript exec: error:", "over 64 MiB")


def test_a_journal_that_cannot_be_written_is_one_line(folder: Path) -> None:
    (folder / "journal").mkdir()
    journal = folder / "journal" / "journal.sqlite3"
    assert toolscript("calls", "--journal", str(journal), cwd=folder).returncode == 2  # absent
    sqlite3.connect(journal).close()
    assert toolscript("calls", "--journal", str(journal), cwd=folder).returncode == 0
    # Read-only even for root, as on a read-only mount.
    if subprocess.run(["chattr", "+i", str(journal)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here")
    try:
        for arguments in (["calls"], ["exec", "script.py"]):
            done = toolscript(*arguments, "--journal", str(journal), cwd=folder)
            assert_one_line(done, f"toolscript {arguments[0]}: error:", "cannot be written")
    finally:
        subprocess.run(["chattr", "-i", str(journal)], check=True)


def test_another_programs_database_is_one_line_and_left_as_it_was(folder: Path) -> None:
    other = folder / "app.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE customers (id INTEGER, name TEXT)")
    for arguments in (["calls"], ["exec", "script.py"]):
        done = toolscript(*arguments, "--journal", "app.db", cwd=folder)
        assert_one_line(done, f"toolscript {arguments[0]}: error:", "other tables: customers")
    with sqlite3.connect(other) as db:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master")]
        assert tables == ["customers"]
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"


@pytest.mark.parametrize("version", [None, 0, "two"])
def test_a_journal_with_a_schema_version_that_cannot_be_is_one_line(
    folder: Path, version: object
) -> None:
    journal = folder / "journal.sqlite3"
    with sqlite3.connect(journal) as db:
        db.executescript(
            "CREATE TABLE schema_version (version INTEGER NOT NULL);"
            "CREATE TABLE hosts (host_id INTEGER PRIMARY KEY);"
            "CREATE TABLE scripts (script_id TEXT PRIMARY KEY);"
            "CREATE TABLE calls (id INTEGER PRIMARY KEY);"
        )
        if version is not None:
            db.execute("INSERT INTO schema_version VALUES (?)", (version,))
    done = toolscript("calls", "--journal", str(journal), cwd=folder)
    assert_one_line(done, "toolscript calls: error:", "is not a toolscript journal", "version")


def test_a_reader_that_stops_reading_is_no_traceback(folder: Path) -> None:
    journal = folder / "journal.sqlite3"
    code = (
        "import sys\nfrom toolscript.host.journal import Journal\n"
        "with Journal.open(sys.argv[1]) as journal:\n"
        "    journal.record_calls([(f'c-{n}', 's', 'main', 'put', 'x' * 200, 1.0)"
        " for n in range(5000)])\n"
        "    journal.settle_calls([(f'c-{n}', 'seen', None) for n in range(5000)])\n"
    )
    subprocess.run(
        [sys.executable, "-c", code, str(journal)],
        check=True,
        env={**os.environ, "PYTHONPATH": SOURCE},
    )
    start = "from toolscript.cli import main\nmain()\n"
    command = [sys.executable, "-c", start, "calls", "--journal", str(journal), "--json"]
    reader = subprocess.Popen(
        [*command, "--limit", "5000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": SOURCE},
    )
    assert reader.stdout is not None and reader.stderr is not None
    reader.stdout.read(10)
    reader.stdout.close()  # as `| head -c 10` does
    error = reader.stderr.read().decode()
    assert reader.wait(timeout=50) == 141
    assert "Traceback" not in error, error


def test_serve_http_on_an_address_it_cannot_have_writes_no_token_file(folder: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        token = folder / "token"
        done = toolscript(
            "serve", "--http", f"127.0.0.1:{port}", "--token-file", str(token), cwd=folder
        )
    assert_one_line(done, "--http", "cannot listen")
    assert not token.exists()


def test_calls_of_an_unknown_script_or_an_empty_journal_path_is_one_line(folder: Path) -> None:
    # `--script nosuch` printed "0 call(s)" with exit 0, as for a script that made no call;
    # `--journal ''` said " is a folder".
    from toolscript import Journal

    path = folder / "journal.sqlite3"
    journal = Journal.open(path)
    journal.begin_script("main:quiet", "main", 1, "1", 1.0)
    journal.end_script("main:quiet", "ok", 2.0)
    journal.close()
    done = toolscript("calls", "--journal", str(path), "--script", "nosuch", cwd=folder)
    assert_one_line(done, "--script", "no script 'nosuch'")
    quiet = toolscript("calls", "--journal", str(path), "--script", "main:quiet", cwd=folder)
    assert quiet.returncode == 0 and "0 call(s)" in quiet.stdout, quiet.stderr
    assert_one_line(toolscript("calls", "--journal", "", cwd=folder), "--journal", "empty path")
