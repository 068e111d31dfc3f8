"""Configuration can correct the probes' RTT where their path is not the requests' (issue 14)."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import ValidationError

from gateway.signals.hub import SignalHub
from gateway.signals.rtt_policy import RttPolicy, believed, routed_rtt
from gateway.signals.targets import Engine
from routing.types import BackendState
from tests.signals.support import canned_backend, target
from tests.signals.test_hub import fast_config, wait_for


async def test_pinned_offset_and_health_only_rtts_reach_the_snapshot() -> None:
    async with canned_backend() as server:
        policies = {
            "plain": RttPolicy(),
            "offset": RttPolicy(offset_ms=80.0),
            "health": RttPolicy(probes="health_only", offset_ms=5.0),
            "pinned": RttPolicy(pin_ms=215.0),
        }
        regions = {"plain": "us", "offset": "eu", "health": "ap", "pinned": "sa"}
        targets = [
            dataclasses.replace(
                target(name, server.url, Engine.VLLM, region=regions[name]), rtt=policy
            )
            for name, policy in policies.items()
        ]
        hub = SignalHub(targets, fast_config(), region_rtt_ms={"ap": 160.0, "sa": 90.0})
        await hub.start()
        await wait_for(
            lambda s: all(s.backends[n].rtt_ms is not None for n in ("plain", "offset")), hub
        )
        await hub.stop()
        # stopped: no probe lands between the snapshot and the probes' own summaries
        snap = hub.snapshot()
        probed = dict(hub.prober.summaries())
    plain, offset = snap.backends["plain"].rtt_ms, snap.backends["offset"].rtt_ms
    # Each its own probe of one loopback server (however slow a busy machine made it): the
    # offset one is routed 80 ms further than its probe measured, the plain one as measured.
    raw_plain, raw_offset = probed["plain"].rtt_ms, probed["offset"].rtt_ms
    assert plain is not None and plain == raw_plain
    assert offset is not None and raw_offset is not None and offset == raw_offset + 80.0
    assert snap.backends["health"].rtt_ms == 165.0  # the region's configured RTT + offset
    assert snap.backends["pinned"].rtt_ms == 215.0
    # The health-only probe (a 1 ms edge, say) does not overwrite the region's RTT either.
    assert snap.region_rtt_ms["ap"] == 160.0 and snap.region_rtt_ms["us"] == plain


def test_health_only_without_a_region_rtt_leaves_it_unknown_and_bad_config_is_named() -> None:
    state = BackendState(spec=target("x", "http://127.0.0.1:9").spec, rtt_ms=1.0, rtt_as_of=3.0)
    unknown = routed_rtt(state, RttPolicy(probes="health_only"), None, 5.0)
    assert unknown.rtt_ms is None and unknown.rtt_as_of is None
    assert routed_rtt(state, RttPolicy(), None, 5.0) is state
    assert "pinned" in RttPolicy(pin_ms=1.0).source and "offset" in RttPolicy(offset_ms=2).source
    assert RttPolicy(probes="health_only").source.startswith("region")
    with pytest.raises(ValidationError, match="probes"):
        RttPolicy.model_validate({"probes": "sometimes"})


def test_explain_says_whether_it_follows_the_probes_or_the_requests() -> None:
    state = BackendState(spec=target("x", "http://127.0.0.1:9").spec, rtt_ms=1.0, rtt_as_of=3.0)
    follows = believed({"rtt": 1.0, "bias": 79.0}, state)
    assert follows.startswith("requests") and "+79 ms" in follows and "probes" in follows
    agrees = believed({"rtt": 80.0, "bias": 3.0}, None)
    assert agrees.startswith("configuration") and "agree" in agrees
