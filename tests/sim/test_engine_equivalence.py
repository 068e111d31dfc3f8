"""SimEngine must keep the emulator engine's timing exactly (it only drops per-token events)."""

from __future__ import annotations

import random

import pytest

from loadtests.emulator.config import EngineParams
from loadtests.emulator.engine import Engine, Event, EventKind, SequenceRequest
from loadtests.sim.engine import SimEngine


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
    got = _drive(SimEngine(params, 0.0), workload)
    assert got == expected
    assert sum(e.kind is EventKind.FINISHED for e in got) == len(workload)


def test_truth_queries_do_not_touch_the_cache_order() -> None:
    engine = SimEngine(EngineParams(kv_cache_blocks=4), 0.0)
    engine.submit(SequenceRequest(1, 100, 2, (1, 2, 3)), 0.0)
    while (wake := engine.next_event_time()) is not None:
        engine.advance(wake)
    assert engine.cached_blocks((1, 2, 3, 4)) == 3
    assert engine.cached_blocks((9, 1)) == 0
    assert engine.uncached_tokens(100, (1, 2, 3)) == 100 - 48
    backlog = engine.backlog(10.0)
    assert (backlog.running, backlog.queued, backlog.prefill_tokens) == (0, 0, 0)
