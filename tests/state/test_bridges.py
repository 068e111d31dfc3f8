"""The gateway-facing bridges over two real SharedStateSync replicas (one in-memory store):
the SignalHub's view (in-flight sums, measurements, probe verdicts) and the router's (shared
prefix affinity reaching a real predicted-TTFT router's own index)."""

from __future__ import annotations

import time

import pytest
from aiohttp import web

from gateway.signals.probe_summary import ProbeSummary
from gateway.state.fleet_bridge import SharedFleetBridge
from gateway.state.router_bridge import (
    RemotePrefixFeeder,
    SharedPrefixRouter,
    prefix_recorder_of,
)
from gateway.state.sync import SharedStateSync
from gateway.state.wiring import SharedState
from routing.policies import build_router
from routing.types import (
    BackendKind,
    BackendSpec,
    BackendState,
    FleetSnapshot,
    Observation,
    RequestProfile,
)
from tests.state.conftest import ConfigFactory, StoreFactory, SyncFactory, eventually

pytestmark = pytest.mark.parametrize("store_kind", ["memory"])

SPECS = {
    name: BackendSpec(
        name=name,
        region="r",
        kind=BackendKind.DEDICATED,
        models=frozenset({"m"}),
        prefill_tokens_per_s=5000,
    )
    for name in ("a1", "a2")
}


def _local(name: str, **fields: object) -> BackendState:
    return BackendState(spec=SPECS[name], **fields)  # type: ignore[arg-type]


async def _pair(make_sync: SyncFactory) -> tuple[SharedStateSync, SharedStateSync]:
    one, two = await make_sync("r1"), await make_sync("r2")
    await eventually(lambda: not one.health().degraded and not two.health().degraded, 3.0)
    return one, two


async def test_in_flight_is_the_sum_over_replicas(make_sync: SyncFactory) -> None:
    one, two = await _pair(make_sync)
    bridge = SharedFleetBridge(two)
    before = bridge.version()
    for _ in range(3):
        SharedFleetBridge(one).note_in_flight("a1", +1)
    await eventually(lambda: bridge.merge(_local("a1", in_flight=2), 0.0).in_flight == 5, 2.0)
    assert bridge.version() > before  # the hub rebuilds its snapshot on this
    # The other replica's part apart, for routing to count its requests since a scrape.
    assert bridge.merge(_local("a1", in_flight=2), 0.0).others_in_flight == 3
    alone = bridge.merge(_local("a2", in_flight=1), 0.0)
    assert alone.in_flight == 1 and not alone.others_in_flight


async def test_leader_measurement_reaches_the_follower_with_its_age(
    make_sync: SyncFactory,
) -> None:
    one, two = await _pair(make_sync)
    leader, follower = SharedFleetBridge(one), SharedFleetBridge(two)
    mono = time.monotonic()
    measured = _local("a1", rtt_ms=3.5, rtt_as_of=mono - 2.0, running=7, metrics_as_of=mono - 1.0)
    probe = ProbeSummary("a1", last_probe_at=mono - 0.5, active_healthy=False)
    leader.publish(measured, probe, mono)
    stale_local = _local("a1", rtt_ms=50.0, rtt_as_of=mono - 30.0)
    await eventually(lambda: follower.merge(stale_local, mono).rtt_ms == 3.5, 2.0)
    merged = follower.merge(stale_local, mono)
    assert merged.running == 7
    assert merged.rtt_as_of == pytest.approx(mono - 2.0, abs=0.05)
    assert merged.as_of == pytest.approx(mono - 1.0, abs=0.05)
    # Newer local measurements win; the leader's own record never overrides its own view.
    fresh_local = _local("a1", rtt_ms=9.0, rtt_as_of=mono - 0.1)
    assert follower.merge(fresh_local, mono).rtt_ms == 9.0
    assert leader.merge(stale_local, mono).rtt_ms == 50.0
    assert follower.remote_active_health("a1", None, mono) is False
    assert follower.remote_active_health("a1", mono - 0.1, mono) is None


def _profile(hashes: tuple[int, ...]) -> RequestProfile:
    return RequestProfile(model="m", prompt_tokens=16 * len(hashes), prefix_hashes=hashes)


def _fleet(now: float) -> FleetSnapshot:
    backends = {n: _local(n, rtt_ms=1.0, rtt_as_of=now, as_of=now) for n in SPECS}
    return FleetSnapshot(backends=backends, gateway_region="r", taken_at=now)


async def _routers(
    make_sync: SyncFactory,
) -> tuple[SharedPrefixRouter, SharedPrefixRouter, RemotePrefixFeeder]:
    """Two replicas' predicted-TTFT routers; what the first shares, the feeder hands the
    second's index when drained."""
    one, two = await _pair(make_sync)
    first = SharedPrefixRouter(build_router("predicted_ttft", {}, 1), one)
    inner = build_router("predicted_ttft", {}, 2)
    recorder = prefix_recorder_of(inner)
    assert recorder is not None
    feeder = RemotePrefixFeeder(recorder)
    two.snapshot().on_remote_prefix = feeder.offer
    return first, SharedPrefixRouter(inner, two), feeder


async def test_prefix_served_via_one_replica_steers_the_other_replicas_router(
    make_sync: SyncFactory,
) -> None:
    first, second, feeder = await _routers(make_sync)
    assert prefix_recorder_of(build_router("round_robin", {}, 2)) is None  # keeps no index

    hashes = tuple(range(9000, 9250))  # 4000 tokens: ~0.8 s predicted prefill when cold
    for served_by in ("a1", "a2"):  # whichever it was, the other replica follows
        chain = tuple(h + (1 if served_by == "a2" else 0) * 10_000 for h in hashes)
        first.observe(Observation(backend=served_by, at=time.monotonic(), ok=True,
                                  prefix_hashes=chain))  # fmt: skip
        await eventually(lambda: feeder.queued > 0, 2.0)
        feeder.drain()
        decision = second.decide(_profile(chain), _fleet(time.monotonic()), time.monotonic())
        assert decision.chosen is not None and decision.chosen.backend == served_by
        assert decision.chosen.cached_tokens == 16 * len(chain)
        second.release(served_by)


async def test_a_decision_shares_its_prompt_before_the_answer_is_back(
    make_sync: SyncFactory,
) -> None:
    first, second, feeder = await _routers(make_sync)

    chain = tuple(range(7000, 7250))
    now = time.monotonic()
    sent = first.decide(_profile(chain), _fleet(now), now).chosen  # no answer observed yet
    assert sent is not None
    await eventually(lambda: feeder.queued > 0, 2.0)
    feeder.drain()
    decision = second.decide(_profile(chain), _fleet(now), time.monotonic())
    assert decision.chosen is not None and decision.chosen.backend == sent.backend
    assert decision.chosen.cached_tokens == 16 * len(chain)


async def test_failed_requests_share_nothing(make_sync: SyncFactory) -> None:
    one, _ = await _pair(make_sync)
    router = SharedPrefixRouter(build_router("predicted_ttft", {}, 1), one)
    router.observe(Observation(backend="a1", at=0.0, ok=False, prefix_hashes=(1, 2, 3)))
    assert one.snapshot().prefix_sizes() == {}


async def test_after_a_reload_the_new_router_learns_and_new_backends_are_probed(
    make_sync: SyncFactory, make_store: StoreFactory, make_config: ConfigFactory
) -> None:
    one = await make_sync("r1")
    sync = SharedStateSync(await make_store(), make_config(), replica_id="r2")
    shared = SharedState(sync, ["a1"])
    shared.wrap_router(build_router("predicted_ttft", {}, 1))
    reloaded = shared.wrap_router(build_router("predicted_ttft", {}, 2))  # routing changed
    lifecycle = shared.lifecycle(web.Application())
    await anext(lifecycle)
    try:
        await eventually(lambda: not sync.health().degraded, 3.0)
        await eventually(lambda: shared.fleet.leads("a1"), 3.0)
        assert not sync.is_leader("probe:a2")
        await eventually(lambda: shared.fleet.leads("a2"), 3.0)  # added by the reload
        chain = tuple(range(500, 600))
        SharedPrefixRouter(build_router("predicted_ttft", {}, 3), one).observe(
            Observation(backend="a2", at=time.monotonic(), ok=True, prefix_hashes=chain)
        )
        await eventually(lambda: shared.feeder.fed_blocks >= len(chain), 2.0)
        now = time.monotonic()
        decision = reloaded.decide(_profile(chain), _fleet(now), now)
        assert decision.chosen is not None and decision.chosen.cached_tokens == 16 * len(chain)
    finally:
        await anext(lifecycle, None)
