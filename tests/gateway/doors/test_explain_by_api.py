"""``explain`` and the relay agree on which backends a door's request may reach: the profile
carries the API, routing filters out backends without it (``serves_api``), so the explained
ranking is the one the relay walks."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import aiohttp
import openai
import yaml

from tests.gateway.doors.support import config_with_apis
from tests.gateway.support import MODEL, EmulatorFactory, GatewayFactory

ROUTE = "/v1/meridian/route"


async def _explain(url: str, **params: str) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as session:
        async with session.get(url + ROUTE, params={"model": MODEL, **params}) as response:
            return response.status, await response.json()


def _ranked(report: dict[str, Any]) -> list[str]:
    return [c["backend"] for c in report["candidates"]]


def _filtered(report: dict[str, Any]) -> dict[str, str]:
    return {f["backend"]: f["filter"] for f in report["filtered"]}


async def test_explain_ranks_only_backends_with_the_doors_api(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    plain = await emulator("plain")  # chat, completions, embeddings
    able = await emulator("able")
    config = config_with_apis(
        {"plain": (plain.url, None), "able": (able.url, ["chat", "responses"])}, routing={}
    )
    running = await gateway(config)

    status, chat = await _explain(running.url, prompt="hello")
    assert status == 200
    assert sorted(_ranked(chat)) == ["able", "plain"] and chat["profile"]["api"] == "chat"

    status, responses = await _explain(running.url, prompt="hello", api="responses")
    assert status == 200
    assert _ranked(responses) == ["able"] and responses["chosen"] == "able"
    assert _filtered(responses) == {"plain": "serves_api"}
    why = {f["backend"]: f["why"] for f in responses["filtered"]}
    assert "'responses'" in why["plain"]

    status, embeddings = await _explain(running.url, prompt="hello", api="embeddings")
    assert _ranked(embeddings) == ["plain"] and _filtered(embeddings) == {"able": "serves_api"}

    # Messages reach chat backends translated: both are candidates.
    status, messages = await _explain(running.url, prompt="hello", api="messages")
    assert status == 200 and sorted(_ranked(messages)) == ["able", "plain"]

    # The relay goes where explain said, and never asks the backend without the API.
    client = openai.AsyncOpenAI(base_url=running.url + "/v1", api_key="unused", max_retries=0)
    raw = await client.responses.with_raw_response.create(model=MODEL, input="hello")
    assert "backend=able" in raw.headers["x-meridian-route"]
    raw_e = await client.embeddings.with_raw_response.create(model=MODEL, input="hello")
    assert "backend=plain" in raw_e.headers["x-meridian-route"]
    await client.close()
    assert plain.stats.requests == 1 and able.stats.requests == 1


async def test_explain_of_a_posted_door_body(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    only_embeddings = await emulator("emb")
    only_chat = await emulator("chat")
    running = await gateway(
        config_with_apis(
            {"emb": (only_embeddings.url, ["embeddings"]), "chat": (only_chat.url, ["chat"])}
        )
    )
    body = {"model": MODEL, "input": ["one", "two"]}
    async with aiohttp.ClientSession() as session:
        url = running.url + ROUTE
        async with session.post(url, json=body, params={"api": "embeddings"}) as response:
            assert response.status == 200
            report = await response.json()
        async with session.get(url, params={"model": MODEL, "prompt": "x", "api": "nope"}) as bad:
            assert bad.status == 400
            error = (await bad.json())["error"]
    assert _ranked(report) == ["emb"] and _filtered(report) == {"chat": "serves_api"}
    assert report["profile"]["api"] == "embeddings" and report["profile"]["prompt_tokens"] > 0
    assert error["param"] == "api" and "embeddings" in error["message"]


async def test_meridian_explain_command_takes_the_api(
    emulator: EmulatorFactory, tmp_path: Path
) -> None:
    chat_only = await emulator("chat")
    embedder = await emulator("emb")
    config = tmp_path / "gw.yaml"
    backends = [
        {"name": "chat", "url": chat_only.url + "/v1", "apis": ["chat"]},
        {"name": "emb", "url": embedder.url + "/v1", "apis": ["embeddings"]},
    ]
    data = {"backends": [{**b, "region": "local", "models": [MODEL]} for b in backends]}
    config.write_text(yaml.safe_dump(data))
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("embed this sentence")
    argv = ["explain", "--config", str(config), "--model", MODEL, "--prompt-file", str(prompt)]
    for api, ranked in (("embeddings", ["emb"]), ("messages", ["chat"])):
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gateway.cli", *argv, "--api", api, "--json", "--settle-s", "1",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await process.communicate()
        assert process.returncode == 0, err.decode()
        report = json.loads(out)
        assert _ranked(report) == ranked and report["profile"]["api"] == api
        assert [f["filter"] for f in report["filtered"]] == ["serves_api"]
