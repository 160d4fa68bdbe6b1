"""Answers over HTTP stay within what the official client reads in one server-sent event."""

from __future__ import annotations

from pathlib import Path

import mcp.types as types
import pytest

from .conftest import client, http_server, run, structured

PNG_OF_ABOUT_1_MB = """import zlib, struct, os
def chunk(t, d): return struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d))
raw = b''.join(b'\\x00' + os.urandom(600 * 3) for _ in range(600))
show(b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 600, 600, 8, 2, 0, 0, 0))
     + chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b''))
"""


@pytest.mark.timeout(90)
async def test_answers_too_big_for_one_event_are_cut_to_fit_not_lost(tmp_path: Path) -> None:
    async with http_server(tmp_path) as server, client(server.transport()) as session:
        # Many short lines: 1 MB of stdout that JSON doubles with its escaped newlines.
        lines = await run(session, "for i in range(300_000): print(i)")
        assert structured(lines)["status"] == "ok"
        assert "characters cut to fit the answer" in structured(lines)["stdout"]
        both = await run(
            session,
            "import sys\nsys.stdout.write('a' * 2_000_000)\nsys.stderr.write('b' * 2_000_000)",
        )
        assert structured(both)["status"] == "ok"
        wide = await run(session, "'é' * 2_000_000")
        assert structured(wide)["value"].startswith("'éé")
        shown = await run(session, PNG_OF_ABOUT_1_MB)
        assert structured(shown)["status"] == "ok"
        assert structured(shown)["images_not_sent"] == 1
        assert not any(isinstance(block, types.ImageContent) for block in shown.content)
        assert "1 image(s) not sent" in shown.content[0].text  # type: ignore[union-attr]
        # A small image still goes.
        small = await run(session, "show(b'\\x89PNG\\r\\n\\x1a\\n' + b'0' * 100)")
        assert any(isinstance(block, types.ImageContent) for block in small.content)
