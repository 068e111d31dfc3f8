"""Client requests, parsed just enough to route them, whichever door they came in by.

The body is kept as received and forwarded upstream unchanged; only the fields routing and the
relay need are read and type-checked here. Anything else is the backend's business (it has the
model and validates sampling parameters itself).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from gateway.doors.bodies import door_body
from gateway.errors import ApiError, api_not_served, bad_request, model_not_found
from gateway.model_names import ModelNames, body_for_backend
from gateway.strict_json import loads_request
from routing.errors import RoutingError
from routing.prefix import DEFAULT_BLOCK_TOKENS
from routing.profile import profile_from_chat, profile_from_completion
from routing.types import RequestProfile

_SANE_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
_SANE_TENANT = re.compile(r"^[A-Za-z0-9._\-]{1,64}$")
# Engines hold token ids and token counts in signed 32-bit integers.
MAX_INT32 = 2**31 - 1


class Endpoint(StrEnum):
    CHAT = "chat"
    COMPLETIONS = "completions"
    EMBEDDINGS = "embeddings"  # gateway/doors/embeddings.py
    RESPONSES = "responses"  # gateway/doors/responses.py
    MESSAGES = "messages"  # Anthropic Messages: gateway/doors/messages.py

    @property
    def path(self) -> str:
        return _PATHS[self]


_PATHS = {
    Endpoint.CHAT: "/v1/chat/completions",
    Endpoint.COMPLETIONS: "/v1/completions",
    Endpoint.EMBEDDINGS: "/v1/embeddings",
    Endpoint.RESPONSES: "/v1/responses",
    Endpoint.MESSAGES: "/v1/messages",
}


@dataclass(frozen=True, slots=True)
class InboundRequest:
    endpoint: Endpoint
    body: bytes
    model: str  # the public model name (an alias resolved): what routing, logs, metrics see
    stream: bool
    include_usage: bool
    max_tokens: int | None
    request_id: str
    tenant: str
    profile: RequestProfile
    received_at: float  # time.perf_counter() when the request arrived
    client_model: str = ""  # the name as the client sent it, when an alias (else == model)
    chat_body: bytes | None = None  # the request as chat completions, for backends that need it
    choices: int = 1  # ``n``: answers sampled from the one prompt (gateway/timing.py's ITL)

    def body_for(self, names: ModelNames, backend: str) -> bytes:
        """The body as ``backend`` must receive it: ``model`` set to its own id."""
        sent = self.client_model or self.model
        return body_for_backend(self.body, sent, names.upstream_id(backend, self.model))


def request_id_from(candidate: str | None) -> str:
    if candidate and _SANE_ID.match(candidate):
        return candidate
    return uuid.uuid4().hex


def tenant_from(candidate: str | None) -> str:
    if candidate and _SANE_TENANT.match(candidate):
        return candidate
    return "default"


def _optional_int(payload: dict[str, Any], key: str) -> int | None:
    value = payload.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_INT32:
        raise bad_request(f"'{key}' must be a positive integer below 2^31", param=key)
    return value


def _check_messages(messages: Any) -> None:
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' must be a non-empty array", param="messages")
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise bad_request(
                f"'messages[{index}]' must be an object with a string 'role'",
                param=f"messages[{index}]",
            )


def _is_token_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_INT32


def _check_prompt(prompt: Any) -> None:
    ok = isinstance(prompt, str) or (
        isinstance(prompt, list)
        and bool(prompt)
        and (all(isinstance(p, str) for p in prompt) or all(_is_token_id(p) for p in prompt))
    )
    if not ok:
        raise bad_request(
            "'prompt' must be a string, an array of strings or an array of token ids "
            "(integers from 0 to 2^31-1)",
            param="prompt",
        )


def parse_inbound(
    endpoint: Endpoint,
    body: bytes,
    *,
    request_id: str,
    tenant: str,
    origin: str | None,
    known_models: ModelNames | frozenset[str],
    received_at: float,
    block_tokens: int = DEFAULT_BLOCK_TOKENS,
) -> InboundRequest:
    """Validate what routing needs; raise :class:`ApiError` (4xx) for anything else."""
    payload = loads_request(body)  # strict: duplicate keys and huge integers are refused
    if not isinstance(payload, dict):
        raise bad_request("request body must be a JSON object")
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        raise bad_request("'model' is required and must be a non-empty string", param="model")
    stream = payload.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise bad_request("'stream' must be a boolean", param="stream")
    stream_options = payload.get("stream_options")
    if stream_options is not None and not isinstance(stream_options, dict):
        raise bad_request("'stream_options' must be an object", param="stream_options")
    include_usage = bool(stream_options and stream_options.get("include_usage"))
    max_tokens = _optional_int(payload, "max_completion_tokens") or _optional_int(
        payload, "max_tokens"
    )

    # ``_value_``, the member's plain string: ``.value`` is two Python calls (enum's property).
    api = endpoint._value_
    door = door_body(api)  # another door's body, seen as chat or completions
    chat_form = False  # whether that form is what chat-only backends are sent (Messages)
    if door is not None:
        payload, chat_form = door(payload)
        max_tokens = _optional_int(payload, "max_tokens")
    choices = _optional_int(payload, "n") or 1  # (another door's body, as chat, has no ``n``)
    if "messages" in payload or endpoint is Endpoint.CHAT:
        _check_messages(payload.get("messages"))
    else:
        _check_prompt(payload.get("prompt"))
    if model not in known_models:
        raise model_not_found(model)
    client_model = model
    if isinstance(known_models, ModelNames):
        model = known_models.public[model]
        if not known_models.offers(model, api):
            raise api_not_served(model, endpoint.path)
        payload["model"] = model  # the profile (prefix hashes, routing key) uses the public name
    chat_body = orjson.dumps(payload) if chat_form else None
    make_profile = profile_from_chat if "messages" in payload else profile_from_completion
    try:
        profile = make_profile(payload, tenant, origin, block_tokens, api=api)
    except RoutingError as exc:
        raise bad_request(exc.message) from None
    if isinstance(known_models, ModelNames):
        profile = known_models.tokenized(profile, payload)

    return InboundRequest(
        endpoint=endpoint,
        body=body,
        model=model,
        stream=stream,
        include_usage=include_usage,
        max_tokens=max_tokens,
        request_id=request_id,
        tenant=tenant,
        profile=profile,
        received_at=received_at,
        client_model=client_model if client_model != model else "",
        chat_body=chat_body,
        choices=choices,
    )


__all__ = ["ApiError", "Endpoint", "InboundRequest", "parse_inbound"]
