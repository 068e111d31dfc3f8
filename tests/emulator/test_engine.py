"""The pure engine model under a fake clock: batching, queueing, timing, cache, cold starts."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadtests.emulator.config import EngineParams
from loadtests.emulator.engine import Engine, Event, EventKind, SequenceRequest

# Round numbers so expected times are easy to read: prefill 1 token/ms, decode 10 ms + 1 ms/seq.
BASE = {
    "prefill_tokens_per_s": 1000.0,
    "decode_base_ms": 10.0,
    "decode_per_seq_ms": 1.0,
    "first_token_overhead_ms": 0.0,
    "max_num_batched_tokens": 10_000,
}


def engine(**overrides: object) -> Engine:
    return Engine(EngineParams.model_validate({**BASE, **overrides}))


def run(eng: Engine, until: float = 1e9) -> list[Event]:
    events: list[Event] = []
    while (t := eng.next_event_time()) is not None and t <= until:
        events += eng.advance(t)
    return events


def first_token_at(events: list[Event], seq_id: int) -> float:
    return next(e.time for e in events if e.seq_id == seq_id and e.kind is EventKind.FIRST_TOKEN)


def token_times(events: list[Event], seq_id: int) -> list[float]:
    kinds = (EventKind.FIRST_TOKEN, EventKind.TOKEN)
    return [e.time for e in events if e.seq_id == seq_id and e.kind in kinds]


def req(seq_id: int, prompt: int = 100, out: int = 5, **faults: object) -> SequenceRequest:
    return SequenceRequest(seq_id, prompt, out, **faults)  # type: ignore[arg-type]


def test_prefill_then_decode_timing() -> None:
    eng = engine(first_token_overhead_ms=5.0)
    eng.submit(req(1, prompt=100, out=3), 0.0)
    events = run(eng)
    # 5 ms overhead + 100 ms prefill; then two decode steps of 10 + 1x1 ms.
    assert token_times(events, 1) == pytest.approx([0.105, 0.116, 0.127])
    assert events[-1].kind is EventKind.FINISHED and events[-1].tokens == 3


def test_batch_limit_and_fifo_queue() -> None:
    eng = engine(max_num_seqs=2)
    for seq_id in (1, 2, 3, 4):
        eng.submit(req(seq_id, prompt=10, out=3), 0.0)
    eng.advance(0.0)
    assert (eng.counters(0.0).running, eng.counters(0.0).waiting) == (2, 2)
    events = run(eng)
    firsts = [first_token_at(events, i) for i in (1, 2, 3, 4)]
    assert firsts == sorted(firsts) and firsts[2] > max(token_times(events, 1))
    assert eng.counters(1.0).running == eng.counters(1.0).waiting == 0


def test_first_token_event_carries_when_it_was_eligible_and_scheduled() -> None:
    eng = engine(max_num_seqs=1, first_token_overhead_ms=5.0)
    eng.submit(req(1, prompt=100, out=2), 0.0)
    eng.submit(req(2, prompt=50, out=1), 0.0)
    firsts = [e for e in run(eng) if e.kind is EventKind.FIRST_TOKEN]
    # 1: eligible after the 5 ms overhead, prefilled at once (100 ms), one 11 ms decode step.
    # 2: eligible at 5 ms too, but the only slot frees at 116 ms; then 50 ms of prefill.
    phases = [t for e in firsts for t in (e.eligible_at, e.scheduled_at, e.time)]
    assert phases == pytest.approx([0.005, 0.005, 0.105, 0.005, 0.116, 0.166])


def test_itl_grows_with_batch_size() -> None:
    def itl(batch: int) -> float:
        eng = engine()
        for seq_id in range(batch):
            eng.submit(req(seq_id, prompt=1, out=10), 0.0)
        times = token_times(run(eng), 0)
        return times[-1] - times[-2]

    assert itl(1) == pytest.approx(0.011)
    assert itl(8) == pytest.approx(0.018)


def test_long_prompt_delays_those_behind_and_beside_it() -> None:
    eng = engine(max_num_batched_tokens=500)
    eng.submit(req(1, prompt=1, out=50), 0.0)  # decoding when the long prompt arrives
    eng.advance(0.05)
    eng.submit(req(2, prompt=2000, out=2), 0.05)
    eng.submit(req(3, prompt=10, out=2), 0.05)
    events = run(eng)
    # The long prompt is prefilled in ~4 chunks of ~500 tokens; the short one waits behind it.
    assert first_token_at(events, 3) >= first_token_at(events, 2)
    gaps = [b - a for a, b in zip(token_times(events, 1), token_times(events, 1)[1:], strict=False)]
    assert max(gaps) > 0.4  # a 499-token chunk shares the step: ~0.5 s gap
    assert min(gaps) == pytest.approx(0.011)


def test_prefix_cache_hits_skip_prefill() -> None:
    eng = engine()
    hashes = tuple(range(100, 110))  # 10 blocks = 160 tokens
    eng.submit(SequenceRequest(1, 200, 1, hashes), 0.0)
    cold = run(eng)
    eng.submit(SequenceRequest(2, 200, 1, hashes), 1.0)
    warm = run(eng)
    assert cold[0].cached_tokens == 0 and warm[0].cached_tokens == 160
    assert first_token_at(cold, 1) == pytest.approx(0.2)
    assert first_token_at(warm, 2) - 1.0 == pytest.approx(0.04)
    counters = eng.counters(2.0)
    assert (counters.prefix_queries_tokens, counters.prefix_hits_tokens) == (400, 160)


def test_fully_cached_prompt_still_computes_one_token() -> None:
    eng = engine()
    eng.submit(SequenceRequest(1, 32, 1, (1, 2)), 0.0)
    run(eng)
    eng.submit(SequenceRequest(2, 32, 1, (1, 2)), 1.0)
    events = run(eng)
    assert events[0].cached_tokens == 31
    assert first_token_at(events, 2) == pytest.approx(1.001)


def test_prefix_cache_evicts_from_the_tail_of_the_least_recently_used_chain() -> None:
    eng = engine(kv_cache_blocks=4)
    a, b = (1, 2, 3), (7, 8, 9)
    for seq_id, hashes, at in ((1, a, 0.0), (2, b, 1.0), (3, a, 2.0), (4, b, 3.0)):
        eng.submit(SequenceRequest(seq_id, 48, 1, hashes), at)
        run(eng)
    # Only 4 blocks fit, so each prompt evicts the other's blocks, tail first (as vLLM frees
    # them): the head block survives and each of requests 3 and 4 hits one block (16 tokens).
    # Head-first eviction would have killed both chains outright: no hits at all.
    assert eng.counters(4.0).prefix_hits_tokens == 2 * 16
    eng.submit(SequenceRequest(5, 48, 1, b), 5.0)
    assert run(eng)[0].cached_tokens == 47  # b was the last one computed: all cached


def test_serverless_cold_start_and_scale_to_zero() -> None:
    eng = engine(idle_timeout_s=10.0, cold_start_ms=2000.0)
    assert eng.is_cold(0.0)
    eng.submit(req(1, prompt=100, out=1), 0.0)
    assert first_token_at(run(eng), 1) == pytest.approx(2.1)
    eng.submit(req(2, prompt=100, out=1), 5.0)  # still warm
    assert first_token_at(run(eng), 2) == pytest.approx(5.1)
    assert not eng.is_cold(15.0) and eng.is_cold(15.2)  # idle since 5.1
    eng.submit(req(3, prompt=100, out=1), 20.0)
    assert first_token_at(run(eng), 3) == pytest.approx(22.1)


def test_dedicated_backend_is_never_cold() -> None:
    eng = engine(cold_start_ms=2000.0)
    assert not eng.is_cold(1e6)


def test_stall_delays_only_the_stalled_sequence() -> None:
    eng = engine()
    eng.submit(req(1, prompt=10, out=1, stall_s=0.5), 0.0)
    eng.submit(req(2, prompt=10, out=1), 0.0)
    events = run(eng)
    assert first_token_at(events, 1) == pytest.approx(0.51)
    assert first_token_at(events, 2) == pytest.approx(0.01)


def test_drip_stretches_inter_token_gaps() -> None:
    eng = engine()
    eng.submit(req(1, prompt=1, out=4, drip_s=0.1), 0.0)
    times = token_times(run(eng), 1)
    assert [b - a for a, b in itertools.pairwise(times)] == pytest.approx([0.111] * 3)


@pytest.mark.parametrize("after", [0, 3])
def test_die_after_tokens_fails_and_frees_the_slot(after: int) -> None:
    eng = engine(max_num_seqs=1)
    eng.submit(req(1, prompt=1, out=10, die_after_tokens=after), 0.0)
    eng.submit(req(2, prompt=1, out=1), 0.0)
    events = run(eng)
    assert len(token_times(events, 1)) == after
    assert [e.kind for e in events if e.seq_id == 1][-1] is EventKind.FAILED
    assert any(e.kind is EventKind.FINISHED for e in events if e.seq_id == 2)


@pytest.mark.parametrize("at", [0.005, 0.05, 0.2])  # pending, prefilling, decoding
def test_cancel_in_any_phase_frees_the_slot(at: float) -> None:
    eng = engine(max_num_seqs=1, first_token_overhead_ms=10.0)
    eng.submit(req(1, prompt=100, out=100), 0.0)
    eng.submit(req(2, prompt=100, out=1), 0.0)
    eng.advance(at)
    assert eng.cancel(1, at)
    assert not eng.cancel(1, at)
    events = run(eng)
    assert all(e.seq_id == 2 for e in events)
    assert first_token_at(events, 2) < at + 0.25


def test_time_cannot_go_backwards() -> None:
    eng = engine()
    eng.advance(1.0)
    with pytest.raises(ValueError, match="backwards"):
        eng.submit(req(1), 0.5)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 3000), st.integers(1, 40), st.floats(0, 2)),
        min_size=1, max_size=30,
    ),
    st.integers(1, 8),
)  # fmt: skip
def test_every_sequence_finishes_within_the_batch_limit(
    arrivals: list[tuple[int, int, float]], max_num_seqs: int
) -> None:
    eng = engine(max_num_seqs=max_num_seqs, max_num_batched_tokens=512)
    finished: dict[int, int] = {}
    ordered = sorted(enumerate(arrivals), key=lambda item: item[1][2])
    for seq_id, (prompt, out, at) in ordered:
        events = run(eng, until=at) + eng.advance(at)
        finished.update({e.seq_id: e.tokens for e in events if e.kind is EventKind.FINISHED})
        eng.submit(req(seq_id, prompt=prompt, out=out), at)
        assert eng.counters(at).running <= max_num_seqs
    finished.update({e.seq_id: e.tokens for e in run(eng) if e.kind is EventKind.FINISHED})
    assert finished == {i: out for i, (_, out, _) in enumerate(arrivals)}
