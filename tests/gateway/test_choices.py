"""A request for ``n`` > 1 choices: relayed whole, and its inter-token gaps are each choice's.

An engine decodes a request's choices side by side, so one step sends a token of each at once.
Gaps taken across the stream would be mostly ~0 ms (the choices of one step), which the ITL
metrics would report and routing would learn as a decode n times faster than the backend's.
The emulator runs ``n`` as vLLM does (tests/emulator/test_choices.py).
"""

from __future__ import annotations

from typing import Any

import aiohttp
import openai
import pytest

from gateway import ended_observation, relay
from gateway.timing import StreamStats
from routing.types import Observation
from tests.gateway.support import MODEL, EmulatorFactory, GatewayFactory, config_for
from tests.observability.support import until
from tests.replicas.support import wait_for
from tests.servers import scraped_sum


async def test_n_choices_stream_through_and_their_gaps_are_per_choice(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    backend = await emulator("b1")
    running = await gateway(config_for({"b1": backend.url}))
    client = openai.AsyncOpenAI(base_url=running.url + "/v1", api_key="unused")
    stream = await client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hello"}], max_tokens=5, n=3,
        stream=True, stream_options={"include_usage": True},
    )  # fmt: skip
    texts = {0: "", 1: "", 2: ""}
    usage = None
    async for chunk in stream:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
        usage = chunk.usage or usage
    whole = await client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hello"}], max_tokens=2, n=2
    )
    await client.close()
    assert set(texts.values()) == {" the quick brown fox jumps"}
    assert usage is not None and usage.completion_tokens == 15
    assert [c.message.content for c in whole.choices] == [" the quick", " the quick"]
    async with aiohttp.ClientSession() as session:
        metrics = running.admin_url + "/metrics"

        async def itl_observed() -> bool:  # the stream's gaps land in one go, once it ended
            return await scraped_sum(session, metrics, "meridian_itl_seconds", "_count") > 0

        await wait_for(itl_observed, within_s=30.0, step_s=0.002)
        count = await scraped_sum(session, metrics, "meridian_itl_seconds", "_count")
    # 3 choices of 5 tokens: 4 gaps each. Gaps across the stream would be 14.
    assert count == 12


async def test_routing_learns_one_choices_length(
    emulator: EmulatorFactory, gateway: GatewayFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The learner turns ITL x output tokens into the time a request holds its slot; n
    choices decode side by side, so it is told one choice's length (usage counts them all).
    What it is told is the relay's ``observation_of`` (gateway/ended_observation.py), recorded
    as it returns: routing's own classes may be compiled (``make compiled-test``), so not
    patched."""
    backend = await emulator("b1")
    running = await gateway(config_for({"b1": backend.url}))
    learned: list[Observation] = []
    observation_of = ended_observation.observation_of

    def recording(*args: Any) -> Observation:
        observation = observation_of(*args)
        learned.append(observation)
        return observation

    monkeypatch.setattr(relay, "observation_of", recording)  # the name the relay calls
    client = openai.AsyncOpenAI(base_url=running.url + "/v1", api_key="unused")
    stream = await client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hello"}], max_tokens=5, n=3,
        stream=True, stream_options={"include_usage": True},
    )  # fmt: skip
    usage = [chunk.usage async for chunk in stream if chunk.usage]
    await client.close()
    assert usage[0].completion_tokens == 15
    await until(lambda: bool(learned))  # the request ends (is learned from) after its last byte
    assert [observation.output_tokens for observation in learned] == [5]


def test_a_choice_gap_is_between_two_tokens_of_that_choice() -> None:
    stats = StreamStats.for_choices(0.0, 2)
    first, second = ({"choices": [{"index": i, "delta": {"content": "t"}}]} for i in (0, 1))
    for step in range(3):  # each step: a token of choice 0, then one of choice 1, 0.1 ms apart
        stats.on_token_event(step * 0.010, chunk=first)
        stats.on_token_event(step * 0.010 + 0.0001, chunk=second)
    assert [round(gap, 6) for gap in stats.gaps_ms] == [10.0] * 4
    assert stats.output_events == 6
    assert stats.first_token_at == 0.0
    assert stats.itl_percentiles() == (stats.gaps_ms[0], stats.gaps_ms[0], max(stats.gaps_ms))


def test_one_choice_keeps_the_streams_gaps() -> None:
    stats = StreamStats.for_choices(0.0, 1)
    assert stats.choice_last_at is None
    for at in (0.0, 0.002, 0.005):
        stats.on_token_event(at)
    assert [round(gap, 6) for gap in stats.gaps_ms] == [2.0, 3.0]
