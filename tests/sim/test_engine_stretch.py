"""The quiet engine's decode-only stretches (``loadtests.emulator.stretch``) change nothing
anyone can see: the same engine decoding step by step (``fast_forward = False``) returns the
same events, boundaries and query answers, through submits, cancels, param swaps, scrapes and
backlog reads at any time, and so does the emulator with per-token events."""

from __future__ import annotations

import random
from typing import Any

import pytest

from loadtests.emulator.config import EngineParams
from loadtests.emulator.engine import Engine, EventKind, SequenceRequest

BASE = EngineParams(max_num_seqs=6, max_num_batched_tokens=256, kv_cache_blocks=256)
# A step budget the decoding batch can use up: a sequence may sit prefilling with no chunk.
TIGHT = EngineParams(max_num_seqs=8, max_num_batched_tokens=7, kv_cache_blocks=256)


def _actions(seed: int, count: int, base: EngineParams) -> list[tuple[float, str, Any]]:
    """Time-ordered commands and reads: mostly submits, with cancels of earlier sequences,
    slowdowns and restores, scrapes (counters) and oracle reads (backlog)."""
    rng = random.Random(seed)
    t, out = 0.0, list[tuple[float, str, Any]]()
    slow = base.model_copy(update={"decode_base_ms": 31.0, "decode_per_seq_ms": 1.3})
    # A budget the batch already decoding uses up: a sequence part-way through its prefill
    # then gets no chunk (with a fixed budget FIFO chunking always leaves it one).
    squeezed = base.model_copy(update={"max_num_batched_tokens": 3})
    for i in range(count):
        t += rng.expovariate(6.0)
        roll = rng.random()
        if roll < 0.55:
            stall = rng.choice([0.0, 0.0, 0.0, 0.05])
            hashes = tuple(rng.randrange(4) for _ in range(rng.randrange(4)))
            request = SequenceRequest(
                i, rng.randint(10, 600), rng.randint(1, 80), hashes, stall_s=stall
            )
            out.append((t, "submit", request))
        elif roll < 0.65:
            out.append((t, "cancel", rng.randrange(i + 1)))
        elif roll < 0.72:
            out.append((t, "params", rng.choice([slow, base, base, squeezed])))
        elif roll < 0.86:
            out.append((t, "counters", None))
        else:
            out.append((t, "backlog", None))
    return out


def _drive(engine: Engine, actions: list[tuple[float, str, Any]]) -> list[Any]:
    """Everything the engine tells its caller, in order, driven as the simulator does:
    advanced at each of its own event times, commanded and read in between."""
    seen: list[Any] = []
    pending = list(actions)
    while pending or engine.next_event_time() is not None:
        wake = engine.next_event_time()
        seen.append(("next", wake, engine.last_step_end))
        if pending and (wake is None or pending[0][0] < wake):
            at, kind, arg = pending.pop(0)
            if kind == "submit":
                engine.submit(arg, at)
            elif kind == "cancel":
                seen.append(("cancel", engine.cancel(arg, at)))
            elif kind == "params":
                engine.params = arg
            elif kind == "counters":
                seen.append(engine.counters(at))
            else:
                seen.append(engine.backlog(at))
            seen.append(("cold", engine.is_cold(at)))
            continue
        assert wake is not None
        seen.append([e for e in engine.advance(wake) if e.kind is not EventKind.TOKEN])
    return seen


def _quiet(fast_forward: bool, params: EngineParams = BASE) -> Engine:
    engine = Engine(params, 0.0, token_events=False)
    engine.fast_forward = fast_forward
    return engine


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("params", [BASE, TIGHT], ids=["base", "tight-budget"])
def test_stretches_answer_as_step_by_step_decoding(seed: int, params: EngineParams) -> None:
    actions = _actions(seed, 160, params)
    stepwise, stretched = _quiet(False, params), _quiet(True, params)
    expected = _drive(stepwise, actions)
    assert _drive(stretched, actions) == expected
    assert stretched.stretched_steps > 0 and stepwise.stretched_steps == 0
    # The emulator with per-token events (the real-time server's engine) agrees too.
    assert _drive(Engine(params, 0.0), actions) == expected


def test_a_long_batch_runs_as_one_stretch_until_the_first_finish() -> None:
    engine = _quiet(True)
    for i, max_tokens in enumerate((40, 25, 60)):
        engine.submit(SequenceRequest(i, 32, max_tokens), 0.0)
    ends: list[float] = []
    finished: list[tuple[int, int]] = []
    while (wake := engine.next_event_time()) is not None:
        events = engine.advance(wake)
        ends.append(engine.last_step_end)  # -inf after the first (no step ended yet)
        finished += [(e.seq_id, e.tokens) for e in events if e.kind is EventKind.FINISHED]
    assert finished == [(1, 25), (0, 40), (2, 60)]
    assert len(ends[1:]) == len(set(ends[1:])) == 60  # a step a token, each boundary its own
    # All but the prefill step and the three steps a sequence finishes in.
    assert engine.stretched_steps == 60 - 1 - 3


def test_faulty_sequences_decode_step_by_step() -> None:
    engine = _quiet(True)
    engine.submit(SequenceRequest(1, 32, 30), 0.0)
    engine.submit(SequenceRequest(2, 32, 30, drip_s=0.01), 0.0)
    while (wake := engine.next_event_time()) is not None:
        engine.advance(wake)
    assert engine.stretched_steps == 0
