"""The servicer context of one call on the h2 engine: the part of ``grpc.aio.ServicerContext``
the gateway's servicers (Inference, health, reflection) use, with grpc.aio's meaning.

So the servicers run unchanged on either engine. ``abort`` raises ``grpc.aio.AbortError``
exactly as grpc.aio does (the Inference servicer re-raises it past its own error handling);
trailing metadata set before an abort without trailers of its own ends the call, as there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, NoReturn

import grpc

from gateway.grpc_h2.wire import Header, Metadata, metadata_headers

if TYPE_CHECKING:
    from gateway.grpc_h2.call import Call


class H2ServicerContext:
    __slots__ = ("_call", "_serialize", "code_value", "details_value", "trailing")

    def __init__(self, call: Call, serialize: Callable[[Any], bytes] | None) -> None:
        self._call = call
        self._serialize = serialize
        self.code_value: grpc.StatusCode | None = None
        self.details_value = ""
        self.trailing: list[Header] = []  # the trailing metadata as header fields

    def detach(self) -> None:
        """The call's servicer returned: the call it holds (which holds this context) is let
        go, so the two are freed by reference counting, not left as a cycle for the
        collector. Nothing reads the context after that."""
        del self._call

    @property
    def arrived_at(self) -> float:
        """perf_counter() when the call's HEADERS were read (grpc.aio has no such time)."""
        return self._call.arrived_at

    def invocation_metadata(self) -> Metadata:
        return self._call.metadata

    def peer(self) -> str:
        return self._call.peer

    def time_remaining(self) -> float | None:
        return self._call.time_remaining()

    async def send_initial_metadata(self, metadata: Iterable[tuple[str, str | bytes]]) -> None:
        """Held until the call's first message (sent in the same write) or the end of this
        loop iteration, whichever comes first."""
        self._call.hold_initial_metadata(metadata_headers(metadata))

    async def write(self, message: Any) -> None:
        raw = message if self._serialize is None else self._serialize(message)
        await self._call.write(raw)

    def set_trailing_metadata(self, metadata: Iterable[tuple[str, str | bytes]]) -> None:
        self.trailing = metadata_headers(metadata)  # ValueError now, not at the end

    async def abort(
        self,
        code: grpc.StatusCode,
        details: str = "",
        trailing_metadata: Iterable[tuple[str, str | bytes]] = (),
    ) -> NoReturn:
        if code is grpc.StatusCode.OK:
            raise ValueError("abort() needs a status other than OK")  # as grpc.aio refuses it
        trailers = metadata_headers(trailing_metadata)
        if trailers:
            self.trailing = trailers
        self.code_value, self.details_value = code, details
        raise grpc.aio.AbortError()

    def set_code(self, code: grpc.StatusCode) -> None:
        self.code_value = code

    def set_details(self, details: str) -> None:
        self.details_value = details

    def code(self) -> grpc.StatusCode | None:
        return self.code_value

    def details(self) -> str:
        return self.details_value

    def cancelled(self) -> bool:
        return self._call.cancelled

    def done(self) -> bool:
        return self._call.ended
