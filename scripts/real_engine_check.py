"""Meridian in front of one real engine: the doors, the gRPC RPCs and the engine scrape.

    python scripts/real_engine_check.py --url http://127.0.0.1:18420 --engine vllm \
        --model tiny [--apis chat,completions]

For a server started by ``scripts/capture_llamacpp_metrics.sh`` / ``capture_vllm_cpu_metrics.sh``
(or any real one on loopback). A gateway is started in-process with that one backend under the
public name ``public-model`` (``model_ids`` maps it to ``--model``), then: three streamed chats
(openai SDK), one Anthropic Messages call (translated to chat unless ``messages`` is in
``--apis``), the gRPC ``Messages`` RPC, the gRPC ``Embeddings`` RPC (answered, or NOT_FOUND when
``embeddings`` is not in ``--apis``), and two engine scrapes; it prints what it saw and exits 1
when anything is off (a stream without content, a missing engine signal, a scrape error). A
manual check, not a test: CI has no engine to run it against (it lives in scripts/, not
loadtests/, because it needs the dev extra's openai and anthropic SDKs).
"""

from __future__ import annotations

import argparse
import asyncio
import sys

import aiohttp
import anthropic
import grpc
import openai

from gateway.app import start_gateway
from gateway.config import parse_config
from gateway.grpc.client import inference_stub
from gateway.grpc.mount import GRPC_SERVER
from proto.meridian.v1 import inference_pb2 as pb

PUBLIC = "public-model"
_WATCHED = ("meridian_engine_signal_missing{", "meridian_scrape_errors_total{")


async def _http_doors(url: str, problems: list[str]) -> None:
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
    prompt = "the same prompt about foxes and forests " * 8  # the 2nd and 3rd hit the cache
    for attempt in range(3):
        raw = await client.chat.completions.with_raw_response.create(
            model=PUBLIC, stream=True, max_tokens=12, messages=[{"role": "user", "content": prompt}]
        )
        chunks = [c async for c in raw.parse()]
        content = sum(1 for c in chunks if c.choices and c.choices[0].delta.content)
        print(f"chat stream {attempt}: {len(chunks)} chunks, {content} with content")
        if not chunks:
            problems.append("a chat stream without chunks")
    await client.close()
    messages = anthropic.AsyncAnthropic(base_url=url, api_key="unused", max_retries=0)
    answer = await messages.messages.create(
        model=PUBLIC, max_tokens=6, messages=[{"role": "user", "content": "hi"}]
    )
    print(f"messages: stop_reason={answer.stop_reason} output_tokens={answer.usage.output_tokens}")
    if answer.model != PUBLIC:
        problems.append(f"Messages answer names model {answer.model!r}")


async def _grpc_rpcs(target: str, embeddings: bool, problems: list[str]) -> None:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = inference_stub(channel)
        request = pb.MessagesRequest(
            model=PUBLIC, max_tokens=5, messages=[pb.AnthropicMessage(role="user", text="hello")]
        )
        kinds = [event.type async for event in stub.Messages(request)]
        print("grpc Messages:", " ".join(kinds))
        if not kinds or kinds[0] != "message_start" or kinds[-1] != "message_stop":
            problems.append("the Messages RPC did not stream message_start .. message_stop")
        try:
            answer = await stub.Embeddings(pb.EmbeddingsRequest(model=PUBLIC, text="x"))
            print(
                f"grpc Embeddings: {len(answer.data)} vector(s) of {len(answer.data[0].embedding)}"
            )
        except grpc.aio.AioRpcError as err:
            print(f"grpc Embeddings: {err.code().name} {err.details()}")
            if embeddings or err.code() is not grpc.StatusCode.NOT_FOUND:
                problems.append(f"the Embeddings RPC failed: {err.code().name}")


async def check(url: str, engine: str, model: str, apis: list[str]) -> list[str]:
    data = {
        "listen": {"host": "127.0.0.1", "port": 0, "grpc_port": 0},
        "backends": [
            {
                "name": "real",
                "region": "local",
                "engine": engine,
                "url": url.rstrip("/") + "/v1",
                "models": [PUBLIC],
                "model_ids": {PUBLIC: model},
                "apis": apis,
            }
        ],
        "signals": {"engine_metrics": {"enabled": True, "interval_s": 0.5}},
        "timeouts": {"first_token_s": 30.0},
    }
    problems: list[str] = []
    gateway = await start_gateway(parse_config(data, "<real-engine-check>"), "127.0.0.1", 0)
    try:
        await _http_doors(gateway.url, problems)
        await _grpc_rpcs(gateway.app[GRPC_SERVER].target, "embeddings" in apis, problems)
        await asyncio.sleep(1.2)  # two scrape intervals: the scrape runs in the background
        async with aiohttp.ClientSession() as session:
            async with session.get(gateway.url + "/metrics") as response:
                page = await response.text()
            params = {"model": PUBLIC, "prompt": "hi"}
            async with session.get(gateway.url + "/v1/meridian/route", params=params) as response:
                report = await response.json()
    finally:
        await gateway.close()
    watched = [line for line in page.splitlines() if line.startswith(_WATCHED)]
    problems += [f"gateway metric: {line}" for line in watched if not line.endswith(" 0.0")]
    signals = report["candidates"][0]["signals"]
    print("engine signals seen by routing:", signals)
    if signals.get("running") is None or signals.get("metrics_age_s") is None:
        problems.append("routing has no engine signals from the scrape")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/real_engine_check.py")
    parser.add_argument("--url", required=True, help="the engine's base URL (loopback)")
    parser.add_argument("--engine", required=True, choices=["vllm", "sglang", "tgi", "llamacpp"])
    parser.add_argument("--model", required=True, help="the engine's own model id")
    parser.add_argument("--apis", default="chat,completions")
    args = parser.parse_args(argv)
    problems = asyncio.run(check(args.url, args.engine, args.model, args.apis.split(",")))
    for problem in problems:
        print("PROBLEM:", problem, file=sys.stderr)
    print("ok" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
