"""What one backend is sent for a request, by door: the path, the body (its own model id,
and for Anthropic Messages to a chat-only backend, the chat-completions translation) and the
wire format its stream will be read with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.auth.cache_salt import salt_for
from gateway.doors.grammar import MESSAGES, OPENAI, RESPONSES, Grammar
from gateway.impossible import ImpossibleState
from gateway.model_names import body_for_backend

if TYPE_CHECKING:
    from gateway.inbound import InboundRequest
    from gateway.relay_state import RelayState

_DEFAULT_APIS = frozenset({"chat", "completions", "embeddings"})
_GRAMMARS = {"responses": RESPONSES, "messages": MESSAGES}


@dataclass(frozen=True, slots=True)
class UpstreamCall:
    path: str
    body: bytes
    grammar: Grammar

    @property
    def translated(self) -> bool:
        """A Messages request sent as chat completions: the door translates the answer."""
        return self.path == "/v1/chat/completions" and self.grammar is OPENAI


def _apis(state: RelayState, backend: str) -> frozenset[str]:
    return state.apis.get(backend, _DEFAULT_APIS)


def serves(inbound: InboundRequest, state: RelayState, backend: str) -> bool:
    """Whether ``backend`` can answer this door's request (routing ranks every backend that
    serves the model; the walk skips those without the API)."""
    apis = _apis(state, backend)
    api = inbound.endpoint._value_  # not ``.value``: enum's property is two Python calls
    return api in apis or (api == "messages" and "chat" in apis)


def upstream_call(inbound: InboundRequest, state: RelayState, backend: str) -> UpstreamCall:
    names = state.known_models
    api = inbound.endpoint._value_  # not ``.value``: enum's property is two Python calls
    if api == "messages" and "messages" not in _apis(state, backend):
        if inbound.chat_body is None:  # parse_inbound translates every Messages body
            raise ImpossibleState("a Messages request without its chat translation")
        upstream_id = names.upstream_id(backend, inbound.model)
        body = body_for_backend(inbound.chat_body, inbound.model, upstream_id)
        body = salt_for(state.config, backend, body, inbound.tenant)
        return UpstreamCall("/v1/chat/completions", body, OPENAI)
    grammar = _GRAMMARS.get(api, OPENAI)
    body = salt_for(state.config, backend, inbound.body_for(names, backend), inbound.tenant)
    return UpstreamCall(inbound.endpoint.path, body, grammar)
