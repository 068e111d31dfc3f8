"""SseSplitter: whatever the reads' boundaries, the same events, each with its bytes as they came.

The one-whole-event-per-read fast path (an engine's usual read) must agree with the general
path: the streams here are cut at every event boundary (the fast path's case), at random
points (the general path's), and both.
"""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from gateway.sse import SseEvent, SseSplitter

_TEXT = st.text(st.characters(blacklist_characters="\r\n", codec="utf-8"), max_size=12)
_LINE = st.one_of(
    st.tuples(st.just("data:"), _TEXT),
    st.tuples(st.just("data: "), _TEXT),
    st.tuples(st.just(": "), _TEXT),  # a comment
    st.tuples(st.just("event: "), _TEXT),
)
_BLOCK = st.lists(_LINE, min_size=1, max_size=3).filter(
    lambda lines: any(prefix + text for prefix, text in lines)  # an empty block is no event
)


def _expected(lines: list[tuple[str, str]]) -> SseEvent:
    text_lines = [(prefix + text).encode() for prefix, text in lines]
    values = [line[5:] for line in text_lines if line.startswith(b"data:")]
    values = [value[1:] if value.startswith(b" ") else value for value in values]  # one space
    return SseEvent(
        raw=b"\n".join(text_lines) + b"\n\n", data=b"\n".join(values) if values else None
    )


@given(st.lists(_BLOCK, min_size=1, max_size=6), st.sets(st.integers(1, 400)), st.booleans())
def test_any_cut_of_a_stream_gives_its_events_with_their_bytes(
    blocks: list[list[tuple[str, str]]], cuts: set[int], at_boundaries: bool
) -> None:
    expected = [_expected(lines) for lines in blocks]
    stream = b"".join(event.raw for event in expected)
    points = {cut for cut in cuts if cut < len(stream)}
    if at_boundaries:
        ends = 0
        for event in expected:
            ends += len(event.raw)
            points.add(ends)
    bounds = [0, *sorted(points), len(stream)]
    splitter = SseSplitter()
    got: list[SseEvent] = []
    for start, end in itertools.pairwise(bounds):
        if end > start:
            got += splitter.feed(stream[start:end])
    got += splitter.flush()
    assert got == expected


def test_one_event_per_read_takes_the_bytes_as_they_came() -> None:
    splitter = SseSplitter()
    token = b'data: {"choices":[]}\n\n'
    [event] = splitter.feed(token)
    assert event.raw is token and event.data == b'{"choices":[]}'
    assert splitter.feed(b"\n\n") == [] and splitter.feed(b"data:x\n\n") == [
        SseEvent(raw=b"data:x\n\n", data=b"x")
    ]
    assert splitter.pending_bytes == 0
