"""Issue 14 acceptance (real processes): the relay feeds routing's step clock from a stream's
reads, and ``explain``'s step term then carries the engine's phase, not half a step.

One emulated backend decodes one long answer in steps of 200 ms (``fleets/steps.yaml``); the
gateway relays it. After a few chunks, ``explain`` (``/v1/meridian/route``) for a new request
must say the clock replaced the half step (``step_phase``), and its wait must be the engine's
own: the next boundary of the engine's steps (its ``/admin/stats`` ``last_step_end_s``, on the
host's monotonic clock like the gateway's ``tick_at_s``, steps of exactly 200 ms back to back
while one sequence decodes) after the request would reach it. Every wait is on an event (a
chunk the client read, a report carrying the phase); the loop is bounded by the answer's
chunks. The phase may be off by the path's lateness (the emulator's emit lag, the loopback, the
gateway's read): up to a quarter step (50 ms) is allowed, which a half-step guess misses by
25 ms on average and by up to 100.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.timing import parse
from tests.acceptance.conftest import Launch, Stack
from tests.acceptance.harness import admin, carries_token, explain, wait_for_signals

FLEET = Path(__file__).parent / "fleets" / "steps.yaml"
MODEL = "m"
STEP_MS = 200.0  # decode_base_ms of the fleet, decode_per_seq_ms 0: every decode step
TOKENS = 30  # the answer streamed while explain is asked
WARM = 4  # chunks read before asking: the clock has seen steps by then
TOLERANCE_MS = STEP_MS / 4


@pytest.fixture(scope="module")
def fleet(launch: Launch) -> Stack:
    signals = {"probes": {"interval_s": 0.5}, "engine_metrics": {"interval_s": 0.2}}
    return launch(FLEET, "us-east", signals)


def _circular(ms: float) -> float:
    """``ms`` as the nearest offset on a circle of one step: (-step/2, step/2]."""
    return (ms + STEP_MS / 2) % STEP_MS - STEP_MS / 2


async def _phased_report(
    session: aiohttp.ClientSession, fleet: Stack
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Stream one long answer; from the WARM-th chunk on, ask explain after each chunk until
    its candidate says the clock replaced the half step (the engine's ``running`` has to be
    scraped first: an idle engine has no step in progress). Then the engine's stats, the
    answer still decoding."""
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "a long answer"}],
        "max_tokens": TOKENS,
        "stream": True,
    }
    chunks = 0
    last: dict[str, Any] = {}
    async with session.post(f"{fleet.gateway}/v1/chat/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        timing = {e.name: e.dur_ms for e in parse(resp.headers.get("Server-Timing", ""))}
        p90, predicted = timing.get("predicted_ttft_p90"), timing.get("predicted_ttft")
        assert p90 is not None and predicted is not None and p90 >= predicted, timing
        async for raw in resp.content:
            if not carries_token(raw):
                continue
            chunks += 1
            if chunks < WARM:
                continue
            last = await explain(session, fleet.gateway, MODEL, "next", max_tokens=1)
            if last["candidates"][0]["step_phase"] is not None:
                return last, await admin(session, fleet.nodes["solo"], "stats")
    raise AssertionError(f"the clock never phased a decision in {chunks} chunks: {last}")


async def test_explains_step_term_carries_the_engines_phase_after_a_few_chunks(
    fleet: Stack,
) -> None:
    async with aiohttp.ClientSession() as session:
        await wait_for_signals(session, fleet.gateway, MODEL)
        report, stats = await _phased_report(session, fleet)
    candidate = report["candidates"][0]
    phase, terms = candidate["step_phase"], candidate["terms"]
    assert candidate["backend"] == "solo"
    # The step term is its own step (the decode step) plus the clock's wait, not half a step.
    assert phase["wait_ms"] != phase["half_step_ms"]
    step_ms = terms["step"]["ms"]
    assert step_ms == pytest.approx(2 * phase["half_step_ms"] + phase["wait_ms"], abs=0.01)
    # The clock learned the engine's step ...
    assert abs(phase["period_ms"] - STEP_MS) <= TOLERANCE_MS, phase
    # ... and its phase: the engine's steps end on a lattice of STEP_MS from its last step end
    # (the answer still decoding, one sequence, no prefill since its first step).
    end = stats["last_step_end_s"]
    assert end is not None and stats["running"] == 1
    now = phase["tick_at_s"] + phase["tick_age_ms"] / 1000.0  # the decision's time
    lead = terms["rtt"]["ms"] + terms["first_token_overhead"]["ms"]
    engine_wait = STEP_MS - (1000.0 * (now - end) + lead) % STEP_MS
    error = _circular(phase["wait_ms"] - engine_wait)
    half_step_error = _circular(phase["half_step_ms"] - engine_wait)
    tick_after_step_end = (1000.0 * (phase["tick_at_s"] - end)) % STEP_MS
    print(
        f"wait {phase['wait_ms']:.1f} ms, the engine's {engine_wait:.1f} (error {error:+.1f}; "
        f"the half step's {half_step_error:+.1f}); period {phase['period_ms']:.1f}; "
        f"tick {tick_after_step_end:.1f} ms after a step end"
    )
    assert abs(error) <= TOLERANCE_MS, (phase, stats, engine_wait)
    # The tick is a step end seen late by the path (never early, but for the clocks' grain).
    assert -5.0 <= _circular(tick_after_step_end) <= TOLERANCE_MS, (phase, stats)
