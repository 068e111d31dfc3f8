"""Helpers for the emulator's real-socket tests."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable

import orjson

from tests.servers import post_bytes, settle


async def raw_post(
    url: str, path: str, body: dict[str, object]
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Send a POST by hand so a test can hang up at exactly the moment it wants."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(post_bytes(host, path, orjson.dumps(body)))
    await writer.drain()
    return reader, writer


async def wait_until(predicate: Callable[[], bool], within: float = 10.0) -> float:
    """Seconds until ``predicate()`` held; fails the test after ``within`` seconds (a bound for
    a test that would otherwise hang, generous for a busy machine: never a timing claim)."""
    return await settle(predicate, within, step_s=0.001)


def chat(prompt: str = "hello", **extra: object) -> dict[str, object]:
    return {"model": "m", "messages": [{"role": "user", "content": prompt}], **extra}


def spawn_emulate(*args: str) -> subprocess.Popen[str]:
    """`meridian emulate ARGS` as a child process (the module form of the console script)."""
    return subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "emulate", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def read_announcements(process: subprocess.Popen[str]) -> list[dict[str, object]]:
    """The JSON lines printed before `{"ready": true}`."""
    assert process.stdout is not None
    lines: list[dict[str, object]] = []
    while True:
        line = json.loads(process.stdout.readline())
        if line == {"ready": True}:
            return lines
        lines.append(line)
