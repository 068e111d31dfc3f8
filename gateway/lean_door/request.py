"""A request the lean door read, as the door's runner sees it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from gateway.auth.keys import Principal
from gateway.doors.door_http import DoorHttp
from gateway.lean_door.head import Head
from gateway.lean_door.sse import LeanSse
from gateway.sse_writer import SseSink

if TYPE_CHECKING:
    from gateway.lean_door.connection import LeanConnection


class LeanRequest(DoorHttp):
    def __init__(
        self,
        connection: LeanConnection,
        head: Head,
        received_at: float,
        principal: Principal,
    ) -> None:
        door = connection.door
        self.relay = door.relay
        self.quotas = door.quotas()
        self.received_at = received_at
        self.remote = connection.peer_host
        self._connection = connection
        self._head = head
        self._principal = principal
        self.sink: LeanSse | None = None

    def header(self, name: str) -> str | None:
        return self._head.headers.get(name)

    def headers(self) -> Mapping[str, str]:
        return self._head.headers

    def header_all(self, name: str) -> Sequence[str] | None:
        return self._head.headers.getall(name, None)

    def principal(self) -> Principal:
        return self._principal

    async def read_body(self) -> bytes:
        return await self._connection.read_body(self._head.content_length)

    def sse(self) -> SseSink:
        self.sink = LeanSse(self._connection, self.relay.config.streams)
        return self.sink
