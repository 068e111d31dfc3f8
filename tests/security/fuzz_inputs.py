"""What the door fuzz sends: raw HTTP requests, request bodies, gRPC messages — and the checks
every answer must pass. Shared by the bounded run in the suite and ``loadtests/fuzz_doors.py``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
from hypothesis import strategies as st

from tests.gateway.support import MODEL

CORPUS = Path(__file__).parent / "fuzz" / "corpus.json"
HTTP_OK_STATUSES = {200, 400, 404, 405, 408, 413, 422, 431}
GRPC_OK_CODES = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
}

_json_leaf = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
json_values = st.recursive(
    _json_leaf,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
_small_or_bad_int = st.integers(1, 4) | st.integers(max_value=0) | st.integers(min_value=2**31)
_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "system", "assistant"]) | json_values},
    optional={"content": st.text(max_size=40) | json_values},
)
chat_bodies = st.fixed_dictionaries(
    {"model": st.just(MODEL) | json_values},
    optional={
        "messages": st.lists(_message, max_size=3) | json_values,
        "max_tokens": _small_or_bad_int | json_values,
        "stream": st.booleans() | json_values,
        "stream_options": json_values,
        "n": json_values,
    },
)
completion_bodies = st.fixed_dictionaries(
    {"model": st.just(MODEL), "max_tokens": st.integers(1, 4)},
    optional={"prompt": st.lists(st.integers(), max_size=4) | st.text(max_size=30) | json_values},
)


def _with_duplicate(body: dict[str, Any]) -> str:
    text = json.dumps(body)
    return text[:-1] + (', "model": "other"}' if len(text) > 2 else '"model": "x"}')


bodies = (
    chat_bodies.map(json.dumps)
    | completion_bodies.map(json.dumps)
    | chat_bodies.map(_with_duplicate)
    | json_values.map(json.dumps)
    | st.text(max_size=60)
).map(str.encode) | st.binary(max_size=80)

_header_names = st.sampled_from(
    ["Host", "Content-Length", "Transfer-Encoding", "Expect", "Authorization", "X-Meridian-Tenant",
     "Content-Type", "Connection", "X-Request-Id"]
) | st.text(max_size=12)  # fmt: skip
_header_values = st.text(max_size=40) | st.sampled_from(["100-continue", "chunked", "-1", "9" * 30])
raw_requests = st.builds(
    lambda method, path, headers, body: (
        f"{method} {path} HTTP/1.1\r\n"
        + "".join(f"{name}: {value}\r\n" for name, value in headers)
        + "\r\n"
    ).encode("utf-8", "surrogateescape")
    + body,
    st.sampled_from(["POST", "GET", "PUT", "DELETE", "PRI", "G\x00T"]) | st.text(max_size=6),
    st.sampled_from(["/v1/chat/completions", "/v1/completions", "/healthz", "/metrics", "/v1/meridian/state", "*"]) | st.text(max_size=20),
    st.lists(st.tuples(_header_names, _header_values), max_size=6),
    bodies,
) | st.binary(max_size=200)  # fmt: skip


def check_http_answer(answer: bytes) -> None:
    """An answer (or a closed socket) that is HTTP, never a 5xx, never a traceback."""
    assert b"Traceback" not in answer
    if not answer:
        return  # closed without an answer: a refused or unparseable connection
    assert answer.startswith(b"HTTP/1."), answer[:80]
    status = int(answer.split(b" ", 2)[1])
    assert status in HTTP_OK_STATUSES, answer[:300]


def load_corpus() -> list[dict[str, str]]:
    entries: list[dict[str, str]] = json.loads(CORPUS.read_text())
    return entries
