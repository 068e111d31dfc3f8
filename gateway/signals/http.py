"""The few HTTP helpers the signal loops share: bounded reads and error classification."""

from __future__ import annotations

import aiohttp

from gateway.lag_timeout import LoopLagged
from gateway.signals.errors import SignalError, SignalErrorKind

READ_CHUNK_BYTES = 64 * 1024
# aiohttp's own timers off: the caller bounds the whole exchange with judged_timeout, which
# tells the gateway's lag from the backend's silence (gateway/lag_timeout.py).
NO_CLIENT_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=None, sock_read=None)


def classify(exc: BaseException) -> SignalError:
    """An HTTP client failure as a signal error value."""
    if isinstance(exc, LoopLagged):
        return SignalError(SignalErrorKind.LAGGED, f"no verdict: {exc}")
    if isinstance(exc, TimeoutError):
        return SignalError(SignalErrorKind.TIMEOUT, "no complete answer within the timeout")
    if isinstance(exc, aiohttp.ClientConnectorError | ConnectionError):
        return SignalError(SignalErrorKind.CONNECT, f"cannot connect: {exc}")
    if isinstance(exc, aiohttp.ClientResponseError):
        return SignalError(SignalErrorKind.HTTP_STATUS, f"HTTP {exc.status}: {exc.message}")
    return SignalError(SignalErrorKind.PROTOCOL, f"{type(exc).__name__}: {exc}")


async def read_bounded(response: aiohttp.ClientResponse, max_bytes: int) -> bytes | SignalError:
    """The body, read incrementally, or TOO_LARGE as soon as it passes ``max_bytes``.

    Stopping early (rather than reading and then checking) bounds memory and time; leaving the
    body unread makes aiohttp close that connection instead of returning it to the pool.
    """
    too_large = SignalError(
        SignalErrorKind.TOO_LARGE, f"body exceeds {max_bytes} bytes; raise max_bytes or fix it"
    )
    declared = response.content_length
    if declared is not None and declared > max_bytes:
        return too_large
    body = bytearray()
    async for chunk in response.content.iter_chunked(READ_CHUNK_BYTES):
        body += chunk
        if len(body) > max_bytes:
            return too_large
    return bytes(body)
