"""`python -m toolscript.cli`: the `toolscript` command."""

from __future__ import annotations

from . import main

main()
