"""``GET /v1/models/{model}`` (the SDKs' ``models.retrieve``): one public name, or a 404 in
OpenAI's shape. The list (``GET /v1/models``) is in gateway/http_api.py; both show public names
and aliases, never a backend's own model id."""

from __future__ import annotations

import orjson
from aiohttp import web

from gateway.errors import model_not_found
from gateway.state_keys import RELAY


def model_object(name: str) -> dict[str, object]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "meridian"}


async def retrieve_model(request: web.Request) -> web.Response:
    name = request.match_info["model"]
    if name not in request.app[RELAY].known_models:
        return model_not_found(name).to_response()
    return web.Response(body=orjson.dumps(model_object(name)), content_type="application/json")


def add_routes(app: web.Application) -> None:
    # Model ids may contain slashes (``meta-llama/Llama-3.1-8B``): match the rest of the path.
    app.router.add_get("/v1/models/{model:.+}", retrieve_model)
