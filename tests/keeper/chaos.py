"""The chaos harness: scripts run through hosts that are SIGKILLed at random points and
restarted on the same state directory, and what must hold at the end.

`run_chaos(folder, scripts=..., kills=..., shells=...)` starts a host (`CHAOS_HOST`) that
runs `scripts` scripts spread over `shells` shells, one after another in each shell; kills it
with SIGKILL after a random number of its events (a script ended, a tool entered), up to
`kills` times, restarting it each time; then lets a last host finish. Each host takes back
the shells the last one left, follows their running scripts to their end, and runs the
scripts the journal shows were never begun. Half the scripts call `transfer` (a repeat is
not safe), half `put` (idempotent, deduplicating by key); both record their effects in a
SQLite database of their own and answer only after a random wait, so a kill finds some in
flight. `Chaos.check()` then says what failed, and `Chaos.counts` what happened. The size is
a parameter: the suite runs a small one, `bench/chaos.py` the issue's 200 scripts and 30
kills.
"""

from __future__ import annotations

import ast
import asyncio
import json
import random
import signal
import sqlite3
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolscript import Journal

from .tools import count

CHAOS_HOST = textwrap.dedent(
    """
    import asyncio, json, os, re, sqlite3, sys
    from toolscript import Runtime
    from tests.keeper.tools import effect_tools

    config = json.loads(sys.argv[1])

    def code(i, shell_scripts):
        tool = "transfer" if i % 2 else "put"
        earlier = [j for j in shell_scripts if j < i]
        return (
            f"# chaos {i}\\n"
            f"v_{i} = {i}\\n"
            "try:\\n"
            f"    answer = await {tool}(key='k{i}')\\n"
            "except ToolError as error:\\n"
            "    answer = ('ToolError', error.cause)\\n"
            f"[[j for j in {earlier!r} if globals().get(f'v_{{j}}') != j], answer]\\n"
        )

    def report(result, index):
        line = json.dumps([index, result.status, result.value, result.script_id])
        print("result", line, flush=True)

    async def main():
        async with Runtime(
            tools=effect_tools(config["shared"], hold=False, gate_for=config["gate_for"]),
            state_dir=config["state_dir"],
            keep_interpreters=True,
            grace=config["grace"],
            sandbox=config["sandbox"],
            mounts={config["shared"]: "rw"},
            pool_size=0,
            max_interpreters=config["shells"] + 4,
        ) as rt:
            rt.journal.uncertain()  # the killed hosts' intents are in the database now
            begun = {}
            path = os.path.join(config["state_dir"], "journal.sqlite3")
            with sqlite3.connect(path, timeout=30) as db:
                for script_id, text in db.execute("SELECT script_id, code FROM scripts"):
                    found = re.match(r"# chaos (\\d+)", text)
                    if found:
                        begun[script_id] = int(found.group(1))

            async def shell(s):
                mine = [i for i in range(config["scripts"]) if i % config["shells"] == s]
                shell = rt.shell(f"c{s}")
                recovered = await shell.recovered()
                if recovered is not None:
                    report(recovered, begun.get(recovered.script_id))
                for i in mine:
                    if i in begun.values():
                        continue
                    result = await shell.run(code(i, mine), time_limit=config["time_limit"])
                    report(result, i)

            await asyncio.gather(*(shell(s) for s in range(config["shells"])))
            print("all done", flush=True)

    asyncio.run(main())
    """
)


@dataclass
class Chaos:
    """One chaos run: its hosts, what they printed, and what the journal and tools hold."""

    folder: Path
    scripts: int
    kills: int
    shells: int
    seed: int
    time_limit: float = 30.0
    grace: float = 0.5
    gate_for: float = 0.05
    sandbox: str = "auto"
    results: dict[str, list[Any]] = field(default_factory=dict)
    """Each result a host printed, by script id: [index, status, value, script id]."""
    killed: int = 0
    hosts: list[asyncio.subprocess.Process] = field(default_factory=list)
    counts: dict[str, Any] = field(default_factory=dict)

    @property
    def state_dir(self) -> Path:
        return self.folder / "state"

    @property
    def shared(self) -> Path:
        return self.folder / "shared"

    async def run(self, wait: float = 60.0) -> None:
        """Start, kill and restart hosts until every script has run; then a last host."""
        self.shared.mkdir(parents=True, exist_ok=True)
        randoms = random.Random(self.seed)
        while self.killed < self.kills:
            host = await self._start()
            events = randoms.randint(1, 4)
            finished = await self._read(host, events, wait)
            if finished:
                await asyncio.wait_for(host.wait(), wait)
                break
            host.send_signal(signal.SIGKILL)
            await asyncio.wait_for(host.wait(), wait)
            self.killed += 1
        host = await self._start()
        assert await self._read(host, None, wait), "the last host did not finish"
        assert await asyncio.wait_for(host.wait(), wait) == 0

    async def _start(self) -> asyncio.subprocess.Process:
        config = {
            "state_dir": str(self.state_dir),
            "shared": str(self.shared),
            "scripts": self.scripts,
            "shells": self.shells,
            "grace": self.grace,
            "sandbox": self.sandbox,
            "time_limit": self.time_limit,
            "gate_for": self.gate_for,
        }
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            CHAOS_HOST,
            json.dumps(config),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=str(Path(__file__).resolve().parents[2]),
        )
        self.hosts.append(process)
        return process

    async def _read(
        self, host: asyncio.subprocess.Process, events: int | None, wait: float
    ) -> bool:
        """Read the host's lines until `events` results (None: all of them); True if it
        said it is all done."""
        assert host.stdout is not None
        seen = 0
        while events is None or seen < events:
            line = await asyncio.wait_for(host.stdout.readline(), wait)
            if not line:
                assert host.stderr is not None
                said = (await host.stderr.read()).decode()[-3000:]
                raise AssertionError(f"a chaos host exited: {said}")
            text = line.decode().strip()
            if text == "all done":
                return True
            if text.startswith("result "):
                result = json.loads(text[len("result ") :])
                self.results[result[3]] = result
                seen += 1
        return False

    def check(self) -> list[str]:
        """What failed of what must hold; `counts` is filled in either way."""
        problems: list[str] = []
        with Journal.open(self.state_dir / "journal.sqlite3") as journal:
            uncertain = journal.uncertain()
            calls = {call.script_id: call for call in journal.calls() if call.script_id}
        with sqlite3.connect(self.state_dir / "journal.sqlite3") as db:
            scripts = db.execute(
                "SELECT script_id, code, status FROM scripts WHERE code LIKE '# chaos %'"
            ).fetchall()
        ended: dict[int, list[str]] = {}
        never_ended = 0
        statuses: dict[str, int] = {}
        ran = set()
        for script_id, code, status in scripts:
            index = int(code.split()[2])
            statuses[str(status)] = statuses.get(str(status), 0) + 1
            if status is None:
                never_ended += 1
            else:
                ended.setdefault(index, []).append(script_id)
            if status == "ok":
                ran.add(index)
        missing = [i for i in range(self.scripts) if len(ended.get(i, [])) != 1]
        if missing:
            problems.append(f"scripts without exactly one result: {missing[:20]}")
        if never_ended:
            problems.append(f"{never_ended} scripts were begun and never ended")
        in_doubt_journal = {c.script_id for c in uncertain if c.uncertain_reason == "in_doubt"}
        in_doubt_results = set()
        variables_lost = []
        for script_id, (index, status, value, _) in self.results.items():
            if value is not None and "'in_doubt'" in value:
                in_doubt_results.add(script_id)
            # A script killed before it reached its interpreter ends saying none of it ran:
            # its variable was never set. Every script that ended ok set its own.
            missing = ast.literal_eval(value)[0] if status == "ok" and value else []
            if ran.intersection(missing):
                variables_lost.append(index)
        if variables_lost:
            problems.append(f"variables lost before scripts {variables_lost[:20]}")
        told = in_doubt_results - in_doubt_journal
        if told:
            problems.append(f"in doubt in results but not in the journal: {sorted(told)[:5]}")
        untold = {s for s in in_doubt_journal if s in self.results} - in_doubt_results
        if untold:
            problems.append(f"in doubt in the journal but not in results: {sorted(untold)[:5]}")
        twice = []
        puts_not_once = []
        for i in range(self.scripts):
            if i % 2:
                if len(count(self.shared, "effects", "transfer", f"k{i}")) > 1:
                    twice.append(i)
            else:
                effects = count(self.shared, "effects", "put", f"k{i}")
                ok = [r for r in self.results.values() if r[0] == i and r[1] == "ok"]
                answered = ok and ok[0][2] is not None and "put k" in ok[0][2]
                if answered and len(effects) != 1:
                    puts_not_once.append(i)
        if twice:
            problems.append(f"transfer took effect twice for scripts {twice}")
        if puts_not_once:
            problems.append(f"put did not take effect exactly once for scripts {puts_not_once}")
        repeats = sum(
            1
            for i in range(0, self.scripts, 2)
            if len(set(count(self.shared, "attempts", "put", f"k{i}"))) == 1
            and len(count(self.shared, "attempts", "put", f"k{i}")) > 1
        )
        self.counts = {
            "scripts": self.scripts,
            "shells": self.shells,
            "kills": self.killed,
            "hosts": len(self.hosts),
            "results_seen_by_the_harness": len(self.results),
            "statuses": statuses,
            "in_doubt": len(in_doubt_journal),
            "idempotent_calls_made_again_with_the_same_key": repeats,
            "calls_journaled": len(calls),
        }
        return problems
