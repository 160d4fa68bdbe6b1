"""The `toolscript` command end to end: `exec` and `tools` as subprocesses, with Python tools
from a module and MCP servers from a config file, and the README's main job.

The commands are started together by one fixture (each takes a few seconds, mostly importing
the MCP SDK in the command and in its server), and each test reads its own.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from toolscript import __file__ as PACKAGE

from .conftest import ROOT, broken_servers, stdio_demo

COMMAND_BOUND = 90.0
"""Seconds one command may take, all of them running at once on a small machine."""

README_JOB = "toolscript exec examples/notes_demo.py --mcp-config examples/mcp.json"

TOOLS_MODULE = '''
from toolscript import tool


@tool
def price(item: str, quantity: int = 1) -> float:
    """The price of some fruit.

    Args:
        item: Which fruit.
        quantity: How many.
    """
    return {"apple": 0.5, "pear": 0.75}[item] * quantity


@tool
async def in_stock(item: str) -> bool:
    """Whether the shop has it."""
    return item == "pear"


TOOLS = [price, in_stock]
'''

SCRIPT = """
total = await price(item="pear", quantity=4)
echoed = await demo.echo(text=f"total {total}")
print(echoed)
{"total": total, "echoed": echoed, "in stock": await in_stock(item="apple")}
"""


@dataclass
class Finished:
    """A command's exit code and output."""

    returncode: int
    stdout: str
    stderr: str


def toolscript() -> list[str]:
    """The installed `toolscript` command, next to this Python if it is there."""
    beside = Path(sys.executable).with_name("toolscript")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("toolscript")
    return [found] if found else [sys.executable, "-c", "from toolscript.cli import main; main()"]


def environment() -> dict[str, str]:
    """The commands' environment: the toolscript under test wherever they start (the tools
    module is found from the working directory), and the README's `python` is this one, as in
    its virtual environment."""
    return {
        **os.environ,
        "PYTHONPATH": str(Path(PACKAGE).resolve().parents[1]),
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }


@pytest.fixture(scope="module")
def commands(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, subprocess.Popen[str]]]:
    work = tmp_path_factory.mktemp("cli")
    (work / "shop_tools.py").write_text(TOOLS_MODULE)
    (work / "script.py").write_text(SCRIPT)
    config = {"mcpServers": {"demo": stdio_demo(), "broken": broken_servers()["broken"]}}
    (work / "mcp.json").write_text(json.dumps(config))
    env = {**environment(), "TOOLSCRIPT_STATE": str(work / "state")}

    def start(*args: str, cwd: Path = work) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*toolscript(), *args],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    started = {
        "exec": start(
            "exec",
            "script.py",
            "--tools",
            "shop_tools:TOOLS",
            "--mcp-config",
            "mcp.json",
            "--journal",
            ":memory:",
            "--json",
        ),
        "tools": start("tools", "--tools", "shop_tools:price", "--mcp-config", "mcp.json"),
        "readme": start(*README_JOB.split()[1:], cwd=ROOT),
    }
    yield started
    for process in started.values():
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=10)


def finished(commands: dict[str, subprocess.Popen[str]], name: str) -> Finished:
    stdout, stderr = commands[name].communicate(timeout=COMMAND_BOUND)
    return Finished(commands[name].returncode, stdout, stderr)


@pytest.mark.timeout(COMMAND_BOUND + 10)
def test_exec_runs_a_script_with_python_tools_from_a_module_and_mcp_tools_from_a_config(
    commands: dict[str, subprocess.Popen[str]],
) -> None:
    done = finished(commands, "exec")
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "ok"
    assert result["stdout"] == "total 3.0\n"
    assert result["value"] == repr({"total": 3.0, "echoed": "total 3.0", "in stock": False})
    tools = [record["tool"] for record in result["calls"]["records"]]
    assert sorted(tools) == ["demo/echo", "in_stock", "price"]
    assert result["calls"]["by_fate"] == {"seen": 3}


@pytest.mark.timeout(COMMAND_BOUND + 10)
def test_exec_names_a_server_that_could_not_start_on_stderr_and_runs_anyway(
    commands: dict[str, subprocess.Popen[str]],
) -> None:
    done = finished(commands, "exec")
    assert "toolscript: MCP server 'broken' did not start: " in done.stderr
    assert "missing API key" in done.stderr
    assert done.returncode == 0


@pytest.mark.timeout(COMMAND_BOUND + 10)
def test_tools_prints_stubs_that_compile_for_python_and_mcp_tools(
    commands: dict[str, subprocess.Popen[str]],
) -> None:
    done = finished(commands, "tools")
    assert done.returncode == 0, done.stderr
    namespace: dict[str, object] = {"__name__": "stubs"}
    exec(compile(done.stdout, "<toolscript tools>", "exec", dont_inherit=True), namespace)
    assert "async def price(*, item: str, quantity: int = 1, timeout: float | None = None)" in (
        done.stdout
    )
    assert "in_stock" not in done.stdout
    demo = namespace["demo"]
    assert {"echo", "add", "odd_names"} <= set(vars(demo))
    assert "toolscript: MCP server 'broken' did not start" in done.stderr


@pytest.mark.timeout(COMMAND_BOUND + 10)
def test_the_readme_main_job_runs_the_notes_example_and_prints_the_notes(
    commands: dict[str, subprocess.Popen[str]],
) -> None:
    assert README_JOB in (ROOT / "README.md").read_text()
    done = finished(commands, "readme")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("exit 0 · ok\n")
    for line in (
        "added #1: Groceries",
        "added #3: Coffee grinder",
        "2 notes tagged home: Groceries, Coffee grinder",
        "Deleted note 1 ('Groceries').",
        "{'notes left': 2, 'titles': ['Release checklist', 'Coffee grinder']}",
    ):
        assert line in done.stdout


@pytest.mark.timeout(90)
def test_the_readme_serve_demo_prints_the_tools_and_the_notes_found() -> None:
    done = subprocess.run(
        [sys.executable, "examples/serve_demo.py"],
        cwd=ROOT,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=80,
    )
    assert done.returncode == 0, done.stderr
    assert "tools offered: ['run_python', 'script_status', 'cancel_script']" in done.stdout
    assert "exit 0 · ok" in done.stdout
    assert "['Groceries', 'Grinder']" in done.stdout
