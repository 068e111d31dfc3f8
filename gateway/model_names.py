"""Public model names and what each backend calls them.

Clients send a *public* name (``llama-3.1-8b``); a backend may know the model by another id
(llama-server by its ``.gguf`` path, vLLM by its ``--served-model-name``): ``model_ids`` in a
backend's config says so, and ``model_aliases`` lets one public model answer to several names.
Routing, metrics, logs and ``explain`` only ever see the public name; the request body is
rewritten for the chosen backend only where its id differs from what the client sent, and the
rewrite replaces the one JSON string in place (the rest of the body stays byte for byte).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from gateway.tokenizer import Tokenizer, load_tokenizers, prompt_ids, retokenize
from routing.types import RequestProfile

if TYPE_CHECKING:
    from gateway.config import GatewayConfig


@dataclass(frozen=True, slots=True)
class ModelNames:
    """Every name a client may send, and each backend's id for each public name.

    A collection of the accepted names (``name in names``), so it stands where a set of model
    names did."""

    public: Mapping[str, str] = field(default_factory=dict)  # accepted name -> public name
    ids: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # backend -> public -> id
    apis: Mapping[str, frozenset[str]] = field(default_factory=dict)  # public -> APIs offered
    tokenizers: Mapping[str, Tokenizer] = field(default_factory=dict)  # public -> its tokenizer

    @classmethod
    def from_config(cls, config: GatewayConfig) -> ModelNames:
        public = {m: m for b in config.backends for m in b.models}
        public.update(config.model_aliases)
        ids = {b.name: dict(b.model_ids) for b in config.backends if b.model_ids}
        apis: dict[str, set[str]] = {}
        for backend in config.backends:
            offered = backend.offered_apis()
            for model in backend.models:
                apis.setdefault(model, set()).update(offered)
        return cls(
            public=public,
            ids=ids,
            apis={m: frozenset(a) for m, a in apis.items()},
            tokenizers=load_tokenizers(config.tokenizers),
        )

    def __contains__(self, name: object) -> bool:
        return name in self.public

    def __iter__(self) -> Iterator[str]:
        return iter(self.public)

    def __len__(self) -> int:
        return len(self.public)

    def resolve(self, name: str) -> str | None:
        """The public model a client's name means, or None when nothing serves it."""
        return self.public.get(name)

    def offers(self, public: str, api: str) -> bool:
        """Whether some backend serving ``public`` offers ``api`` (chat, responses, ...)."""
        return api in self.apis.get(public, ()) if self.apis else True

    def tokenized(self, profile: RequestProfile, payload: Mapping[str, Any]) -> RequestProfile:
        """With the model's tokenizer configured: the real prompt length and token-aligned
        prefix blocks (gateway/tokenizer.py); otherwise the bytes/4 profile as it is."""
        tokenizer = self.tokenizers.get(profile.model)
        if tokenizer is None:
            return profile
        return retokenize(profile, prompt_ids(tokenizer, payload))

    def upstream_id(self, backend: str, public: str) -> str:
        return self.ids.get(backend, {}).get(public, public)

    def listed(self) -> list[str]:
        """What ``/v1/models`` lists: every accepted name."""
        return sorted(self.public)


def body_for_backend(body: bytes, sent: str, upstream_id: str) -> bytes:
    """The client's body with ``model`` set to the backend's id, untouched when they agree."""
    return body if upstream_id == sent else rewrite_model(body, upstream_id)


def rewrite_model(body: bytes, model: str) -> bytes:
    """Replace the value of the top-level ``"model"`` key(s) of a JSON object, leaving every
    other byte as it was (key order, spacing, number formatting, unicode escapes)."""
    spans = list(_top_level_model_values(body))
    if not spans:
        raise ValueError("the body has no top-level string 'model'")
    replacement = orjson.dumps(model)
    out = bytearray()
    last = 0
    for start, end in spans:
        out += body[last:start]
        out += replacement
        last = end
    out += body[last:]
    return bytes(out)


_WS = frozenset(b" \t\r\n")


def _string_end(body: bytes, start: int) -> int:
    """Index just past the JSON string opening at ``start`` (a quote)."""
    index = start + 1
    while True:
        quote = body.index(b'"', index)
        backslashes = 0
        back = quote - 1
        while body[back] == 0x5C:  # count the backslashes escaping this quote
            backslashes += 1
            back -= 1
        if backslashes % 2 == 0:
            return quote + 1
        index = quote + 1


def _top_level_model_values(body: bytes) -> Iterator[tuple[int, int]]:
    """Spans of the string values of the top-level object's ``model`` keys. The body has
    already been parsed as a JSON object, so the scan can trust its structure."""
    depth = 0
    index = 0
    expect_key = False
    size = len(body)
    while index < size:
        byte = body[index]
        if byte == 0x22:  # a string
            end = _string_end(body, index)
            if depth == 1 and expect_key:
                expect_key = False
                if orjson.loads(body[index:end]) == "model":
                    value = _skip_ws(body, _skip_ws(body, end) + 1)  # past the colon
                    if value < size and body[value] == 0x22:
                        value_end = _string_end(body, value)
                        yield value, value_end
                        index = value_end
                        continue
            index = end
            continue
        if byte in b"{[":
            depth += 1
            expect_key = byte == 0x7B and depth == 1
        elif byte in b"}]":
            depth -= 1
        elif byte == 0x2C and depth == 1:  # a comma between top-level members
            expect_key = True
        index += 1


def _skip_ws(body: bytes, index: int) -> int:
    while index < len(body) and body[index] in _WS:
        index += 1
    return index


def check_aliases(aliases: Mapping[str, str], served: set[str]) -> None:
    """Config validation: each alias names a served model and is not itself one."""
    shadowing = sorted(set(aliases) & served)
    if shadowing:
        raise ValueError(
            f"model_aliases: {', '.join(shadowing)} already a model a backend serves; "
            "an alias is another name for one"
        )
    dangling = sorted(f"{a} -> {m}" for a, m in aliases.items() if m not in served)
    if dangling:
        raise ValueError(
            f"model_aliases: {', '.join(dangling)}: no backend lists that model in 'models'"
        )
