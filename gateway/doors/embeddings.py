"""``POST /v1/embeddings``: no first token to wait for, so routing predicts the queue and the
prefill of the input (a one-token completion of it) and the whole answer is relayed as it
came; retries before it, timing headers and outcome accounting are the core's."""

from __future__ import annotations

from aiohttp import web

from gateway.doors.sse_door import serve
from gateway.inbound import Endpoint


async def create_embeddings(request: web.Request) -> web.StreamResponse:
    return await serve(request, Endpoint.EMBEDDINGS)


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/embeddings", create_embeddings)
