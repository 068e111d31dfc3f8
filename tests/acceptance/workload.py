"""Prompts, ground truth and result tables for the acceptance suite."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterable, Sequence

import aiohttp

from tests.acceptance.harness import Node, Served, carries_token

WORDS = ["route", "the", "request", "to", "the", "backend", "that", "answers", "first"]


def unique_prompt(tokens: int) -> str:
    """About ``tokens`` tokens (4 bytes each) that share no prefix block with any other prompt."""
    head = uuid.uuid4().hex + " "
    body = " ".join(WORDS[i % len(WORDS)] for i in range(max(1, tokens)))
    return (head + body)[: max(len(head), tokens * 4)]


def user(prompt: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": prompt}]


async def direct_ttft_ms(
    session: aiohttp.ClientSession, node: Node, model: str, prompt: str
) -> float:
    """TTFT of one streamed request sent straight to a backend, from this host."""
    body = {"model": model, "messages": user(prompt), "max_tokens": 2, "stream": True}
    started = time.monotonic()
    async with session.post(f"{node.url}/v1/chat/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        first: float | None = None
        async for raw in resp.content:
            if first is None and carries_token(raw):
                first = time.monotonic()
    assert first is not None
    return (first - started) * 1000.0


async def true_ttft_ms(
    session: aiohttp.ClientSession, nodes: Sequence[Node], model: str, tokens: int, repeats: int = 5
) -> dict[str, float]:
    """What each backend really takes now, measured from the gateway's host.

    Serverless backends are measured once: that first request is the one routing would have
    sent them, and it pays the cold start if they are cold. Dedicated ones take the least of
    ``repeats`` sequential requests: a busy machine only ever adds time (a median of three once
    made a 42 ms backend 318 ms, slower than one 80 ms further away, at a load of 20). The
    measurement goes around the gateway, which therefore
    never learns from it (it still believes an untouched serverless backend is cold, as it is
    for anything the gateway sends).
    """
    serverless = [n for n in nodes if n.kind == "serverless"]
    dedicated = [n for n in nodes if n.kind != "serverless"]
    cold = asyncio.gather(
        *(direct_ttft_ms(session, n, model, unique_prompt(tokens)) for n in serverless)
    )
    truth: dict[str, float] = {}
    for node in dedicated:
        samples = [
            await direct_ttft_ms(session, node, model, unique_prompt(tokens))
            for _ in range(repeats)
        ]
        truth[node.name] = min(samples)
    truth.update(zip((n.name for n in serverless), await cold, strict=True))
    return truth


def share(served: Iterable[Served], backends: set[str]) -> float:
    rows = list(served)
    return sum(1 for r in rows if r.backend in backends) / len(rows) if rows else 0.0


def table(title: str, header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A fixed-width table for the test log (run pytest with -s to see it)."""
    cells = [list(map(str, header))] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = [f"== {title}"]
    for row in cells:
        lines.append(
            "  ".join(value.ljust(width) for value, width in zip(row, widths, strict=True))
        )
    return "\n".join(lines)


def _cell(value: object) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)
