"""An MCP tool's result, as the value the script receives (docs/design.md#tools-inside-the-script)."""

from __future__ import annotations

import binascii
from typing import Any

import mcp.types as types

from ..spec import DataOutcome, ToolOutcome

__all__ = ["tool_outcome"]


def tool_outcome(result: types.CallToolResult, *, structured: bool = True) -> ToolOutcome:
    """Turn an MCP tool result into what the host passes to the kernel.

    An error result is its text. A tool that publishes an output schema (`structured`)
    answers its structured content, which the schema describes and the stub's return type
    shows. Any other answer is its content, which the stub promises instead: a single text
    block as `str`, else a list of blocks, text as `str` and the rest as dicts marked with
    `"$toolscript"` (see `toolscript.kernel.content`). Structured content from a tool with no
    schema is used only when there is no content at all.
    """
    if result.is_error:
        text = "\n".join(
            block.text for block in result.content if isinstance(block, types.TextContent)
        )
        return ToolOutcome(
            value=text or "The tool reported an error without a message.", is_error=True
        )
    if result.structured_content is not None and (structured or not result.content):
        return DataOutcome(value=result.structured_content)
    if len(result.content) == 1 and isinstance(result.content[0], types.TextContent):
        return ToolOutcome(value=result.content[0].text)
    bad = next((block for block in result.content if not _base64(block)), None)
    if bad is not None:
        # The kernel would leave such a block as the wire's dict, which is neither the
        # object nor the text the stub promises: the answer is an error saying why.
        return ToolOutcome(
            value=f"the server answered with {bad.type} data that is not valid base64, so "
            "the answer could not be read (the call did take place)",
            is_error=True,
        )
    return ToolOutcome(value=[_block(block) for block in result.content])


def _base64(block: types.ContentBlock) -> bool:
    """Whether `block`'s bytes, if it carries any, are valid base64."""
    if isinstance(block, types.ImageContent | types.AudioContent):
        data: str = block.data
    elif isinstance(block, types.EmbeddedResource) and isinstance(
        block.resource, types.BlobResourceContents
    ):
        data = block.resource.blob
    else:
        return True
    try:
        binascii.a2b_base64(data, strict_mode=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _block(block: types.ContentBlock) -> Any:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent):
        return {"$toolscript": "image", "mime_type": block.mime_type, "data": block.data}
    if isinstance(block, types.AudioContent):
        return {"$toolscript": "audio", "mime_type": block.mime_type, "data": block.data}
    if isinstance(block, types.EmbeddedResource):
        contents = block.resource
        wire: dict[str, Any] = {
            "$toolscript": "resource",
            "uri": str(contents.uri),
            "mime_type": contents.mime_type,
        }
        if isinstance(contents, types.TextResourceContents):
            wire["text"] = contents.text
        else:
            wire["data"] = contents.blob
        return wire
    return {
        "$toolscript": "resource_link",
        "uri": str(block.uri),
        "name": block.name,
        "mime_type": block.mime_type,
    }
