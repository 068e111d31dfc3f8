"""The Server-Timing splitter's quote-free shortcut gives what the character walk gives."""

from hypothesis import given
from hypothesis import strategies as st

from gateway.timing import _split_outside_quotes, _split_walking, parse

HEADER_TEXT = st.text(alphabet=st.sampled_from(list(' ,;="\\a.1')), max_size=40)


@given(HEADER_TEXT, st.sampled_from([",", ";"]))
def test_the_shortcut_splits_as_the_walk_does(text: str, sep: str) -> None:
    assert _split_outside_quotes(text, sep) == _split_walking(text, sep)


def test_a_separator_inside_quotes_does_not_split() -> None:
    entries = parse('engine_queue;dur=1.5, note;desc="a, b; c", emit_lag;dur=0.2')
    assert [(e.name, e.dur_ms, e.desc) for e in entries] == [
        ("engine_queue", 1.5, None),
        ("note", None, "a, b; c"),
        ("emit_lag", 0.2, None),
    ]


def test_an_engine_comment_without_quotes() -> None:
    entries = parse("engine_overhead;dur=0.512, engine_prefill;dur=19.877,emit_lag;dur=0.3")
    assert [(e.name, e.dur_ms) for e in entries] == [
        ("engine_overhead", 0.512),
        ("engine_prefill", 19.877),
        ("emit_lag", 0.3),
    ]
