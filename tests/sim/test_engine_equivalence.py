"""The simulator's engine (``token_events=False``) keeps the emulator's timing exactly: it only
drops the per-token events."""

from __future__ import annotations

import random

import pytest

from loadtests.emulator.config import EngineParams
from loadtests.emulator.engine import Backlog, Engine, Event, EventKind, SequenceRequest


def _drive(engine: Engine, requests: list[tuple[float, SequenceRequest]]) -> list[Event]:
    """Submit in time order, advancing at every event time in between, like the simulator."""
    out: list[Event] = []
    pending = list(requests)
    while pending or engine.next_event_time() is not None:
        wake = engine.next_event_time()
        if pending and (wake is None or pending[0][0] < wake):
            at, request = pending.pop(0)
            engine.submit(request, at)
            continue
        assert wake is not None
        out.extend(e for e in engine.advance(wake) if e.kind is not EventKind.TOKEN)
    return out


def _workload(seed: int) -> list[tuple[float, SequenceRequest]]:
    rng = random.Random(seed)
    prefixes = [tuple(rng.randrange(1 << 60) for _ in range(20)) for _ in range(3)]
    t, out = 0.0, []
    for i in range(150):
        t += rng.expovariate(8.0)
        prefix = prefixes[rng.randrange(3)]
        prompt = rng.randint(50, 1200)
        hashes = prefix[: min(len(prefix), prompt // 16)]
        out.append((t, SequenceRequest(i, prompt, rng.randint(1, 60), hashes)))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize(
    "params",
    [
        EngineParams(max_num_seqs=8, max_num_batched_tokens=512, kv_cache_blocks=64),
        EngineParams(max_num_seqs=64, idle_timeout_s=2.0, cold_start_ms=500.0),
    ],
    ids=["small-batch-small-cache", "serverless"],
)
def test_first_token_and_finish_times_match_the_emulator_engine(
    seed: int, params: EngineParams
) -> None:
    workload = _workload(seed)
    expected = _drive(Engine(params, 0.0), workload)
    got = _drive(Engine(params, 0.0, token_events=False), workload)
    assert got == expected
    assert sum(e.kind is EventKind.FINISHED for e in got) == len(workload)


def test_quiet_engine_emits_no_token_events_but_still_fails_injected_deaths() -> None:
    engine = Engine(EngineParams(), 0.0, token_events=False)
    engine.submit(SequenceRequest(1, 100, 5), 0.0)
    engine.submit(SequenceRequest(2, 100, 9, die_after_tokens=3), 0.0)
    events: list[Event] = []
    while (wake := engine.next_event_time()) is not None:
        events += engine.advance(wake)
    kinds = {(e.seq_id, e.kind) for e in events}
    assert EventKind.TOKEN not in {kind for _, kind in kinds}
    assert kinds == {
        (1, EventKind.FIRST_TOKEN), (1, EventKind.FINISHED),
        (2, EventKind.FIRST_TOKEN), (2, EventKind.FAILED),
    }  # fmt: skip
    assert [e.tokens for e in events if e.seq_id == 2][-1] == 3


def _run(engine: Engine, request: SequenceRequest, at: float) -> None:
    engine.submit(request, at)
    while (wake := engine.next_event_time()) is not None:
        engine.advance(wake)


def test_truth_queries_do_not_touch_the_cache_order() -> None:
    peeked, untouched = (Engine(EngineParams(kv_cache_blocks=4), 0.0) for _ in range(2))
    for engine in (peeked, untouched):
        _run(engine, SequenceRequest(1, 100, 2, (1, 2, 3)), 0.0)
        _run(engine, SequenceRequest(2, 100, 2, (4, 5)), 1.0)
    assert peeked.cached_prefix_blocks((1, 2, 3, 4)) == 2  # 4 blocks fit: (4, 5) evicted 3
    assert peeked.cached_prefix_blocks((9, 1)) == 0
    assert peeked.uncached_tokens(100, (1, 2, 3)) == 100 - 32
    assert peeked.backlog(10.0) == Backlog(0, 0, 0, 0, (), 10.0)
    for engine in (peeked, untouched):  # a third chain evicts the least recently used
        _run(engine, SequenceRequest(3, 100, 2, (7, 8)), 20.0)
    chains = ((1, 2, 3), (4, 5), (7, 8))
    assert [peeked.cached_prefix_blocks(c) for c in chains] == [
        untouched.cached_prefix_blocks(c) for c in chains
    ]


def test_backlog_and_ready_at_see_the_queue_and_a_cold_start() -> None:
    params = EngineParams(
        max_num_seqs=1, idle_timeout_s=10.0, cold_start_ms=1000.0, first_token_overhead_ms=10.0
    )
    engine = Engine(params, 0.0, token_events=False)
    assert engine.ready_at(0.0) == 1.01  # cold: wake-up, then the overhead
    engine.submit(SequenceRequest(1, 500, 50), 0.0)
    engine.submit(SequenceRequest(2, 300, 5), 0.0)
    assert engine.ready_at(0.5) == 1.01  # the wake-up under way
    engine.advance(1.01)
    backlog = engine.backlog(1.01)
    assert (backlog.running, backlog.queued, backlog.decoding) == (1, 1, 0)
    assert backlog.prefill_tokens == 500 + 300
    assert backlog.remaining_tokens == (50,)
    assert backlog.busy_until == 1.01 + 500 / params.prefill_tokens_per_s
