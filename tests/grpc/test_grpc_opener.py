"""The chat stream's role-only opener folded into the chunk read with it (gateway/grpc/opener)."""

from __future__ import annotations

import copy
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import grpc
import pytest

from gateway.grpc.client import inference_stub
from gateway.grpc.opener import fold_opener, role_opener
from gateway.grpc.server import GrpcEngine, GrpcServerConfig, serving_grpc
from gateway.lifecycle.seam import (
    BackendEvent,
    BackendRequest,
    ModelEntry,
    StreamChunk,
    StreamEnded,
    StreamOpened,
)
from tests.grpc.grpc_support import chat

ENVELOPE = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 7, "model": "m"}


def _chunk(delta: Any, **choice: Any) -> dict[str, Any]:
    return {**ENVELOPE, "choices": [{"index": 0, "delta": delta, **choice}]}


OPENER = _chunk({"role": "assistant", "content": ""}, logprobs=None, finish_reason=None)


@pytest.mark.parametrize(
    "data",
    [
        OPENER,
        _chunk({"role": "assistant"}),
        _chunk({"role": "assistant", "content": None, "tool_calls": None}, stop_reason=None),
    ],
)
def test_role_only_openers_are_recognised(data: dict[str, Any]) -> None:
    assert role_opener(data) == "assistant"


@pytest.mark.parametrize(
    "data",
    [
        _chunk({"role": "assistant", "content": "Hi"}),  # carries text
        _chunk({"role": "assistant", "refusal": "no"}),
        _chunk({"role": "assistant", "tool_calls": [{"index": 0}]}),
        _chunk({"role": "assistant"}, finish_reason="stop"),
        _chunk({"role": "assistant"}, logprobs={"content": []}),
        {**_chunk({"role": "assistant"}), "usage": {"prompt_tokens": 1}},
        _chunk({"content": ""}),  # no role
        _chunk({"role": 5}),
        _chunk({"role": ""}),
        {**ENVELOPE, "choices": []},
        {**ENVELOPE, "choices": [OPENER["choices"][0], OPENER["choices"][0]]},
        {**ENVELOPE, "choices": "nope"},
        _chunk("nope"),
    ],
)
def test_anything_a_client_could_read_is_not_an_opener(data: dict[str, Any]) -> None:
    assert role_opener(data) is None


def test_the_role_moves_into_the_next_chunk_of_the_same_choice() -> None:
    follower = _chunk({"content": "Hello"}, logprobs=None, finish_reason=None)
    assert fold_opener(OPENER, "assistant", follower)
    assert follower["choices"][0]["delta"] == {"role": "assistant", "content": "Hello"}
    no_delta: dict[str, Any] = {**ENVELOPE, "choices": [{"index": 0, "finish_reason": "length"}]}
    assert fold_opener(OPENER, "assistant", no_delta)
    assert no_delta["choices"][0]["delta"] == {"role": "assistant"}


@pytest.mark.parametrize(
    "follower",
    [
        {**_chunk({"content": "x"}), "id": "other"},  # another response
        {**_chunk({"content": "x"}), "model": "other"},
        _chunk({"content": "x"}) | {"choices": [{"index": 1, "delta": {"content": "x"}}]},
        _chunk({"role": "tool", "content": "x"}),  # names a role of its own
        {**ENVELOPE, "choices": []},  # the usage-only chunk
        {"error": {"message": "boom"}},
        _chunk("nope"),
    ],
)
def test_a_follower_that_cannot_carry_the_role_is_left_alone(follower: dict[str, Any]) -> None:
    before = copy.deepcopy(follower)
    assert not fold_opener(OPENER, "assistant", follower)
    assert follower == before


class _ScriptedBackend:
    """A backend that streams the given chunks (an engine's opener and what follows it)."""

    def __init__(self, *chunks: dict[str, Any]) -> None:
        self.chunks = chunks

    async def stream(self, request: BackendRequest) -> AsyncGenerator[BackendEvent, None]:
        yield StreamOpened()
        for chunk in self.chunks:
            yield StreamChunk(copy.deepcopy(chunk))
        yield StreamEnded()

    async def list_models(self) -> Sequence[ModelEntry]:
        return []


async def _deltas(backend: _ScriptedBackend, engine: GrpcEngine) -> list[tuple[str, str]]:
    async with (
        serving_grpc(backend, GrpcServerConfig(engine=engine)) as server,
        grpc.aio.insecure_channel(server.target) as channel,
    ):
        chunks = [c async for c in inference_stub(channel).ChatCompletion(chat())]
    return [(c.choices[0].delta.role, c.choices[0].delta.content) for c in chunks]


async def test_the_servicer_sends_the_opener_with_the_first_token(grpc_engine: GrpcEngine) -> None:
    token = _chunk({"content": "Hello"}, finish_reason=None)
    assert await _deltas(_ScriptedBackend(OPENER, token), grpc_engine) == [("assistant", "Hello")]


async def test_an_opener_nothing_can_carry_is_sent_as_it_came(grpc_engine: GrpcEngine) -> None:
    other = {**_chunk({"content": "Hello"}), "id": "another-response"}
    assert await _deltas(_ScriptedBackend(OPENER, other), grpc_engine) == [
        ("assistant", ""),
        ("", "Hello"),
    ]
    assert await _deltas(_ScriptedBackend(OPENER), grpc_engine) == [
        ("assistant", "")
    ]  # then the end
