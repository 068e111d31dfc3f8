"""What ``meridian bench`` says before and after a run that cannot measure anything.

Before: the server's ``GET /v1/models`` must list the workload's model, else every request
would fail with a 404 and the run would report nothing but errors. A server without that
endpoint is not judged (some OpenAI-compatible servers lack it). After: a run in which no
request succeeded is a failure, said with its error counts, and draws no plots.
"""

from __future__ import annotations

from collections.abc import Mapping

import aiohttp


def models_url(base_url: str) -> str:
    base = base_url.rstrip("/")
    return (base if base.endswith("/v1") else base + "/v1") + "/models"


async def served_models(base_url: str, timeout_s: float = 10.0) -> list[str] | None:
    """The model ids the server lists; ``None`` when it has no usable ``/v1/models``.

    Raises ``aiohttp.ClientError`` (or ``TimeoutError``) when the server cannot be reached."""
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with (
        aiohttp.ClientSession(timeout=timeout) as http,
        http.get(models_url(base_url)) as response,
    ):
        if response.status != 200:
            return None
        try:
            body = await response.json(content_type=None)
        except ValueError:
            return None
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return None
    return [m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]


async def model_problem(base_url: str, model: str) -> str | None:
    """Why this run would fail before it starts, or ``None``."""
    try:
        served = await served_models(base_url)
    except (aiohttp.ClientError, TimeoutError) as exc:
        return f"cannot reach {models_url(base_url)}: {exc or type(exc).__name__}"
    if served is None or model in served:
        return None
    listed = ", ".join(served) or "none"
    hint = f"; pass --model {served[0]}" if served else ""
    return f"{base_url} does not serve model {model!r} (it serves: {listed}){hint}"


def all_failed(total: int, errors: Mapping[str, int]) -> str:
    """The line for a run with no successful request."""
    counts = ", ".join(f"{kind} x{count}" for kind, count in errors.items()) or "no requests"
    return f"all {total} requests failed ({counts}): nothing measured, no plots drawn"
