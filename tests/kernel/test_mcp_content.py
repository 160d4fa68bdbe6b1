"""Content blocks from MCP tools, as the kernel hands them to the script."""

from __future__ import annotations

import base64
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from toolscript.kernel.content import Audio, Image, Resource, ResourceLink, from_wire


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_a_marked_image_becomes_an_image_with_its_bytes_and_a_short_repr() -> None:
    image = from_wire({"$toolscript": "image", "mime_type": "image/png", "data": b64(b"x" * 1234)})
    assert image == Image("image/png", b"x" * 1234)
    assert image.size == 1234
    assert repr(image) == "<Image image/png 1,234 bytes>"


def test_a_marked_audio_block_becomes_audio() -> None:
    audio = from_wire({"$toolscript": "audio", "mime_type": "audio/wav", "data": b64(b"RIFF")})
    assert audio == Audio("audio/wav", b"RIFF")
    assert repr(audio) == "<Audio audio/wav 4 bytes>"


def test_resources_carry_their_text_or_their_bytes() -> None:
    text = from_wire(
        {"$toolscript": "resource", "uri": "a://1", "mime_type": "text/plain", "text": "hi"}
    )
    blob = from_wire(
        {"$toolscript": "resource", "uri": "a://2", "mime_type": None, "data": b64(b"\0")}
    )
    assert text == Resource("a://1", "text/plain", text="hi")
    assert blob == Resource("a://2", None, data=b"\0")
    assert repr(text) == "<Resource a://1 text/plain 2 characters>"
    assert repr(blob) == "<Resource a://2 1 bytes>"


def test_a_resource_link_keeps_its_uri_name_and_type() -> None:
    link = from_wire(
        {
            "$toolscript": "resource_link",
            "uri": "file:///r.csv",
            "name": "r",
            "mime_type": "text/csv",
        }
    )
    assert link == ResourceLink("file:///r.csv", "r", "text/csv")
    assert repr(link) == "<ResourceLink file:///r.csv 'r' text/csv>"


def test_marked_items_of_a_top_level_list_are_converted_and_the_rest_kept() -> None:
    value = ["caption", {"$toolscript": "image", "mime_type": "image/gif", "data": b64(b"G")}, 3]
    assert from_wire(value) == ["caption", Image("image/gif", b"G"), 3]


def test_markers_nested_deeper_than_the_top_level_list_are_left_alone() -> None:
    nested = {"inner": {"$toolscript": "image", "mime_type": "image/png", "data": b64(b"x")}}
    assert from_wire(nested) is nested


def test_a_malformed_marked_block_is_returned_as_it_came() -> None:
    bad_base64 = {"$toolscript": "image", "mime_type": "image/png", "data": "not base64!"}
    missing_uri = {"$toolscript": "resource", "text": "x"}
    unknown = {"$toolscript": "hologram"}
    assert from_wire(bad_base64) is bad_base64
    assert from_wire(missing_uri) is missing_uri
    assert from_wire(unknown) is unknown


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=20,
)


@settings(max_examples=50)
@given(json_values)
def test_values_without_markers_come_back_as_the_same_object(value: Any) -> None:
    if isinstance(value, dict):
        value.pop("$toolscript", None)
    if isinstance(value, list):
        value = [item for item in value if not (isinstance(item, dict) and "$toolscript" in item)]
    assert from_wire(value) is value
