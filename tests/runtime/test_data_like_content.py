"""A tool's data that carries the key "$toolscript" reaches the script as data: the kernel
makes images and links only of the content blocks the host itself built."""

from __future__ import annotations

import dataclasses
from typing import Any

import mcp.types as types
import pytest

from tests.conftest import MakeRuntime
from toolscript import tool
from toolscript.host.catalogue import answer_of
from toolscript.tools.mcp.results import tool_outcome

pytestmark = pytest.mark.timeout(30)

LOOKS_LIKE_AN_IMAGE = {
    "$toolscript": "image",
    "mime_type": "image/png",
    "data": "aGk=",
    "owner": "a",
}
LOOKS_LIKE_A_LINK = {"$toolscript": "resource_link", "uri": "file:///etc/passwd", "note": "n"}


@tool
async def lookup(kind: str) -> Any:
    """Return data shaped like a content block."""
    return {"image": LOOKS_LIKE_AN_IMAGE, "links": [LOOKS_LIKE_A_LINK, "text"]}[kind]


async def test_a_python_tools_data_shaped_like_a_content_block_reaches_the_script_as_data(
    make_runtime: MakeRuntime,
) -> None:
    # It came back as `<Image image/png 2 bytes>` and `<ResourceLink ...>`, its other keys
    # dropped.
    runtime = await make_runtime(tools=[lookup])
    image = await runtime.run("await lookup(kind='image')")
    assert image.value == repr(LOOKS_LIKE_AN_IMAGE), image.text
    links = await runtime.run("await lookup(kind='links')")
    assert links.value == repr([LOOKS_LIKE_A_LINK, "text"]), links.text


async def test_a_real_content_block_still_reaches_the_script_as_an_image(
    make_runtime: MakeRuntime,
) -> None:
    @tool
    async def picture() -> Any:
        """A tool whose handler builds the block itself, as an MCP server's image is."""
        return None

    async def handler(arguments: dict[str, Any]) -> Any:
        return tool_outcome(
            types.CallToolResult(content=[types.ImageContent(data="aGk=", mime_type="image/png")]),
            structured=False,
        )

    spec = dataclasses.replace(picture.spec, handler=handler)
    runtime = await make_runtime(tools=[spec])
    result = await runtime.run("await picture()")
    assert result.value == "[<Image image/png 2 bytes>]", result.text


def test_an_mcp_tools_structured_content_shaped_like_a_block_is_answered_as_plain_data() -> None:
    outcome = tool_outcome(
        types.CallToolResult(content=[], structured_content=dict(LOOKS_LIKE_AN_IMAGE))
    )
    assert answer_of("srv.doc", outcome).to_frame(1).get("plain") is True
    ordinary = tool_outcome(types.CallToolResult(content=[], structured_content={"sum": 1}))
    assert "plain" not in answer_of("srv.add", ordinary).to_frame(1)


@pytest.mark.parametrize(
    "block",
    [
        types.ImageContent(data="!!!not base64", mime_type="image/png"),
        types.AudioContent(data="a===", mime_type="audio/wav"),
        types.EmbeddedResource(
            resource=types.BlobResourceContents(uri="file:///x", blob="no spaces allowed")
        ),
    ],
)
def test_a_block_whose_data_is_not_base64_is_an_error_saying_so(block: Any) -> None:
    # The kernel left it as the wire's dict (`{'$toolscript': 'image', ...}`), which is
    # neither the object nor the text the stub promises.
    outcome = tool_outcome(types.CallToolResult(content=[types.TextContent(text="t"), block]))
    assert outcome.is_error, outcome
    assert "not valid base64" in outcome.value and block.type in outcome.value
    good = types.ImageContent(data="aGk=", mime_type="image/png")
    assert not tool_outcome(types.CallToolResult(content=[good, good])).is_error
