"""`ScriptChecker`: runs the check before running (`toolscript.tools.check`) with `ty`.

`ty` is a type checker in one native binary (installed with the package, from its wheel); it
reads the stubs and the script and never runs either. The stubs are written once per
catalogue, into a folder of the state directory named for their text, beside a `ty.toml`
that makes that folder the checker's whole project (no configuration of the folder above it
applies). Each check writes the script there under a name of its own, runs one `ty check`,
and reads its concise output. A check that cannot run (no `ty`, a checker that fails or
overruns `CHECK_TIMEOUT`) finds nothing, and says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import secrets
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..tools.check import RULES, CheckedCatalogue, CheckedScript, Finding
from .catalogue import ToolCatalogue

__all__ = ["CHECK_TIMEOUT", "CheckOutcome", "ScriptChecker"]

CHECK_TIMEOUT = 10.0
"""Seconds the checker may take on one script before the check is given up."""


@dataclass(frozen=True, slots=True)
class CheckOutcome:
    """What the check found, and whether it ran at all."""

    findings: list[Finding] = field(default_factory=list)
    ran: bool = False
    """False when the script was not checked: it names no tool, or the check could not run."""
    failure: str | None = None
    """Why the check could not run, in words; None when it ran or was not needed."""


class ScriptChecker:
    """Checks scripts against one runtime's catalogue, in a cache folder of its own."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        self._for: ToolCatalogue | None = None
        self._checked: CheckedCatalogue | None = None
        self._stubs_folder: Path | None = None

    def _catalogue(self, catalogue: ToolCatalogue) -> tuple[CheckedCatalogue, Path]:
        if self._for is not catalogue or self._checked is None or self._stubs_folder is None:
            checked = CheckedCatalogue(catalogue.plans, catalogue.prompt())
            digest = hashlib.sha256(checked.stubs.encode("utf-8", "surrogatepass")).hexdigest()
            folder = self._folder / digest[:20]
            if not (folder / "tools.pyi").exists():
                folder.mkdir(parents=True, exist_ok=True)
                _write(folder / "ty.toml", "# The project of toolscript's check: this folder.\n")
                _write(folder / "tools.pyi", checked.stubs)
            self._for, self._checked, self._stubs_folder = catalogue, checked, folder
        return self._checked, self._stubs_folder

    async def check(
        self,
        catalogue: ToolCatalogue,
        code: str,
        names: frozenset[str] | None,
        python_version: str | None,
    ) -> CheckOutcome:
        """Check `code` against `catalogue`, for an interpreter of `python_version` (None:
        the host's) whose namespace holds `names` (None: too many to tell). Never raises but
        for cancellation."""
        try:
            checked, folder = self._catalogue(catalogue)
        except OSError as error:
            return CheckOutcome(failure=f"the stubs could not be written: {error}")
        if not checked.names_tools(code):
            return CheckOutcome()
        host_version = f"{sys.version_info[0]}.{sys.version_info[1]}"
        version = ".".join((python_version or host_version).split(".")[:2])
        prepared = checked.prepare(code, names)
        if isinstance(prepared, Finding):
            # This Python's parser found it: it speaks for another Python only on its grammar.
            exact = version == host_version
            return CheckOutcome([prepared], ran=True) if exact else CheckOutcome()
        try:
            output = await self._run_ty(folder, prepared, version)
        except _CheckFailed as error:
            return CheckOutcome(failure=str(error))
        return CheckOutcome(prepared.findings(output), ran=True)

    async def _run_ty(self, folder: Path, prepared: CheckedScript, version: str) -> str:
        try:
            from ty._find_ty import find_ty_bin

            binary = find_ty_bin()
        except (ImportError, FileNotFoundError):
            raise _CheckFailed("ty is not installed (pip install ty)") from None
        script = folder / f"script_{secrets.token_hex(6)}.py"
        arguments = [binary, "check", "--project", str(folder), "--python-version"]
        arguments += [version, "--output-format", "concise", "--no-progress"]
        arguments += ["--color", "never", "--exit-zero", "--ignore", "all"]
        for rule in RULES:
            arguments += ["--error", rule]
        arguments.append(str(script))
        environment = {
            name: value
            for name, value in os.environ.items()
            if name not in ("VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONPATH")
        }
        process: asyncio.subprocess.Process | None = None
        try:
            _write(script, prepared.source)
            process = await asyncio.create_subprocess_exec(
                *arguments,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=folder,
                env=environment,
            )
            async with asyncio.timeout(CHECK_TIMEOUT):
                output, errors = await process.communicate()
        except TimeoutError:
            raise _CheckFailed(f"ty took longer than {CHECK_TIMEOUT:g} s") from None
        except OSError as error:
            raise _CheckFailed(f"ty could not run: {error}") from None
        finally:
            if process is not None and process.returncode is None:
                process.kill()
                await process.wait()
            with contextlib.suppress(OSError):
                script.unlink()
        if process.returncode != 0:
            said = errors.decode("utf-8", "replace").strip().splitlines()
            raise _CheckFailed(f"ty failed (exit {process.returncode}): {' '.join(said[-2:])}")
        return output.decode("utf-8", "replace")


class _CheckFailed(Exception):
    pass


def _write(path: Path, text: str) -> None:
    """Write `text` to `path` whole: into a file of its own first, then renamed over it."""
    partial = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    partial.write_text(text, encoding="utf-8", errors="surrogatepass")
    os.replace(partial, path)
