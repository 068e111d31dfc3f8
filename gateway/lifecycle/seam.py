"""The door-neutral seam under a door that renders parsed events: what it needs from whatever
serves a request underneath it.

A door converts its wire request into the OpenAI body the HTTP door would receive and hands it
to an :class:`InferenceBackend`; it gets back a stream of events (:data:`BackendEvent`) and turns
them into its own chunks, metadata and status. The gRPC servicer is such a door. Two
implementations: the gateway's relay core (:class:`gateway.grpc.relay_backend.RelayBackend`:
routing, fallback, per-hop timing — the parsed view of a :class:`gateway.lifecycle.call.CoreCall`,
the seam object whose raw view every HTTP door writes)
and :class:`gateway.grpc.direct_backend.DirectHttpBackend`, which calls one OpenAI-compatible
server directly (the baseline for the overhead benchmark). It lived in ``gateway/grpc/backend.py``,
which re-exports it.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

Metadata = tuple[tuple[str, str], ...]


class RpcKind(StrEnum):
    """Which OpenAI endpoint the body is for (same values as ``gateway.inbound.Endpoint``)."""

    CHAT = "chat"
    COMPLETIONS = "completions"
    EMBEDDINGS = "embeddings"  # unary: the answer is one StreamChunk (the whole body)
    MESSAGES = "messages"  # Anthropic Messages: one StreamChunk per Messages event

    @property
    def path(self) -> str:
        return f"/v1/{_PATHS.get(self, self.value)}"


_PATHS = {RpcKind.CHAT: "chat/completions"}


@dataclass(frozen=True, slots=True)
class BackendRequest:
    kind: RpcKind
    body: bytes  # the OpenAI JSON body, exactly as the HTTP door would receive it
    request_id: str
    tenant: str | None = None
    key_id: str | None = None  # the API key the call came with (gateway/auth): its objective class
    timeout_s: float | None = None  # what is left of the client's gRPC deadline, if it set one
    # Client metadata worth forwarding (traceparent, ...), already filtered by the servicer.
    forward_metadata: Metadata = ()
    peer: str | None = None  # the client's IP address as the transport saw it
    forwarded_for: tuple[str, ...] = ()  # x-forwarded-for values (trusted only per config)
    # time.perf_counter() when the call arrived: the start of the gateway's own timings.
    received_at: float = field(default_factory=time.perf_counter)


@dataclass(frozen=True, slots=True)
class StreamOpened:
    """The first token is ready: send these as initial metadata (route, server-timing)."""

    metadata: Metadata = ()


@dataclass(frozen=True, slots=True)
class StreamChunk:
    """One OpenAI stream chunk (the parsed ``data:`` JSON of an SSE event); for Embeddings
    the whole answer, for Messages one event's data object."""

    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class StreamEnded:
    """Clean end of stream; ``metadata`` (end-of-stream timings) goes in the trailers."""

    metadata: Metadata = ()


@dataclass(frozen=True, slots=True)
class StreamFailed:
    """The request failed, before or after the first token. Satisfies ``status_map.HttpError``."""

    status: int
    message: str
    code: str | None = None
    retry_after_s: float | None = None
    metadata: Metadata = field(default=())  # extra trailers (timings so far)


BackendEvent = StreamOpened | StreamChunk | StreamEnded | StreamFailed


@dataclass(frozen=True, slots=True)
class ModelEntry:
    id: str
    created: int = 0
    owned_by: str = "meridian"


class InferenceBackend(Protocol):
    def stream(self, request: BackendRequest) -> AsyncGenerator[BackendEvent, None]:
        """Events in order: at most one StreamOpened before the first chunk, chunks, then exactly
        one StreamEnded or StreamFailed. Closing the iterator early (client cancelled) must
        cancel the upstream request."""
        ...

    async def list_models(self) -> Sequence[ModelEntry]: ...
