"""``n`` > 1: the emulator samples n choices of one prompt, as vLLM does, each a sequence of
its own in the engine's batch (checked with the openai SDK and raw HTTP)."""

from __future__ import annotations

import aiohttp
import openai
import pytest

from tests.emulator.helpers import chat, raw_post, wait_until


async def test_streamed_chat_choices_interleave_and_usage_counts_them_all(start) -> None:
    emulator = await start()
    client = openai.AsyncOpenAI(base_url=emulator.url + "/v1", api_key="unused")
    stream = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "x" * 400}], max_tokens=5, n=3,
        stream=True, stream_options={"include_usage": True},
    )  # fmt: skip
    chunks = [chunk async for chunk in stream]
    await client.close()
    by_choice: dict[int, list[str]] = {0: [], 1: [], 2: []}
    roles, finishes = set(), {}
    for chunk in chunks:
        for choice in chunk.choices:
            if choice.delta.role == "assistant":
                roles.add(choice.index)
            if choice.delta.content:
                by_choice[choice.index].append(choice.delta.content)
            if choice.finish_reason is not None:
                finishes[choice.index] = choice.finish_reason
    assert roles == {0, 1, 2}
    assert all(
        words == [" the", " quick", " brown", " fox", " jumps"] for words in by_choice.values()
    )
    assert finishes == {0: "length", 1: "length", 2: "length"}
    # The choices decode in one batch: their tokens interleave, not one choice after another.
    order = [c.choices[0].index for c in chunks if c.choices and c.choices[0].delta.content]
    assert order[:3] != [0, 0, 0]
    usage = chunks[-1].usage
    assert usage is not None and chunks[-1].choices == []
    assert (usage.prompt_tokens, usage.completion_tokens) == (102, 15)
    assert emulator.stats.completed == 1 and emulator.stats.running == 0


async def test_whole_completion_has_every_choice(start) -> None:
    emulator = await start()
    client = openai.AsyncOpenAI(base_url=emulator.url + "/v1", api_key="unused")
    completion = await client.completions.create(model="m", prompt="hello", max_tokens=3, n=2)
    answer = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=2, n=4
    )
    await client.close()
    assert [c.index for c in completion.choices] == [0, 1]
    assert {c.text for c in completion.choices} == {" the quick brown"}
    assert completion.usage is not None and completion.usage.completion_tokens == 6
    assert [c.index for c in answer.choices] == [0, 1, 2, 3]
    assert {c.message.content for c in answer.choices} == {" the quick"}
    assert answer.usage is not None and answer.usage.completion_tokens == 8


async def test_choices_take_batch_slots(start) -> None:
    """Four choices are four running sequences; a hang-up cancels every one."""
    emulator = await start()
    _, writer = await raw_post(
        emulator.url, "/v1/chat/completions", chat(max_tokens=2000, stream=True, n=4)
    )
    await wait_until(lambda: emulator.stats.running == 4)
    writer.close()
    await wait_until(lambda: emulator.stats.cancelled == 1)
    await wait_until(lambda: emulator.stats.running == 0 and emulator.stats.waiting == 0)
    assert emulator.stats.completed == 0


@pytest.mark.parametrize("n", [0, -1, 1.5, True, "2", 129])
async def test_a_bad_n_is_a_400(start, n: object) -> None:
    emulator = await start()
    async with aiohttp.ClientSession() as session:
        async with session.post(emulator.url + "/v1/chat/completions", json=chat(n=n)) as resp:
            body = await resp.json()
    assert resp.status == 400
    assert body["error"]["param"] == "n" and body["error"]["message"]
