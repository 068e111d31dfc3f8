"""``door:`` in the operator file: how long the HTTP door waits for clients, and how many it
holds at once."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from gateway.lag_timeout import GIVEN_BACK


class DoorConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    header_timeout_s: Annotated[float, Field(gt=0)] = Field(
        default=10.0,
        description="A new connection must send a whole request head within this long "
        "(slowloris); else 408 and the socket is closed.",
    )
    body_timeout_s: Annotated[float, Field(gt=0)] = Field(
        default=30.0,
        description=f"The request body must arrive within this long; else 408. {GIVEN_BACK}",
    )
    keepalive_timeout_s: Annotated[float, Field(gt=0)] = Field(
        default=15.0,
        description="An idle keep-alive connection is closed after this long (it also bounds a "
        "slow head on a reused connection).",
    )
    max_connections_per_client: Annotated[int, Field(ge=1)] = Field(
        default=256,
        description="Open connections one client address may hold (the gRPC listener's count "
        "too with listen.grpc_engine: h2).",
    )
    max_connections: Annotated[int, Field(ge=1)] | None = Field(
        default=None,
        description="Open client connections in total; None: half of what the file-descriptor "
        "limit leaves after 128 (each client connection may need an upstream one). The admin "
        "listener is not counted, so /healthz there answers when the caps are hit; the gRPC "
        "listener's connections are, with listen.grpc_engine: h2.",
    )
    lean: bool = Field(
        default=True,
        description="Serve the streaming endpoints' usual requests (a POST over HTTP/1.1 with a "
        "Content-Length body) on the gateway's own HTTP/1.1 connections instead of aiohttp's "
        "web server (gateway/lean_door): ~1 ms less added time to first token. Any other "
        "request, and every request on a TLS listener, is served by aiohttp as before.",
    )
