"""Argument briefs: short, bounded, and unable to raise (docs/design.md#call-fates, issue 4)."""

from __future__ import annotations

import time
from typing import Any, NoReturn

from hypothesis import given, settings
from hypothesis import strategies as st

from toolscript.kernel.brief import brief


def nested(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value


def test_a_call_s_arguments_read_like_keyword_arguments() -> None:
    assert brief({"title": "Bug", "count": 3, "tags": ["a", "b"]}) == (
        "title='Bug', count=3, tags=['a', 'b']"
    )


def test_every_argument_left_out_is_counted_and_none_is_cut_without_a_mark() -> None:
    # The arguments after a finished list, a key whose value did not fit, and a key whose
    # entry did not begin: each one said, never dropped.
    mail = {
        "to": "alice@example.com",
        "cc": ["bob@example.com", "carol@example.com", "x" * 27],
        "subject": "Quarterly numbers",
        "body": "see attached",
        "priority": 1,
    }
    assert brief(mail).endswith("(27 chars)], … 3 more"), brief(mail)
    assert brief({"a": [1, 2], "b": "x" * 80, "c": 3}).endswith(", c=…")
    assert brief({"k": {"a" * 30: "b" * 60, "c": 1, "d": 2}}).endswith("(60 chars), … 2 more}")
    nested_lists = brief({"x": [[list(range(50))] * 5] * 5, "y": 1})
    assert nested_lists.endswith("more], … 4 more], … 4 more], … 1 more"), nested_lists
    for value in (mail, {"tags": {"a", "b"}, "n": 1, "s": "y" * 90, "t": 1}):
        assert "……" not in brief(value) and len(brief(value)) <= 120


def test_an_argument_name_that_is_not_an_identifier_is_quoted() -> None:
    assert brief({"file-path": "/tmp/x"}) == "'file-path'='/tmp/x'"


def test_a_value_that_is_not_a_dict_reads_as_its_repr() -> None:
    assert brief([1, (2, 3), {"a": None}, {4}, frozenset(), 1.5, True, b"\x00"]) == (
        "[1, (2, 3), {'a': None}, {4}, frozenset(), 1.5, True, b'\\x00']"
    )


def test_a_long_list_is_summarized_with_a_count_of_what_is_left_out() -> None:
    text = brief({"ids": list(range(10_000))})
    assert text.startswith("ids=[0, 1, 2, ")
    assert "more]" in text
    shown = text.split("…")[0].count(",")
    assert f"… {10_000 - shown:,} more" in text
    assert len(text) <= 120


@settings(deadline=None)
@given(st.integers(min_value=8, max_value=400))
def test_the_brief_is_never_longer_than_its_limit(limit: int) -> None:
    value = {"text": "x" * 1000, "items": list(range(1000)), "deep": nested(500)}
    assert len(brief(value, limit)) <= limit


def test_a_100000_level_nested_argument_is_briefed_in_under_50_ms() -> None:
    value = {"deep": nested(100_000)}
    started = time.perf_counter()
    text = brief(value)
    elapsed = time.perf_counter() - started
    assert elapsed < 0.050
    assert text.startswith("deep=[[[[")
    assert len(text) <= 120


def test_a_50_mb_string_is_briefed_in_under_50_ms_with_its_size_stated() -> None:
    value = {"blob": "a" * 50_000_000}
    started = time.perf_counter()
    text = brief(value)
    elapsed = time.perf_counter() - started
    assert elapsed < 0.050
    assert text.startswith("blob='aaaa")
    assert "(50,000,000 chars)" in text
    assert len(text) <= 120


def test_50_mb_of_bytes_is_briefed_in_under_50_ms() -> None:
    value = bytearray(50_000_000)
    started = time.perf_counter()
    text = brief(value)
    assert time.perf_counter() - started < 0.050
    assert text.startswith("b'\\x00")
    assert "(50,000,000 bytes)" in text


def test_a_lone_surrogate_comes_out_as_an_escape_that_encodes_as_utf8() -> None:
    text = brief({"name": "a\ud800b"})
    assert text == "name='a\\ud800b'"
    text.encode("utf-8")


def test_a_container_that_holds_itself_is_briefed() -> None:
    loop: list[Any] = [1]
    loop.append(loop)
    mapping: dict[str, Any] = {}
    mapping["me"] = mapping
    assert brief(loop) == "[1, [...]]"
    assert brief({"m": mapping}) == "m={'me': {...}}"


def test_a_huge_integer_is_named_by_its_size_without_converting_it() -> None:
    assert brief(10**100_000) == "<int of about 100,001 digits>"


class Hostile:
    """An object whose every protocol method raises."""

    def __repr__(self) -> NoReturn:
        raise RuntimeError("repr")

    def __len__(self) -> NoReturn:
        raise RuntimeError("len")

    def __iter__(self) -> NoReturn:
        raise RuntimeError("iter")


class HostileList(list[int]):
    """A list whose overrides raise; the brief reads it as the list it is."""

    def __repr__(self) -> NoReturn:
        raise RuntimeError("repr")

    def __len__(self) -> NoReturn:
        raise RuntimeError("len")

    def __iter__(self) -> NoReturn:
        raise RuntimeError("iter")


class HostileStr(str):
    """A str whose overrides raise."""

    __slots__ = ()

    def __repr__(self) -> NoReturn:
        raise RuntimeError("repr")

    def __getitem__(self, item: object) -> NoReturn:
        raise RuntimeError("getitem")

    def __len__(self) -> NoReturn:
        raise RuntimeError("len")


class SlowRepr:
    """An object whose repr would never return in time; the brief must not call it."""

    calls = 0

    def __repr__(self) -> str:
        SlowRepr.calls += 1
        time.sleep(10)
        return "slow"


def test_objects_whose_repr_len_and_iter_raise_are_named_by_their_type() -> None:
    assert brief({"a": Hostile()}) == "a=<Hostile>"
    assert brief(HostileList([1, 2])) == "[1, 2]"
    assert brief(HostileStr("text")) == "'text'"


def test_a_slow_repr_is_never_called() -> None:
    started = time.perf_counter()
    assert brief({"x": SlowRepr()}) == "x=<SlowRepr>"
    assert SlowRepr.calls == 0
    assert time.perf_counter() - started < 1.0


def test_a_dict_with_keys_that_are_not_strings_reads_as_a_dict() -> None:
    assert brief({1: "a", (2, 3): [4]}) == "{1: 'a', (2, 3): [4]}"


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True)
    | st.text(max_size=40)
    | st.binary(max_size=20),
    lambda children: (
        st.lists(children, max_size=8)
        | st.tuples(children, children)
        | st.dictionaries(st.text(max_size=10), children, max_size=8)
        | st.frozensets(st.integers(), max_size=4)
    ),
    max_leaves=25,
)


@settings(max_examples=200, deadline=None)
@given(json_values, st.integers(min_value=0, max_value=300))
def test_any_value_gives_a_bounded_utf8_brief_and_never_raises(value: object, limit: int) -> None:
    text = brief(value, limit)
    assert isinstance(text, str)
    assert len(text) <= max(limit, 8)
    assert "\n" not in text
    text.encode("utf-8")


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text(max_size=12), json_values, max_size=5))
def test_any_arguments_give_a_one_line_brief(arguments: dict[str, Any]) -> None:
    text = brief(arguments)
    assert len(text) <= 120
    assert "\n" not in text and "\r" not in text
    text.encode("utf-8")
