"""What a client may be told about an upstream failure: Meridian's own words, nothing borrowed.

Backends echo things in their error bodies that must never reach a client: their own API key
("Incorrect API key provided: sk-..."), internal host names and addresses, exception reprs. So:

- a failure the *client* caused (the backend's 400/413/422: context length, invalid parameter)
  passes the backend's message on, after :func:`scrub` has removed anything that looks like a
  credential or an address;
- every other failure is described by :func:`status_words` / :func:`connect_words` in
  Meridian's words (backend name, HTTP status, kind), and the backend's text is only logged,
  scrubbed, for the operator.

No imports from the rest of the gateway: the relay core, the gRPC door and the logs all use it.
"""

from __future__ import annotations

import re

REDACTED = "[redacted]"
_MAX_MESSAGE = 300

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # Authorization header values, whatever the scheme.
    (re.compile(r"(?i)\b(bearer|basic|token)\s+[^\s\"',;]+"), r"\1 " + REDACTED),
    # key=value / "key": "value" pairs whose name says secret.
    (
        re.compile(
            r"(?i)((?:api[_-]?key|apikey|access[_-]?token|secret|password|passwd|authorization|"
            r"x-api-key|token)[\"']?\s*[:=]\s*[\"']?)[^\s\"',;}]+"
        ),
        r"\1" + REDACTED,
    ),
    # OpenAI-, Anthropic-, Hugging Face-, GitHub-, AWS-style key shapes.
    (re.compile(r"\b(?:sk|pk|rk|hf|ghp|gho|xox[abp]|AKIA|mk)[-_][A-Za-z0-9_\-]{6,}"), REDACTED),
    (re.compile(r"\bAKIA[0-9A-Z]{12,}"), REDACTED),
    # URLs and socket addresses: internal topology is nobody's business.
    (re.compile(r"(?i)\b[a-z][a-z0-9+.\-]*://[^\s\"'<>]+"), "[address]"),
    (re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"), "[address]"),
    (re.compile(r"\[[0-9a-fA-F:]*:[0-9a-fA-F:]*\](?::\d+)?"), "[address]"),
    # Long opaque runs mixing letters and digits (JWTs, hex or base64 keys).
    (
        re.compile(
            r"(?=[A-Za-z0-9_\-+/.=]*\d)(?=[A-Za-z0-9_\-+/.=]*[A-Za-z])[A-Za-z0-9_\-+/.=]{24,}"
        ),
        REDACTED,
    ),
)


def scrub(text: str, secrets: tuple[str, ...] = ()) -> str:
    """``text`` without credentials, addresses, or any of ``secrets`` verbatim; shortened."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    text = "".join(ch if ch.isprintable() else " " for ch in text)
    if len(text) > _MAX_MESSAGE:
        text = text[:_MAX_MESSAGE] + "…"
    return text


def status_words(status: int) -> str:
    """An upstream non-2xx, described without the upstream's body."""
    return f"backend answered HTTP {status}"


_CONNECT_WORDS: tuple[tuple[type[BaseException], str], ...] = (
    (ConnectionRefusedError, "connection refused"),
    (ConnectionResetError, "connection reset"),
    (TimeoutError, "connection timed out"),
)


def connect_words(exc: BaseException) -> str:
    """A transport failure in a few fixed words: never its repr (it names hosts and ports)."""
    seen: BaseException | None = exc
    for _ in range(8):  # the cause chain, bounded (chains can loop)
        if seen is None:
            break
        for kind, words in _CONNECT_WORDS:
            if isinstance(seen, kind):
                return words
        name = type(seen).__name__
        if "Disconnected" in name:
            return "backend closed the connection"
        if "Payload" in name or "Response" in name:
            return "backend sent a malformed response"
        seen = seen.__cause__ or seen.__context__
    return "could not reach the backend"
