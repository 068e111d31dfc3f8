"""Replicas of one region learn from each other's first tokens (gateway/state/sample_feeder.py,
routing.peer_learning): one replica's answers move the other's predictions, through a real
store (in memory, and Redis pub/sub with its wire encoding). Other regions' samples, and
policies that learn nothing, take no part."""

from __future__ import annotations

import time

import orjson
import pytest

from gateway.state.errors import StateUnavailable
from gateway.state.records import WriteBatch, decode_batch, encode_batch
from gateway.state.samples import LearningSample
from gateway.state.wiring import SharedState
from routing.learned_columns import LearnedFrame
from routing.policies import build_router
from routing.types import (
    BackendKind,
    BackendSpec,
    BackendState,
    FirstToken,
    FleetSnapshot,
    PolicyRouter,
    RequestProfile,
    first_token_observer,
)
from tests.state.conftest import SyncFactory, eventually

pytestmark = pytest.mark.parametrize("store_kind", ["memory", "redis"])

SPECS = {
    name: BackendSpec(name=name, region="r", kind=BackendKind.DEDICATED, models=frozenset({"m"}))
    for name in ("a1", "a2")
}
EXTRA_MS = 300.0  # a1's path, slower than any probe says


def _fleet(now: float) -> FleetSnapshot:
    backends = {
        n: BackendState(spec=s, rtt_ms=1.0, rtt_as_of=now, as_of=now) for n, s in SPECS.items()
    }
    return FleetSnapshot(backends=backends, gateway_region="r", taken_at=now)


def _predicted_a1(router: PolicyRouter) -> float:
    now = time.monotonic()
    decision = router.decide(RequestProfile(model="m"), _fleet(now), now)
    assert decision.chosen is not None
    router.release(decision.chosen.backend)
    ranked = {c.backend: c.predicted_ttft_ms for c in decision.ranked}
    value = ranked["a1"]
    assert value is not None
    return value


def _serve_a1(router: PolicyRouter, count: int) -> None:
    """``count`` requests routed to a1 and answered ``EXTRA_MS`` late."""
    only_a1 = RequestProfile(model="m", exclude=frozenset({"a2"}))
    observer = first_token_observer(router)
    assert observer is not None
    for _ in range(count):
        now = time.monotonic()
        chosen = router.decide(only_a1, _fleet(now), now).chosen
        assert chosen is not None and chosen.predicted_ttft_ms is not None
        terms = dict(chosen.terms_ms)
        ttft = sum(terms.values()) - terms["bias"] + EXTRA_MS
        observer.observe_first_token(FirstToken("a1", time.monotonic(), ttft, terms,
            predicted_ttft_ms=chosen.predicted_ttft_ms))  # fmt: skip
        router.release("a1")


async def _replicas(
    make_sync: SyncFactory, receiver_region: str = "us"
) -> tuple[PolicyRouter, SharedState, PolicyRouter]:
    one, two = await make_sync("g1"), await make_sync("g2")
    # Samples are published, not stored: only a subscribed replica gets them.
    await eventually(lambda: one.health().events_live and two.health().events_live, 30.0)
    sender = SharedState(one, list(SPECS), None, True, "us", share_learning=True)
    receiver = SharedState(two, list(SPECS), None, True, receiver_region, share_learning=True)
    return (
        sender.wrap_router(build_router("predicted_ttft", {}, 1)),
        receiver,
        receiver.wrap_router(build_router("predicted_ttft", {}, 2)),
    )


async def test_one_replicas_answers_move_the_other_replicas_predictions(
    make_sync: SyncFactory,
) -> None:
    serving, receiver, peer = await _replicas(make_sync)
    before = _predicted_a1(peer)  # a router re-expresses samples once it has a fleet
    _serve_a1(serving, 6)
    await eventually(lambda: receiver.samples.queued + receiver.samples.fed >= 6, 30.0)
    receiver.samples.drain()
    assert _predicted_a1(peer) >= before + 0.9 * EXTRA_MS
    assert abs(_predicted_a1(peer) - _predicted_a1(serving)) <= 5.0
    assert peer.decide(RequestProfile(model="m"), _fleet(time.monotonic()),
                       time.monotonic()).chosen.backend == "a2"  # type: ignore[union-attr]  # fmt: skip


async def test_another_regions_samples_are_not_learned(make_sync: SyncFactory) -> None:
    serving, receiver, peer = await _replicas(make_sync, receiver_region="eu")
    before = _predicted_a1(peer)
    _serve_a1(serving, 6)
    await eventually(lambda: receiver.samples.other_region >= 6, 30.0)
    assert receiver.samples.drain() == 0
    assert _predicted_a1(peer) == pytest.approx(before, abs=1.0)


async def test_nothing_is_shared_when_sharing_is_off_or_the_policy_learns_nothing(
    make_sync: SyncFactory,
) -> None:
    one, two = await make_sync("g1"), await make_sync("g2")
    await eventually(lambda: one.health().events_live and two.health().events_live, 30.0)
    receiver = SharedState(two, list(SPECS), None, True, "us", share_learning=True)
    receiver.wrap_router(build_router("predicted_ttft", {}, 2))
    off = SharedState(one, list(SPECS), None, True, "us")  # off by default
    _serve_a1(off.wrap_router(build_router("predicted_ttft", {}, 1)), 3)
    plain = SharedState(one, list(SPECS), None, True, "us", share_learning=True)
    plain.wrap_router(build_router("round_robin", {}, 1))
    assert plain.samples.learner is None and off.samples.learner is None
    plain.fleet.note_in_flight("a2", +1)  # a marker, flushed after anything queued before it
    await eventually(lambda: two.snapshot().in_flight("a2") == 1, 30.0)
    assert receiver.samples.queued == 0 and receiver.samples.fed == 0


def test_samples_cross_the_wire_whole_and_a_malformed_one_is_a_protocol_error(
    store_kind: str,
) -> None:
    sample = LearningSample(
        "us", "a1", 1700000000.25, 412.5, LearnedFrame(9000.0, 1.25, 21.0),
        {"rtt": 2.0, "prefill": 40.0, "bias": 3.5}, 401.0, 512, 256, 12.0, False,
    )  # fmt: skip
    batch = WriteBatch(replica="g1", at=1.0, samples=(sample,))
    assert decode_batch(encode_batch(batch)).samples == (sample,)
    bare = LearningSample("", "a2", 1.0, 5.0, LearnedFrame(1.0, 1.0, 1.0))
    assert decode_batch(encode_batch(WriteBatch("g1", 1.0, samples=(bare,)))).samples == (bare,)
    legacy = orjson.loads(encode_batch(WriteBatch("g1", 1.0)))
    del legacy["l"]  # a replica of an earlier release
    assert decode_batch(orjson.dumps(legacy)).samples == ()
    broken = orjson.loads(encode_batch(batch))
    broken["l"][0] = broken["l"][0][:5]
    with pytest.raises(StateUnavailable):
        decode_batch(orjson.dumps(broken))
