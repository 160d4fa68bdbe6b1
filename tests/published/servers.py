"""The four published MCP servers the stub tests run against, pinned and installed on demand.

`installed()` installs them once into a cache folder (`TOOLSCRIPT_TEST_CACHE`, else
`~/.cache/toolscript-tests`), in a subfolder named for the pins, so a rerun finds them at
once and a change of pins installs afresh. The npm servers go in with `npm install --prefix`;
`mcp-server-time` gets a virtual environment of its own, so its dependencies never touch the
one the tests run in. Only the package registries are used. A lock keeps two test runs from
installing into the same folder at once; a failed install leaves nothing that looks done.

Run `python -m tests.published.servers` to install them ahead of a test run.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NPM_SERVERS = {
    "filesystem": ("@modelcontextprotocol/server-filesystem", "2026.8.31"),
    "memory": ("@modelcontextprotocol/server-memory", "2026.8.31"),
    "everything": ("@modelcontextprotocol/server-everything", "2026.8.31"),
}
TIME_SERVER = ("mcp-server-time", "2026.10.19")

INSTALL_TIMEOUT = 900


@dataclass(frozen=True)
class PublishedServers:
    """Where the installed servers are: the entry script of each npm server, and the
    `mcp-server-time` command."""

    scripts: dict[str, Path]
    time_command: Path

    def config(self, folder: Path, memory_file: Path) -> dict[str, Any]:
        """An `mcpServers` config of all four: the filesystem server may use `folder`, the
        memory server keeps its graph in `memory_file`, and the time server is keyed `time`."""
        node = shutil.which("node") or "node"
        return {
            "mcpServers": {
                "filesystem": {
                    "command": node,
                    "args": [str(self.scripts["filesystem"]), str(folder)],
                },
                "memory": {
                    "command": node,
                    "args": [str(self.scripts["memory"])],
                    "env": {"MEMORY_FILE_PATH": str(memory_file)},
                },
                "everything": {"command": node, "args": [str(self.scripts["everything"]), "stdio"]},
                "time": {
                    "command": str(self.time_command),
                    "args": ["--local-timezone", "Etc/UTC"],
                },
            }
        }


def cache_folder() -> Path:
    """The folder these pins install into."""
    root = os.environ.get("TOOLSCRIPT_TEST_CACHE") or Path.home() / ".cache" / "toolscript-tests"
    pins = repr(sorted(NPM_SERVERS.values())) + repr(TIME_SERVER) + sys.version
    return Path(root) / f"published-{hashlib.sha256(pins.encode()).hexdigest()[:12]}"


def installed() -> PublishedServers:
    """The servers, installed first if this cache folder does not have them yet."""
    folder = cache_folder()
    servers = _located(folder)
    if (folder / "done").exists():
        return servers
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "done").exists():
            _install(folder)
    return servers


def _located(folder: Path) -> PublishedServers:
    modules = folder / "npm" / "node_modules"
    scripts = {
        key: modules / package / "dist" / "index.js" for key, (package, _) in NPM_SERVERS.items()
    }
    return PublishedServers(scripts, folder / "time-venv" / "bin" / "mcp-server-time")


def _install(folder: Path) -> None:
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        raise RuntimeError("the published-server tests need node and npm on PATH (Node 20)")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    packages = [f"{package}@{version}" for package, version in NPM_SERVERS.values()]
    _run([npm, "install", "--prefix", str(folder / "npm"), "--no-audit", "--no-fund", *packages])
    venv = folder / "time-venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    _run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            f"{TIME_SERVER[0]}=={TIME_SERVER[1]}",
        ]
    )
    missing = [str(path) for path in _located(folder).scripts.values() if not path.exists()]
    if not _located(folder).time_command.exists():
        missing.append(str(_located(folder).time_command))
    if missing:
        raise RuntimeError(f"the install finished but these are missing: {', '.join(missing)}")
    (folder / "done").write_text("installed\n")


def _run(command: list[str]) -> None:
    finished = subprocess.run(
        command, capture_output=True, text=True, timeout=INSTALL_TIMEOUT, check=False
    )
    if finished.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command)} failed with exit code {finished.returncode}:\n"
            f"{finished.stdout[-2000:]}\n{finished.stderr[-2000:]}"
        )


if __name__ == "__main__":
    print(cache_folder(), installed(), sep="\n")
