"""Images a script shows: the type a result carries them in, and their bounds per script.

The kernel sends each image `show()` was given in an `image` frame of its own, beside the
script's other frames; nothing is sent, kept or checked for a script that shows none. The host
keeps a script's images in the order they came, up to `max_images` of them and `image_limit`
bytes in all, and counts the rest, so the result can say what was dropped.
"""

from __future__ import annotations

import base64
import binascii

from ..kernel import wire
from ..kernel.content import Media

__all__ = ["IMAGE_TYPES", "ImageTray", "ScriptImage"]

IMAGE_TYPES = frozenset(("image/png", "image/jpeg", "image/gif", "image/webp"))
"""The MIME types a script can show: those that MCP clients and model APIs take."""


class ScriptImage(Media):
    """An image the script showed (`show(...)` in the script): its `mime_type`, `data` (its
    bytes) and `size`."""

    __slots__ = ()


class ImageTray:
    """One script's images, within `max_images` and `image_limit` bytes in all."""

    def __init__(self, max_images: int, image_limit: int) -> None:
        self.max_images = max_images
        self.image_limit = image_limit
        self.images: list[ScriptImage] = []
        self.dropped = 0
        self.dropped_bytes = 0
        self._bytes = 0

    def take(self, frame: wire.Message) -> None:
        """Keep the image of an `image` frame, or count it as dropped; `ValueError` if the
        frame is not one the kernel sends."""
        mime_type = frame.get("mime_type")
        data = frame.get("data")
        if mime_type not in IMAGE_TYPES or not isinstance(data, str):
            raise ValueError("an image frame without a known image type and base64 data")
        size = len(data) // 4 * 3  # within two bytes: enough to drop it undecoded
        if len(self.images) >= self.max_images or self._bytes + size > self.image_limit + 2:
            self.dropped += 1
            self.dropped_bytes += size
            return
        try:
            decoded = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("an image frame whose data is not base64") from None
        if self._bytes + len(decoded) > self.image_limit:
            self.dropped += 1
            self.dropped_bytes += len(decoded)
            return
        self._bytes += len(decoded)
        self.images.append(ScriptImage(str(mime_type), decoded))

    def dropped_words(self) -> str | None:
        """What was dropped and why, in a sentence; None when nothing was."""
        if not self.dropped:
            return None
        return (
            f"{self.dropped} image(s) shown ({_megabytes(self.dropped_bytes)}) were dropped: a "
            f"result carries at most {self.max_images} images and "
            f"{_megabytes(self.image_limit)} of them in all (max_images, image_limit). Show "
            "fewer or smaller images (a lower dpi, a smaller size, JPEG for photographs)."
        )


def _megabytes(size: int) -> str:
    return f"{size / 1e6:,.1f} MB" if size >= 100_000 else f"{size:,} bytes"
