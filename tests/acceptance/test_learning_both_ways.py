"""Issue 14 acceptance (real processes): a backend's path gets 400 ms slower, then recovers.

Traffic must leave it and come back, whether its probes see the slow path or not (a health
endpoint answered in front of the slow hop). The loops are bounded by request counts and
synchronised on the route each response names (``X-Meridian-Route``); the seconds are printed
beside the counts for the issue's goals (leave within 2 probe intervals, back within 10 s).
"""

from __future__ import annotations

import time
from pathlib import Path

import aiohttp
import pytest

from tests.acceptance.conftest import Launch, Stack
from tests.acceptance.harness import Served, admin, backend_total, chat, wait_for_signals
from tests.acceptance.workload import table, unique_prompt, user

# Up to ~1,100 sequential requests per case: at a load of 17 on two cores each case took about
# 120 s (the suite's default hang guard); this one is sized for a slow machine, not a claim.
pytestmark = pytest.mark.timeout(600)

FLEET = Path(__file__).parent / "fleets" / "path.yaml"
MODEL = "m"
PROBE_INTERVAL_S = 1.0
WARM_UP = 150  # requests on the good path first: at 1% they earn an exploration credit
SETTLED = 10  # consecutive requests on one backend: the router has made up its mind


@pytest.fixture(scope="module")
def fleet(launch: Launch) -> Stack:
    signals = {
        "probes": {"interval_s": PROBE_INTERVAL_S, "measure_fresh": False},
        "engine_metrics": {"interval_s": 0.5},
        "tick_interval_s": 0.1,
    }
    return launch(FLEET, "us-east", signals)


async def _until(
    session: aiohttp.ClientSession,
    fleet: Stack,
    backend: str,
    run: int,
    limit: int,
    probes: list[int] | None = None,
) -> list[Served]:
    """Requests one after another until ``run`` in a row went to ``backend`` (at most
    ``limit``); ``probes``, when given, gets for each the probes of near that had ended before
    it was sent."""
    served: list[Served] = []
    while len(served) < limit:
        if probes is not None:
            probes.append(await _near_probes(session, fleet))
        reply = await chat(session, fleet.gateway, MODEL, user(unique_prompt(50)))
        assert reply.status == 200
        served.append(reply)
        if len(served) >= run and all(r.backend == backend for r in served[-run:]):
            break
    return served


async def _near_probes(session: aiohttp.ClientSession, fleet: Stack) -> int:
    return int(
        await backend_total(session, fleet.gateway, "meridian_probe_rtt_seconds_count", "near")
    )


@pytest.mark.parametrize("probes_see", [True, False], ids=["probes-see-it", "probes-stay-fast"])
async def test_traffic_leaves_a_slow_path_and_returns_when_it_recovers(
    fleet: Stack, probes_see: bool
) -> None:
    near = fleet.nodes["near"]
    async with aiohttp.ClientSession() as session:
        await wait_for_signals(session, fleet.gateway, MODEL)
        warm = await _until(session, fleet, "near", WARM_UP, 3 * WARM_UP)
        assert warm[-1].backend == "near", [r.backend for r in warm]
        slowed_at = time.monotonic()
        slowed_probes = await _near_probes(session, fleet)
        await admin(
            session, near, "rtt", {"rtt_ms": 400.0, "probe_rtt_ms": None if probes_see else 2.0}
        )
        leaving_probes: list[int] = []
        leaving = await _until(session, fleet, "far", SETTLED, 60, leaving_probes)
        slow_stay = await _until(session, fleet, "far", 20, 20)  # the path stays slow a while
        recovered_at = time.monotonic()
        await admin(session, near, "rtt", {"rtt_ms": 2.0})
        recovered_probes = await _near_probes(session, fleet)
        back = await _until(session, fleet, "near", 1, 400)
        settled_probes: list[int] = []
        # Seen by its probes, the recovery brings the traffic back at their pace, not the
        # requests': room for as many requests as a fast machine fits in 10 probe intervals.
        settled = await _until(
            session, fleet, "near", SETTLED, 1000 if probes_see else 200, settled_probes
        )
    paid = [r for r in leaving if r.backend == "near"]
    left_at = leaving[-SETTLED].sent_at
    returned_at = back[-1].sent_at
    print(table(f"near: RTT 2 -> 400 -> 2 ms, probes {'see it' if probes_see else 'stay fast'}",
        ["measure", "value"], [
            ("requests still sent to the slow path", len(paid)),
            ("left after (s)", left_at - slowed_at),
            ("probe interval (s)", PROBE_INTERVAL_S),
            ("requests to far while slow", len(leaving) - len(paid) + len(slow_stay)),
            ("explorations while slow", sum(r.backend == "near" for r in slow_stay)),
            ("requests until back", len(back)),
            ("back after recovery (s)", returned_at - recovered_at),
        ]))  # fmt: skip
    # Three slow answers confirm a step of the offset when the probes cannot see it; a probe
    # that does see it moves the prediction sooner. Seen by its probes, the path is left within
    # 2 of them (the goal, counted in probes: on a loaded machine a probe ends late, and
    # a fifth request went to near after only the first had ended, session 20).
    assert leaving[-1].backend == "far", [r.backend for r in leaving]
    paid_probes = [
        p - slowed_probes
        for r, p in zip(leaving, leaving_probes, strict=True)
        if r.backend == "near"
    ]
    if probes_see:
        assert len(paid) <= 4 or paid_probes[-1] <= 2, paid_probes
    else:  # on failure, what routing predicted and what each answer took, for the learner
        assert len(paid) <= 4, [
            (r.backend, r.predicted_ttft_ms, r.timing.get("upstream_ttfb")) for r in leaving
        ]
    assert sum(r.backend == "near" for r in slow_stay) <= 2  # explorations only
    assert back[-1].backend == "near", "never returned to the recovered backend"
    # The first request back may be an exploration ahead of the probe that sees the recovery
    # (it pays the path it probes): until that probe, more may go far. Counted in near's
    # probes when they see the recovery (the 10 s at one a second: at a load of 20 a
    # request took about 0.5 s, and 40 of them did not reach the probe that moved the traffic;
    # how many requests a probe interval holds is the machine's speed), in requests when only
    # explorations can show it.
    after = [
        (round(r.sent_at - recovered_at, 2), probes - recovered_probes, r.backend)
        for r, probes in zip(settled, settled_probes, strict=True)
    ]
    assert settled[-1].backend == "near", after
    if probes_see:
        assert settled_probes[-SETTLED] - recovered_probes <= 10, after
    else:
        assert len(settled) <= SETTLED + 40, after
