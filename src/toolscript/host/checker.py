"""`ScriptChecker`: runs the check before running (`toolscript.tools.check`) with `ty`.

`ty` is a type checker in one native binary (installed with the package, from its wheel); it
reads the stubs and the script and never runs either. The stubs are written once per
catalogue and Python version, into a folder of the state directory named for them, beside a
`ty.toml` that makes that folder the checker's whole project (no configuration of a folder
above applies) and turns on only the rules the check reads. One `ty server` per folder
(`toolscript.host.typeserver`) checks the scripts. A check that cannot run (no `ty`, a
server that fails or overruns `CHECK_TIMEOUT`) finds nothing, and says why.
"""

from __future__ import annotations

import collections
import hashlib
import os
import re
import secrets
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .catalogue import ToolCatalogue

if TYPE_CHECKING:
    # Imported when a catalogue first has a tool to check against: a runtime without tools
    # (`toolscript exec` of a plain script) never loads the check.
    from ..tools.check import CheckedCatalogue, Finding
    from .typeserver import TypeServer

__all__ = [
    "CHECK_TIMEOUT",
    "EARLIER_SCRIPT_LONGEST",
    "CheckOutcome",
    "EarlierRuns",
    "ScriptChecker",
]

CHECK_TIMEOUT = 10.0
"""Seconds the checker may take on one script (its start included) before the check is
given up."""


@dataclass(frozen=True, slots=True)
class CheckOutcome:
    """What the check found, and whether it ran at all."""

    findings: list[Finding] = field(default_factory=list)
    ran: bool = False
    """False when the script was not checked: it names no tool, or the check could not run."""
    failure: str | None = None
    """Why the check could not run, in words; None when it ran or was not needed."""


EARLIER_SCRIPT_LONGEST = 1_000_000
"""The longest script whose code an interpreter keeps for a later script's check, in
characters; the check reads a kept script once (`EarlierRuns`)."""

_PUTS_A_KEY = re.compile(r"\[\s*[rRbBuUfF]*['\"]|setdefault|update|setitem|\|=")
"""What a script that puts a key in a dict by name holds somewhere (`r["score"] =`,
`setdefault`, `update`, `setitem`, `|=`): the scripts without it are not kept."""


class EarlierRuns:
    """The scripts that ran in an interpreter, as a later script's check needs them
    (`toolscript.tools.check.EarlierRuns`): those not read yet (the ones that may put a key
    in a dict by name, each at most `EARLIER_SCRIPT_LONGEST` characters long, at most that
    many in all), and the keys of those read."""

    __slots__ = ("_chars", "keys", "unread")

    def __init__(self) -> None:
        self.unread: collections.deque[str] = collections.deque()
        self.keys: set[str] = set()
        self._chars = 0

    def remember(self, code: str) -> None:
        if len(code) > EARLIER_SCRIPT_LONGEST or _PUTS_A_KEY.search(code) is None:
            return
        if not self.unread:
            self._chars = 0  # the check read them all
        self.unread.append(code)
        self._chars += len(code)
        while self._chars > EARLIER_SCRIPT_LONGEST:
            self._chars -= len(self.unread.popleft())


class ScriptChecker:
    """Checks scripts against one runtime's catalogue, with stubs in a cache folder."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        self._checked: CheckedCatalogue | None = None
        self._checked_of: ToolCatalogue | None = None
        self._for: tuple[CheckedCatalogue, str] | None = None
        self._server: TypeServer | None = None

    async def check(
        self,
        catalogue: ToolCatalogue,
        code: str,
        names: frozenset[str] | None,
        python_version: str | None,
        earlier: EarlierRuns | None = None,
    ) -> CheckOutcome:
        """Check `code` against `catalogue`, for an interpreter of `python_version` (None:
        the host's) whose namespace holds `names` (None: too many to tell), after the scripts
        `earlier` ran in it. Never raises but for cancellation."""
        if not catalogue.plans:
            return CheckOutcome()  # no tool to name: nothing to check against
        from .typeserver import TypeServerError

        host_version = f"{sys.version_info[0]}.{sys.version_info[1]}"
        version = ".".join((python_version or host_version).split(".")[:2])
        checked = self._checked_for(catalogue)
        if not checked.names_tools(code):
            return CheckOutcome()  # before the server: a script that needs no check pays none
        try:
            server = await self._server_for(checked, version)
        except (OSError, TypeServerError) as error:
            return CheckOutcome(failure=f"the checker could not be prepared: {error}")
        if names is not None:  # a server that is down is bound to an object of its own
            names = names | frozenset(catalogue.down_messages)
        prepared = checked.prepare(code, names, earlier)
        try:
            diagnostics = await server.diagnostics(prepared.source, CHECK_TIMEOUT)
        except TypeServerError as failure:
            return CheckOutcome(failure=str(failure))
        if not prepared.needs_parse(diagnostics):
            return CheckOutcome(ran=True)
        syntax_error = prepared.syntax_error
        if syntax_error is not None:
            # This Python's parser found it: it speaks for another Python only on its grammar.
            exact = version == host_version
            return CheckOutcome([syntax_error], ran=True) if exact else CheckOutcome()
        return CheckOutcome(prepared.findings(diagnostics), ran=True)

    def _checked_for(self, catalogue: ToolCatalogue) -> CheckedCatalogue:
        if self._checked is None or self._checked_of is not catalogue:
            from ..tools.check import CheckedCatalogue

            self._checked = CheckedCatalogue(
                catalogue.plans, catalogue.prompt(), catalogue.down_messages
            )
            self._checked_of = catalogue
        return self._checked

    async def _server_for(self, checked: CheckedCatalogue, version: str) -> TypeServer:
        """The type server of a folder that holds `checked`'s stubs for `version`."""
        if self._server is None or self._for != (checked, version):
            config = _ty_config(version)
            digest = hashlib.sha256(
                (config + checked.stubs).encode("utf-8", "surrogatepass")
            ).hexdigest()
            folder = self._folder / digest[:20]
            if not (folder / "tools.pyi").exists():
                folder.mkdir(parents=True, exist_ok=True)
                _write(folder / "ty.toml", config)
                _write(folder / "tools.pyi", checked.stubs)
            if self._server is None or self._server.folder != folder:
                from .typeserver import TypeServer

                await self.close()
                self._server = TypeServer(_ty_binary(), folder)
            self._for = (checked, version)
        return self._server

    async def close(self) -> None:
        """End the type server, if one runs."""
        server, self._server = self._server, None
        if server is not None:
            await server.close()


def _ty_binary() -> str:
    from .typeserver import TypeServerError

    try:
        from ty._find_ty import find_ty_bin

        return find_ty_bin()
    except (ImportError, FileNotFoundError):
        raise TypeServerError("ty is not installed (pip install ty)") from None


def _ty_config(version: str) -> str:
    from ..tools.check import RULES_ASKED

    rules = "".join(f'{rule} = "error"\n' for rule in RULES_ASKED)
    return (
        "# The project of toolscript's check before running: this folder alone.\n"
        f'[environment]\npython-version = "{version}"\n\n[rules]\nall = "ignore"\n{rules}'
    )


def _write(path: Path, text: str) -> None:
    """Write `text` to `path` whole: into a file of its own first, then renamed over it."""
    partial = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    partial.write_text(text, encoding="utf-8", errors="surrogatepass")
    os.replace(partial, path)
