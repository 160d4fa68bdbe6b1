"""Chaos at the size CI can afford: hosts SIGKILLed at random points, restarted on the same
state directory; every script ends exactly once and every held call is answered truthfully
(`bench/chaos.py` runs the issue's size, 200 scripts and 30 kills)."""

from __future__ import annotations

import json
import os

import pytest

from tests.conftest import SANDBOX

from .chaos import Chaos
from .conftest import Hosts


@pytest.mark.timeout(300)
async def test_scripts_through_hosts_killed_at_random_points_each_end_once_and_truthfully(
    hosts: Hosts,
) -> None:
    chaos = Chaos(
        hosts.state_dir.parent / "chaos",
        scripts=int(os.environ.get("TOOLSCRIPT_CHAOS_SCRIPTS", "24")),
        kills=int(os.environ.get("TOOLSCRIPT_CHAOS_KILLS", "5")),
        shells=4,
        seed=int(os.environ.get("TOOLSCRIPT_CHAOS_SEED", "15")),
        sandbox=SANDBOX,
    )
    hosts.watch(chaos.state_dir)
    await chaos.run()
    problems = chaos.check()
    print("chaos counts:", json.dumps(chaos.counts))
    assert not problems, problems
    assert chaos.killed == chaos.kills
