"""The ``meridian.v1.Inference`` servicer: gRPC in, the shared backend path underneath.

Each streaming RPC: validate and convert the message to the OpenAI body (INVALID_ARGUMENT on
failure), hand it to the injected :class:`InferenceBackend`, send initial metadata when the
first token is ready, convert every chunk, and end with trailers — OK with end-of-stream timings,
or the mapped status. A client that cancels or whose deadline passes cancels this handler; the
backend stream is closed with it, which cancels the upstream request.

The streaming handlers are coroutines that write each message themselves
(``context.write``, grpc.aio's reader/writer form) rather than async generators: grpc.aio
iterates a generator handler with its own loop around the same ``write``, so each generator
layer between the backend's events and that write is one more resumption per chunk. Here there
is one loop: backend event -> message -> ``write``.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc

from gateway.auth.keys import Principal
from gateway.errors import ApiError
from gateway.grpc.call_metadata import REQUEST_ID_KEY, CallMetadata, read_call_metadata
from gateway.grpc.chunk_convert import (
    MalformedChunk,
    chat_chunk_from_json,
    completion_chunk_from_json,
)
from gateway.grpc.door_convert import (
    embeddings_request_to_body,
    embeddings_response_from_json,
    messages_event_from_json,
    messages_request_to_body,
)
from gateway.grpc.opener import fold_opener, role_opener
from gateway.grpc.request_convert import (
    ConvertedRequest,
    InvalidRequest,
    chat_request_to_body,
    completion_request_to_body,
)
from gateway.grpc.status_map import failure_for_error
from gateway.grpc_h2.context import H2ServicerContext
from gateway.lifecycle.seam import (
    BackendEvent,
    BackendRequest,
    InferenceBackend,
    RpcKind,
    StreamChunk,
    StreamEnded,
    StreamFailed,
    StreamOpened,
)
from gateway.scrub import scrub
from gateway.stream import StreamBroken
from proto.meridian.v1 import inference_pb2 as pb
from proto.meridian.v1 import inference_pb2_grpc as pb_grpc

log = logging.getLogger("meridian.grpc")

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024

Chunk = TypeVar(
    "Chunk", pb.ChatCompletionChunk, pb.CompletionChunk, pb.EmbeddingsResponse, pb.MessagesEvent
)


# (authorization metadata, claimed tenant, model) -> who the call acts for (its tenant and API
# key), or raises ApiError.
Authenticate = Callable[[str | None, str | None, str], Principal]


@dataclass(frozen=True, slots=True)
class ServicerLimits:
    # The converted JSON body is held to the HTTP door's limit, so both doors accept the same.
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    # gateway/auth: keys and tenants, as at the HTTP door. None: the claimed tenant is believed.
    authenticate: Authenticate | None = None


def peer_address(peer: str | None) -> str | None:
    """The IP in a gRPC peer string: ``ipv4:1.2.3.4:5678``, ``ipv6:[::1]:5678``; else None."""
    if not peer:
        return None
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rpartition(":")[0] or None
    if kind == "ipv6":
        host = rest.rpartition(":")[0]
        return host.strip("[]") or None
    return None


Send = Callable[[Any], Awaitable[None]]  # one converted message to the client


class InferenceServicer(pb_grpc.InferenceServicer):
    def __init__(self, backend: InferenceBackend, limits: ServicerLimits | None = None) -> None:
        self.backend = backend
        self.limits = limits or ServicerLimits()

    async def ChatCompletion(
        self, request: pb.ChatCompletionRequest, context: grpc.aio.ServicerContext
    ) -> None:
        await self._serve(
            RpcKind.CHAT,
            request,
            chat_request_to_body,
            chat_chunk_from_json,
            context,
            context.write,
        )

    async def Completion(
        self, request: pb.CompletionRequest, context: grpc.aio.ServicerContext
    ) -> None:
        await self._serve(
            RpcKind.COMPLETIONS,
            request,
            completion_request_to_body,
            completion_chunk_from_json,
            context,
            context.write,
        )

    async def Embeddings(
        self, request: pb.EmbeddingsRequest, context: grpc.aio.ServicerContext
    ) -> pb.EmbeddingsResponse:
        answers: list[pb.EmbeddingsResponse] = []

        async def keep(answer: pb.EmbeddingsResponse) -> None:
            answers.append(answer)

        await self._serve(
            RpcKind.EMBEDDINGS,
            request,
            embeddings_request_to_body,
            embeddings_response_from_json,
            context,
            keep,
        )
        # Unary: the backend's one answer, after its stream ended (trailers set) or failed.
        if len(answers) != 1:
            await context.abort(grpc.StatusCode.INTERNAL, "backend sent no single answer")
        return answers[0]

    async def Messages(
        self, request: pb.MessagesRequest, context: grpc.aio.ServicerContext
    ) -> None:
        await self._serve(
            RpcKind.MESSAGES,
            request,
            messages_request_to_body,
            messages_event_from_json,
            context,
            context.write,
        )

    async def ListModels(
        self, request: pb.ListModelsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListModelsResponse:
        entries = await self.backend.list_models()
        return pb.ListModelsResponse(
            models=[pb.Model(id=e.id, created=e.created, owned_by=e.owned_by) for e in entries]
        )

    async def _backend_request(
        self,
        kind: RpcKind,
        converted: ConvertedRequest,
        context: grpc.aio.ServicerContext,
        metadata: CallMetadata,
        request_id: str,
        received_at: float,
    ) -> BackendRequest:
        body = converted.body_bytes()
        if len(body) > self.limits.max_body_bytes:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"request is {len(body)} bytes as JSON; the limit is {self.limits.max_body_bytes}",
            )
        tenant = converted.tenant or metadata.tenant
        key_id: str | None = None
        if self.limits.authenticate is not None:
            try:
                model = str(converted.body.get("model", ""))
                principal = self.limits.authenticate(metadata.authorization, tenant, model)
                tenant, key_id = principal.tenant, principal.key_id
            except ApiError as err:
                failure = failure_for_error(err)
                await context.abort(failure.code, failure.details, failure.trailing_metadata)
        return BackendRequest(
            kind=kind,
            body=body,
            request_id=request_id,
            tenant=tenant,
            key_id=key_id,
            timeout_s=context.time_remaining(),
            forward_metadata=metadata.forward,
            received_at=received_at,
            peer=peer_address(context.peer()),
            forwarded_for=metadata.forwarded_for,
        )

    async def _serve(
        self,
        kind: RpcKind,
        request: Any,
        to_body: Callable[[Any], ConvertedRequest],
        from_json: Callable[[dict[str, Any]], Chunk],
        context: grpc.aio.ServicerContext,
        send: Send,
    ) -> None:
        """One call: its body to the backend, each chunk converted and sent, then its ending.
        A bug below ends the call INTERNAL without leaking its text to the client (gRPC would
        otherwise send the exception's repr as UNKNOWN)."""
        # The h2 engine knows when the call's HEADERS came; grpcio starts the handler only.
        received_at = (
            context.arrived_at if isinstance(context, H2ServicerContext) else time.perf_counter()
        )
        try:
            metadata = read_call_metadata(context.invocation_metadata())
            request_id = metadata.request_id or uuid.uuid4().hex
            # Every ending names the request (an abort without trailers of its own sends these).
            context.set_trailing_metadata(((REQUEST_ID_KEY, request_id),))
            try:
                converted = to_body(request)
            except InvalidRequest as err:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
            backend_request = await self._backend_request(
                kind, converted, context, metadata, request_id, received_at
            )
            await self._relay(backend_request, from_json, context, send)
        except grpc.aio.AbortError:
            raise
        except Exception:
            log.exception("gRPC handler failed")
            await context.abort(grpc.StatusCode.INTERNAL, "internal gateway error")

    async def _relay(
        self,
        backend_request: BackendRequest,
        from_json: Callable[[dict[str, Any]], Chunk],
        context: grpc.aio.ServicerContext,
        send: Send,
    ) -> None:
        request_id = backend_request.request_id
        events = self.backend.stream(backend_request)
        opener_possible = backend_request.kind is RpcKind.CHAT  # until the first chunk
        held: dict[str, Any] | None = None  # a role-only opener (gateway/grpc/opener.py)
        role: str | None = None
        async with aclosing(events):  # closed whatever happens: cancels the upstream
            async for event in events:
                if type(event) is StreamChunk:  # nearly every event: checked first
                    data = event.data
                    if held is not None:
                        if not fold_opener(held, role or "", data):
                            await self._send(held, from_json, events, context, send, request_id)
                        held = None
                    elif opener_possible:
                        opener_possible = False
                        role = role_opener(data)
                        if role is not None:
                            held = data  # sent with (or before) the chunk that follows it
                            continue
                    await self._send(data, from_json, events, context, send, request_id)
                elif isinstance(event, StreamOpened):
                    await context.send_initial_metadata(event.metadata)
                elif isinstance(event, StreamEnded):
                    if held is not None:
                        await self._send(held, from_json, events, context, send, request_id)
                    context.set_trailing_metadata(event.metadata)
                    return
                elif isinstance(event, StreamFailed):
                    await _abort_with(context, event, request_id)
        # The backend ended without saying how: treat as broken, never as a silent OK.
        await context.abort(grpc.StatusCode.INTERNAL, "backend stream ended without a status")

    async def _send(
        self,
        data: dict[str, Any],
        from_json: Callable[[dict[str, Any]], Chunk],
        events: AsyncGenerator[BackendEvent, None],
        context: grpc.aio.ServicerContext,
        send: Send,
        request_id: str,
    ) -> None:
        try:
            message = from_json(data)
        except MalformedChunk as err:
            log.warning("request_id=%s %s %s", request_id, err, scrub(err.detail))
            # Handed back to the core, which classifies it as every malformed stream
            # (upstream_malformed: counted, against the backend), not as a client leaving
            # (what closing the generator here would say).
            failed = await events.athrow(StreamBroken("upstream_malformed", str(err)))
            if isinstance(failed, StreamFailed):
                await _abort_with(context, failed, request_id)
            await context.abort(grpc.StatusCode.INTERNAL, str(err))
        await send(message)


async def _abort_with(
    context: grpc.aio.ServicerContext, failed: StreamFailed, request_id: str
) -> None:
    failure = failure_for_error(failed)
    trailers: tuple[tuple[str, str | bytes], ...] = (*failed.metadata, *failure.trailing_metadata)
    if all(key != REQUEST_ID_KEY for key, _ in trailers):
        trailers = (*trailers, (REQUEST_ID_KEY, request_id))
    await context.abort(failure.code, failure.details, trailers)
