"""The chat stream's role-only opener, folded into the chunk that follows it.

OpenAI-compatible engines (vLLM, the emulator) open a chat stream with a chunk that carries only
``delta.role`` (``"assistant"``, with empty or no content), sent before the first token; the
relay holds it until that first token and hands both over together. Over HTTP both events go out
in one write. Over gRPC each chunk is one message, and grpc.aio starts a message only after the
previous one completed (a round trip through its completion-queue thread: 0.7 ms p50 and
4.5 ms p90 on this machine at c=16, load 6), so sending the opener on its own puts one more
round trip between the first token and the client. The servicer holds the opener until the next
chunk and folds it in: the first message says ``role: "assistant"`` and carries the first
token, which is how a client reads the two anyway (deltas concatenate; the opener has no text,
finish, logprobs or usage to lose).

Only a follower that is a one-choice chunk of the same response (id, model, created) and choice
index, naming no role of its own, takes the role; otherwise the opener is sent as it came, first.
"""

from __future__ import annotations

from typing import Any

_ENVELOPE = ("id", "model", "created")


def _only_choice(data: dict[str, Any]) -> dict[str, Any] | None:
    choices = data.get("choices")
    if type(choices) is not list or len(choices) != 1 or type(choices[0]) is not dict:
        return None
    return choices[0]


def role_opener(data: dict[str, Any]) -> str | None:
    """The role, when ``data`` is a role-only opener (nothing else a client could read)."""
    choice = _only_choice(data)
    if choice is None or data.get("usage") is not None:
        return None
    delta = choice.get("delta")
    if type(delta) is not dict or choice.get("finish_reason") is not None:
        return None
    if choice.get("logprobs") is not None:
        return None
    role = delta.get("role")
    if type(role) is not str or not role:
        return None
    for key, value in delta.items():
        if key == "content" and value not in (None, ""):
            return None
        if key not in ("role", "content") and value is not None:
            return None
    return role


def fold_opener(opener: dict[str, Any], role: str, follower: dict[str, Any]) -> bool:
    """Give ``follower`` the opener's role when it can carry it unchanged otherwise; returns
    whether it did (then the opener is not sent)."""
    choice, first = _only_choice(follower), _only_choice(opener)
    if choice is None or first is None or (choice.get("index") or 0) != (first.get("index") or 0):
        return False
    if any(opener.get(key) != follower.get(key) for key in _ENVELOPE):
        return False
    delta = choice.get("delta")
    if delta is None:
        delta = choice["delta"] = {}
    if type(delta) is not dict or delta.get("role") is not None:
        return False
    delta["role"] = role
    return True
