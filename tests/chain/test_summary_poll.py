"""The summary a gateway publishes, and the poller that reads it into the fleet snapshot."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from gateway.chain.config import ChainConfig, SummaryPollConfig
from gateway.chain.poller import SummaryPoller
from gateway.chain.report import SUMMARY_PATH, DownstreamReport
from gateway.chain.summary import build_summary
from gateway.signals.errors import SignalErrorKind
from gateway.signals.hub import SignalHub, SignalsConfig
from gateway.signals.targets import BackendTarget, Engine
from routing.policies import build_router
from routing.types import BackendKind, BackendSpec, BackendState, FleetSnapshot
from tests.signals.support import FakeClock


@dataclass
class Remote:
    """A real HTTP server answering the summary path with whatever ``reply`` holds."""

    reply: Any = None
    status: int = 200
    delay_s: float = 0.0
    seen_via: list[str] = field(default_factory=list)
    url: str = ""


@asynccontextmanager
async def remote_gateway(reply: Any) -> AsyncIterator[Remote]:
    remote = Remote(reply)

    async def handler(request: web.Request) -> web.Response:
        remote.seen_via.append(request.query.get("via", ""))
        await asyncio.sleep(remote.delay_s)
        body = remote.reply if isinstance(remote.reply, bytes) else orjson.dumps(remote.reply)
        return web.Response(status=remote.status, body=body, content_type="application/json")

    app = web.Application()
    app.router.add_get(SUMMARY_PATH, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    remote.url = f"http://127.0.0.1:{port}"
    try:
        yield remote
    finally:
        await runner.cleanup()


def _spec(name: str, kind: BackendKind, region: str = "eu", overhead: float = 10.0) -> BackendSpec:
    return BackendSpec(
        name=name,
        region=region,
        kind=kind,
        models=frozenset({"m", "n"}),
        first_token_overhead_ms=overhead,
    )


def _gateway_target(url: str, name: str = "to-eu") -> BackendTarget:
    return BackendTarget(_spec(name, BackendKind.GATEWAY), url, Engine.UNKNOWN)


SUMMARY = {
    "gateway": "eu-gw",
    "region": "eu",
    "models": {
        "m": {"ttft_ms": 25.0, "path": ["eu-gw"]},
        "n": {"ttft_ms": 90.0, "path": ["eu-gw", "ap-gw"]},
        "looped": {"ttft_ms": 5.0, "path": ["eu-gw", "us-gw"]},
        "far": {"ttft_ms": 5.0, "path": ["eu-gw", "ap-gw", "sa-gw"]},
    },
    "forwards_to": ["ap-gw"],
    "future_field": "ignored",
}


def _poller(target: BackendTarget, clock: FakeClock, **config: float) -> SummaryPoller:
    poll = SummaryPollConfig.model_validate({"timeout_s": 0.3, **config})
    return SummaryPoller([target], poll, own_id="us-gw", max_hops=3, clock=clock)


async def test_poller_keeps_usable_entries_and_names_itself_to_the_remote() -> None:
    clock = FakeClock()
    async with remote_gateway(SUMMARY) as remote:
        target = _gateway_target(remote.url)
        poller = _poller(target, clock)
        report = await poller.poll_once(target)
    assert isinstance(report, DownstreamReport)
    assert remote.seen_via == ["us-gw"]
    # "looped" leads back here; "far" would make four gateways with this one (max_hops=3).
    assert report.ttft_ms == {"m": 25.0, "n": 90.0}
    assert report.paths["n"] == ("eu-gw", "ap-gw") and report.gateway_id == "eu-gw"
    assert poller.remote_ids() == {"to-eu": "eu-gw"}
    clock.advance(61.0)  # past drop_after_s: the figures go, the id stays
    assert poller.latest("to-eu") is None and poller.reports() == {}
    assert poller.remote_ids() == {"to-eu": "eu-gw"}


async def test_poll_failures_are_values_and_keep_the_last_good_report() -> None:
    clock = FakeClock()
    async with remote_gateway(SUMMARY) as remote:
        target = _gateway_target(remote.url)
        poller = _poller(target, clock)
        assert isinstance(await poller.poll_once(target), DownstreamReport)
        outcomes = []
        for change in ({"reply": b"not json"}, {"status": 404}, {"delay_s": 1.0, "status": 200}):
            for key, value in change.items():
                setattr(remote, key, value)
            outcomes.append(await poller.poll_once(target))
    kinds = [getattr(o, "kind", None) for o in outcomes]
    assert kinds == [
        SignalErrorKind.MALFORMED,
        SignalErrorKind.HTTP_STATUS,
        SignalErrorKind.TIMEOUT,
    ]
    assert poller.last_error("to-eu") is outcomes[-1]
    latest = poller.latest("to-eu")
    assert latest is not None and latest.ttft_ms == {"m": 25.0, "n": 90.0}


async def test_a_remote_without_predictions_gives_no_figures_rather_than_no_models() -> None:
    unpredicted = {"gateway": "eu-gw", "models": {"m": {"ttft_ms": None, "path": ["eu-gw"]}}}
    async with remote_gateway(unpredicted) as remote:
        target = _gateway_target(remote.url)
        report = await _poller(target, FakeClock()).poll_once(target)
    assert isinstance(report, DownstreamReport) and report.ttft_ms is None


async def test_hub_puts_the_report_into_the_backend_state() -> None:
    async with remote_gateway(SUMMARY) as remote:
        target = _gateway_target(remote.url)
        hub = SignalHub(
            [target],
            SignalsConfig(snapshot_min_interval_ms=0.0),
            gateway_region="us",
            chain=ChainConfig(),
        )
        assert hub.gateway_id == "us-gw"
        before = hub.snapshot().backends["to-eu"]
        report = await hub.summaries.poll_once(target)
    assert before.downstream_ttft_ms is None
    state = hub.snapshot().backends["to-eu"]
    assert isinstance(report, DownstreamReport)
    assert state.downstream_ttft_ms == {"m": 25.0, "n": 90.0}
    assert state.downstream_as_of == report.as_of
    assert hub.downstream_ids() == {"to-eu": "eu-gw"}


def _fleet(reports: dict[str, DownstreamReport]) -> FleetSnapshot:
    local = BackendState(_spec("eu-1", BackendKind.DEDICATED, overhead=40.0), rtt_ms=2.0, as_of=99)
    remote = BackendState(
        _spec("to-ap", BackendKind.GATEWAY, region="ap"),
        rtt_ms=5.0,
        as_of=99.0,
        downstream_ttft_ms=reports["to-ap"].ttft_ms,
        downstream_as_of=99.0,
    )
    return FleetSnapshot({"eu-1": local, "to-ap": remote}, gateway_region="eu", taken_at=100.0)


def test_summary_reports_the_chosen_backend_and_never_leads_back_to_its_caller() -> None:
    ap = DownstreamReport("ap-gw", "ap", {"m": 1.0}, {"m": ("ap-gw",)}, frozenset(), 99.0)
    reports = {"to-ap": ap}
    fleet = _fleet(reports)
    router = build_router("predicted_ttft", {}, 0)
    ids = {"to-ap": "ap-gw"}

    def summary(callers: frozenset[str]) -> dict[str, Any]:
        built = build_summary(
            router,
            fleet,
            100.0,
            models=["m", "n", "unknown"],
            gateway_id="eu-gw",
            downstream=reports,
            downstream_ids=ids,
            callers=callers,
        )
        return built.model_dump()

    open_to_all = summary(frozenset({"us-gw"}))
    assert open_to_all["gateway"] == "eu-gw" and open_to_all["forwards_to"] == ["ap-gw"]
    assert set(open_to_all["models"]) == {"m", "n"}  # nobody serves "unknown"
    # For m the remote gateway (5 ms away, 1 ms there) beats the slow local backend.
    assert open_to_all["models"]["m"]["path"] == ["eu-gw", "ap-gw"]
    assert open_to_all["models"]["m"]["ttft_ms"] < 40.0
    # Asked by ap-gw itself: its own figure must not come back to it.
    for_ap = summary(frozenset({"ap-gw"}))
    assert for_ap["models"]["m"]["path"] == ["eu-gw"]
    assert for_ap["models"]["m"]["ttft_ms"] >= 40.0
