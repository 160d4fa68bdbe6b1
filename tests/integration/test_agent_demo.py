"""examples/agent_demo.py runs a whole agent turn against its own stand-in model server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(60)
def test_the_agent_demo_ends_its_turn_and_shows_the_tools_value() -> None:
    done = subprocess.run(
        [sys.executable, "examples/agent_demo.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=50,
    )

    assert done.returncode == 0, done.stderr
    assert "stop reason: end_turn" in done.stdout, done.stdout
    assert "steps: 2" in done.stdout, done.stdout
    read = done.stdout.split("summary:")[0]  # the summary is scripted; the value is not
    assert "prices: [4.5, 2.25, 4.5]" in read, done.stdout
    assert "11.25" in read, done.stdout
