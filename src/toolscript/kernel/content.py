"""Tool results that are not plain data: images, audio, resources, resource links.

The host sends such content blocks as dicts marked with the key `"$toolscript"` (see
`toolscript.tools.spec.ToolOutcome`); `from_wire` turns them into the small objects below,
whether the answer is one block or a list of blocks. Anything else is returned as it came,
and the common path (a plain str, dict or list without markers) costs a type check or a scan.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

MARKER = "$toolscript"


@dataclass(frozen=True, slots=True, repr=False)
class Media:
    """Bytes of one MIME type: `mime_type`, `data` and `size`. The kinds below, and the
    host's images a script showed, are each one."""

    mime_type: str
    data: bytes

    @property
    def size(self) -> int:
        """The size in bytes."""
        return len(self.data)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.mime_type} {self.size:,} bytes>"


class Image(Media):
    """An image a tool returned: `mime_type`, `data` (its bytes) and `size`."""

    __slots__ = ()


class Audio(Media):
    """An audio clip a tool returned: `mime_type`, `data` (its bytes) and `size`."""

    __slots__ = ()


@dataclass(frozen=True, slots=True, repr=False)
class Resource:
    """A resource embedded in a tool's answer: its URI, and either its text or its bytes."""

    uri: str
    mime_type: str | None = None
    text: str | None = None
    data: bytes | None = None

    @property
    def size(self) -> int:
        """The resource's size: characters of its text, or bytes of its data."""
        if self.text is not None:
            return len(self.text)
        return len(self.data) if self.data is not None else 0

    def __repr__(self) -> str:
        kind = f" {self.mime_type}" if self.mime_type else ""
        unit = "characters" if self.text is not None else "bytes"
        return f"<Resource {self.uri}{kind} {self.size:,} {unit}>"


@dataclass(frozen=True, slots=True, repr=False)
class ResourceLink:
    """A link to a resource the tool did not embed: its URI, name and MIME type."""

    uri: str
    name: str | None = None
    mime_type: str | None = None

    def __repr__(self) -> str:
        kind = f" {self.mime_type}" if self.mime_type else ""
        name = f" {self.name!r}" if self.name else ""
        return f"<ResourceLink {self.uri}{name}{kind}>"


Content = Image | Audio | Resource | ResourceLink


def from_wire(value: Any) -> Any:
    """Turn marked content blocks into objects; return everything else unchanged.

    A marked dict at the top level becomes one object; in a top-level list, each marked item
    does. A marked dict that is malformed (bad base64, a missing field) is left as it is, so
    the script still sees what the tool sent.
    """
    if isinstance(value, dict):
        return _block(value) if MARKER in value else value
    if isinstance(value, list):
        if not any(isinstance(item, dict) and MARKER in item for item in value):
            return value
        return [
            _block(item) if isinstance(item, dict) and MARKER in item else item for item in value
        ]
    return value


def _block(block: dict[str, Any]) -> Any:
    kind = block.get(MARKER)
    try:
        if kind == "image":
            return Image(str(block["mime_type"]), _bytes(block["data"]))
        if kind == "audio":
            return Audio(str(block["mime_type"]), _bytes(block["data"]))
        if kind == "resource":
            text = block.get("text")
            data = block.get("data")
            return Resource(
                uri=str(block["uri"]),
                mime_type=_optional_str(block.get("mime_type")),
                text=None if text is None else str(text),
                data=None if data is None else _bytes(data),
            )
        if kind == "resource_link":
            return ResourceLink(
                uri=str(block["uri"]),
                name=_optional_str(block.get("name")),
                mime_type=_optional_str(block.get("mime_type")),
            )
    except (KeyError, TypeError, ValueError, binascii.Error):
        return block
    return block


def _bytes(data: Any) -> bytes:
    if not isinstance(data, str):
        raise TypeError("content data must be a base64 string")
    return base64.b64decode(data, validate=True)


def _optional_str(value: Any) -> str | None:
    return None if value is None else str(value)
