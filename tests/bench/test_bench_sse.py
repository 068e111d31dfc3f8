"""SSE parsing edge cases: chunk boundaries anywhere, comments, CRLF and lone CR line ends."""

import itertools

from hypothesis import given
from hypothesis import strategies as st

from loadtests.bench.sse import SseComment, SseEvent, SseItem, SseParser

STREAM = (
    b": keep-alive\n\n"
    b'data: {"a": 1}\n\n'
    b"event: note\ndata: line one\ndata: line two\n\n"
    b"data:no-space\n\n"
    b"data: [DONE]\n\n"
    b': {"itl_ms": [20, 21]}\n'
)
EXPECTED = [
    SseComment("keep-alive"),
    SseEvent('{"a": 1}'),
    SseEvent("line one\nline two", "note"),
    SseEvent("no-space"),
    SseEvent("[DONE]"),
    SseComment('{"itl_ms": [20, 21]}'),
]


def _feed_all(chunks: list[bytes]) -> list[SseItem]:
    parser = SseParser()
    items: list[SseItem] = []
    for chunk in chunks:
        items += parser.feed(chunk)
    return items + parser.close()


def test_whole_stream_in_one_chunk():
    assert _feed_all([STREAM]) == EXPECTED


def test_one_event_per_read_as_servers_write_them():
    reads = [part + b"\n\n" for part in (STREAM + b"\n").split(b"\n\n") if part]
    assert _feed_all(reads) == EXPECTED
    assert _feed_all([STREAM + b"\n"]) == EXPECTED  # one read holding every event
    assert _feed_all([b"data: a\n\n\n\n", b"data: b\n\n"]) == [SseEvent("a"), SseEvent("b")]


def test_byte_by_byte():
    assert _feed_all([STREAM[i : i + 1] for i in range(len(STREAM))]) == EXPECTED


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_any_split_gives_the_same_items(cuts):
    bounds = [0, *sorted(cuts), len(STREAM)]
    chunks = [STREAM[a:b] for a, b in itertools.pairwise(bounds)]
    assert _feed_all(chunks) == EXPECTED


@given(st.lists(st.integers(min_value=0, max_value=200), max_size=12))
def test_crlf_and_lone_cr_line_ends_split_anywhere(cuts):
    crlf = STREAM.replace(b"\n", b"\r\n")
    lone_cr = STREAM.replace(b"\n", b"\r")
    for stream in (crlf, lone_cr):
        bounds = [0, *sorted(c % (len(stream) + 1) for c in cuts), len(stream)]
        chunks = [stream[a:b] for a, b in itertools.pairwise(bounds)]
        assert _feed_all(chunks) == EXPECTED


def test_crlf_split_between_cr_and_lf_dispatches_at_the_cr():
    parser = SseParser()
    assert parser.feed(b"data: x\r\n\r") == [SseEvent("x")]  # the event is out before the LF
    assert parser.feed(b"\ndata: y\r\n\r\n") == [SseEvent("y")]  # and the LF is not a blank line


def test_comment_is_returned_as_soon_as_its_line_ends():
    parser = SseParser()
    assert parser.feed(b': {"ttft_ms"') == []
    assert parser.feed(b": 12}\n") == [SseComment('{"ttft_ms": 12}')]


def test_unterminated_event_is_flushed_on_close_and_utf8_split_survives():
    parser = SseParser()
    text = "data: héllo".encode()
    assert parser.feed(text[:8]) == []  # cuts the two-byte "é" in half
    assert parser.feed(text[8:]) == []
    assert parser.close() == [SseEvent("héllo")]
    assert parser.close() == []


def test_unknown_fields_and_empty_chunks_are_ignored():
    assert _feed_all([b"id: 7\nretry: 10\n", b"", b"data: z\n\n"]) == [SseEvent("z")]
