"""The brief's fast path for small, flat arguments gives exactly the full walk's text."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from toolscript.kernel.brief import _Briefer, _quick, brief

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=50),
)
flat_arguments = st.dictionaries(st.text(max_size=12), scalars, max_size=8)


@given(st.one_of(scalars, flat_arguments))
def test_the_fast_path_writes_what_the_full_walk_writes(value: object) -> None:
    quick = _quick(value, 120)
    if quick is not None:
        assert quick == _Briefer(120).run(value)
        assert brief(value) == quick


def test_the_fast_path_takes_the_common_call() -> None:
    assert _quick({"channel_id": "C1", "text": "hi", "count": 3}, 120) == (
        "channel_id='C1', text='hi', count=3"
    )


def test_the_fast_path_leaves_long_nested_and_odd_values_to_the_walk() -> None:
    assert _quick({"text": "x" * 500}, 120) is None
    assert _quick({"items": [1, 2, 3]}, 120) is None
    assert _quick({"file-path": "a"}, 120) is None
    assert _quick(2**80, 120) is None
    assert _quick({str(i): i for i in range(20)}, 120) is None


def test_a_short_string_whose_repr_is_long_is_cut_alike_on_both_paths() -> None:
    # Found by the property above: 21 characters whose repr takes 113 (astral characters
    # are written `\U0001eebc`), more than the room the walk keeps, less than the limit.
    value = "000000000\x1f\x1f\x1f" + "\U00018cd6" * 5 + "\U00018d09" * 3 + "\U0001eebc"
    for shown in (value, {"text": value}):
        quick = _quick(shown, 120)
        assert quick is None or quick == _Briefer(120).run(shown)
    assert brief(value) == _Briefer(120).run(value)
