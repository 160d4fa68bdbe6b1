"""Images a script shows: `show(...)` puts them in `ScriptResult.images`, within bounds."""

from __future__ import annotations

import io

import pytest

from tests.conftest import MakeRuntime
from toolscript import ScriptImage

pytestmark = pytest.mark.timeout(60)

PNG_BYTES = "b'\\x89PNG\\r\\n\\x1a\\n' + bytes(range(256)) * 4"
"""A script expression: bytes that begin as a PNG does (1,032 of them)."""


async def test_png_bytes_and_a_pil_image_shown_are_in_the_result_in_order(
    make_runtime: MakeRuntime,
) -> None:
    from PIL import Image

    rt = await make_runtime()
    code = (
        "from PIL import Image\n"
        f"show({PNG_BYTES})\n"
        "show(Image.new('RGB', (3, 2), (200, 10, 10)))\n"
        "show(Image.new('CMYK', (2, 2)))\n"
        "'shown'"
    )
    result = await rt.run(code)
    assert result.status == "ok", result.text
    first, red, cmyk = result.images
    assert isinstance(first, ScriptImage)
    assert first == ScriptImage("image/png", b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    assert (red.mime_type, cmyk.mime_type) == ("image/png", "image/png")
    with Image.open(io.BytesIO(red.data)) as image:
        assert (image.size, image.getpixel((0, 0))) == ((3, 2), (200, 10, 10))
    with Image.open(io.BytesIO(cmyk.data)) as image:
        assert image.size == (2, 2)
    assert "images: 3 shown (image/png 1,032 bytes, image/png " in result.text
    assert [image["size"] for image in result.to_dict()["images"]] == [
        image.size for image in result.images
    ]


async def test_a_matplotlib_figure_its_axes_and_pyplot_itself_can_be_shown(
    make_runtime: MakeRuntime,
) -> None:
    rt = await make_runtime()
    code = (
        "import matplotlib\n"
        "matplotlib.use('Agg')\n"
        "import matplotlib.pyplot as plt\n"
        "figure, axes = plt.subplots(figsize=(1, 1), dpi=40)\n"
        "axes.bar([1, 2], [3, 4])\n"
        "show(figure)\n"
        "show(axes)\n"
        "show(plt)\n"
    )
    result = await rt.run(code)
    assert result.status == "ok", result.text
    assert [image.mime_type for image in result.images] == ["image/png"] * 3
    assert all(image.data.startswith(b"\x89PNG\r\n\x1a\n") for image in result.images)


async def test_images_beyond_the_count_are_dropped_and_the_result_says_so(
    make_runtime: MakeRuntime,
) -> None:
    rt = await make_runtime(max_images=2)
    result = await rt.run(f"for n in range(5):\n    show({PNG_BYTES})")
    assert result.status == "ok", result.text
    assert len(result.images) == 2
    dropped = (
        "3 image(s) shown (3,096 bytes) were dropped: a result carries at most 2 images and "
        "5.0 MB of them in all (max_images, image_limit)."
    )
    assert dropped in result.note and dropped in result.text
    again = await rt.run(f"show({PNG_BYTES})")
    assert len(again.images) == 1 and "dropped" not in again.text


async def test_images_beyond_the_size_bound_are_dropped_and_the_result_says_so(
    make_runtime: MakeRuntime,
) -> None:
    rt = await make_runtime(image_limit=2_500)
    code = f"show({PNG_BYTES})\nshow({PNG_BYTES})\nshow({PNG_BYTES})\nshow(b'GIF89a' + b'x' * 10)"
    result = await rt.run(code)
    assert [image.mime_type for image in result.images] == ["image/png", "image/png", "image/gif"]
    assert "1 image(s) shown (1,032 bytes) were dropped" in result.note
    assert "2,500 bytes of them in all" in result.note


async def test_show_refuses_what_is_no_image_with_a_type_error(make_runtime: MakeRuntime) -> None:
    rt = await make_runtime()
    result = await rt.run(
        "errors = []\n"
        "for thing in (b'not an image', 'text', [1, 2], None):\n"
        "    try:\n"
        "        show(thing)\n"
        "    except TypeError as error:\n"
        "        errors.append(str(error))\n"
        "len(errors), errors[0]"
    )
    assert result.status == "ok", result.text
    assert result.value is not None and result.value.startswith("(4, 'show() got bytes that are")
    assert result.images == ()
    assert "images:" not in result.text


async def test_an_image_block_as_a_structured_result_gives_it_can_be_shown(
    make_runtime: MakeRuntime,
) -> None:
    # A tool with an output schema (the filesystem server's read_media_file) gives its image
    # as a dict with base64 data, alone or in the result's `content`.
    rt = await make_runtime()
    result = await rt.run(
        "import base64\n"
        f"data = base64.b64encode({PNG_BYTES}).decode()\n"
        "block = {'type': 'image', 'data': data, 'mimeType': 'image/png'}\n"
        "show(block)\n"
        "show({'content': [{'type': 'text', 'text': 'a picture'}, block]})\n"
        "try:\n"
        "    show({'type': 'image', 'data': 'not base64!', 'mimeType': 'image/png'})\n"
        "except TypeError as error:\n"
        "    print(error)\n"
    )
    assert result.status == "ok", result.text
    assert [image.mime_type for image in result.images] == ["image/png", "image/png"]
    assert "not base64" in result.stdout


async def test_a_background_script_carries_its_images(make_runtime: MakeRuntime) -> None:
    rt = await make_runtime()
    handle = await rt.shell("main").start(f"show({PNG_BYTES})")
    result = await handle.result()
    assert result.status == "ok", result.text
    assert [image.size for image in result.images] == [1032]
