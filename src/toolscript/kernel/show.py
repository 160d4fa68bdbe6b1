"""`show(obj)`: an image for the script's result.

The script shows PNG, JPEG, GIF or WebP bytes, a PIL image, a matplotlib figure (or axes, or
`pyplot` itself for its current figure), or an image a tool returned; the kernel sends it to
the host in an `image` frame, and the host keeps it for the result within its bounds. Neither
PIL nor matplotlib is imported here: an object is taken for one of theirs by the module its
type comes from and the method it has (`savefig`, `save`), so a script that shows no such
object pays nothing for them, and an interpreter without them works the same.
"""

from __future__ import annotations

import base64
import binascii
import io
import types
from collections.abc import Callable
from typing import Any

from .content import Image
from .wire import LONGEST_FRAME, MAX_FRAME, encode

_WHAT = (
    "PNG, JPEG, GIF or WebP bytes, a PIL image, a matplotlib figure, or an image a tool returned"
)


def make_show(post: Callable[[bytes], None], script_id: Callable[[], str | None]) -> Any:
    """The script's `show`, sending each image with `post` for the script running then."""

    def show(obj: Any) -> None:
        """Show an image in this script's result (the model sees it beside the text).

        `obj` is PNG, JPEG, GIF or WebP bytes, a PIL image, a matplotlib figure (or axes, or
        `matplotlib.pyplot` for its current figure), or an image a tool returned (or a list
        of a tool's content blocks: its images are shown). The result carries a bounded
        number of images, and says when some were dropped.
        """
        frames = []
        for mime_type, data in images_of(obj):
            frame = encode(
                {
                    "t": "image",
                    "script": script_id(),
                    "mime_type": mime_type,
                    "data": base64.b64encode(data).decode("ascii"),
                }
            )
            if len(frame) > LONGEST_FRAME:
                raise ValueError(
                    f"show(): the image is {len(data) / 1e6:,.0f} MB, too large to send over "
                    f"the interpreter's channel ({MAX_FRAME >> 20} MiB as base64)"
                )
            frames.append(frame)
        for frame in frames:
            post(frame)

    show.__module__ = "builtins"
    return show


def images_of(obj: Any) -> list[tuple[str, bytes]]:
    """The images of what `show` was given: one, or the images among a tool's content blocks
    (a list of them, or a structured result that holds them as `content`)."""
    if type(obj) is dict and isinstance(obj.get("content"), list) and "type" not in obj:
        obj = obj["content"]
    if isinstance(obj, list | tuple):
        found = [image_of(item) for item in obj if isinstance(item, Image) or _is_block(item)]
        if not found:
            raise TypeError(f"show() got a {type(obj).__name__} with no image; it takes {_WHAT}")
        return found
    return [image_of(obj)]


def image_of(obj: Any) -> tuple[str, bytes]:
    """The MIME type and bytes of what `show` was given; `TypeError` when it is no image."""
    if isinstance(obj, Image):
        if sniff(obj.data) is None:
            raise TypeError(f"show(): the tool's {obj.mime_type} image cannot be shown")
        return str(sniff(obj.data)), obj.data
    if _is_block(obj):
        # An MCP image block as a tool with an output schema gives it: a dict, base64 data.
        try:
            data = base64.b64decode(obj["data"], validate=True)
        except (binascii.Error, ValueError):
            raise TypeError("show(): the image block's data is not base64") from None
        mime_type = sniff(data)
        if mime_type is None:
            raise TypeError(f"show(): the tool's {obj.get('mimeType')} image cannot be shown")
        return mime_type, data
    if isinstance(obj, bytes | bytearray | memoryview):
        data = bytes(obj)
        mime_type = sniff(data)
        if mime_type is None:
            raise TypeError(f"show() got bytes that are not an image; it takes {_WHAT}")
        return mime_type, data
    figure = _matplotlib_figure(obj)
    if figure is not None:
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", bbox_inches="tight")
        return "image/png", buffer.getvalue()
    if type(obj).__module__.startswith("PIL.") and callable(getattr(obj, "save", None)):
        return "image/png", _pil_png(obj)
    raise TypeError(f"show() takes {_WHAT}, not {type(obj).__name__}")


def _is_block(obj: Any) -> bool:
    """Whether `obj` is an MCP image content block as a dict (`{"type": "image", "data":
    <base64>, "mimeType": ...}`)."""
    return type(obj) is dict and obj.get("type") == "image" and isinstance(obj.get("data"), str)


def sniff(data: bytes) -> str | None:
    """The image type of `data` by its first bytes, or None."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def _matplotlib_figure(obj: Any) -> Any:
    if isinstance(obj, types.ModuleType):
        return obj.gcf() if obj.__name__ == "matplotlib.pyplot" else None
    if not type(obj).__module__.startswith("matplotlib."):
        return None
    if callable(getattr(obj, "savefig", None)):
        return obj
    figure = getattr(obj, "figure", None)  # axes, artists: the figure they are drawn in
    return figure if callable(getattr(figure, "savefig", None)) else None


def _pil_png(image: Any) -> bytes:
    buffer = io.BytesIO()
    try:
        image.save(buffer, format="PNG")
    except (OSError, ValueError, KeyError):  # a mode PNG cannot hold (CMYK, say)
        buffer = io.BytesIO()
        image.convert("RGBA").save(buffer, format="PNG")
    return buffer.getvalue()
