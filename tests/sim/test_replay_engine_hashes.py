"""A replay's engines cache a prompt for every tenant, as real engines (and the emulator) do,
while its router keeps tenants apart as the gateway does (``engine_prefix_hashes``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from loadtests.bench.output import write_requests_csv
from loadtests.bench.plan import Planner, request_body
from loadtests.bench.records import RequestRecord
from loadtests.bench.workload import load_workload
from loadtests.sim.replay_fleet import replay_fleet
from loadtests.sim.replay_follow import Follow, following
from loadtests.sim.replay_import import from_bench_csv
from loadtests.sim.replay_trace import ReplayTrace, TraceFile, read_trace, write_trace
from routing.profile import profile_from_chat

WORKLOAD = Path("loadtests/workloads/chat-shared-prefix.yaml")
WARM = Path("loadtests/traces/bench-three-region-predicted_ttft-warm.trace.jsonl")


def _record(session: int, tenant: str) -> RequestRecord:
    return RequestRecord(
        index=session, session=session, turn=0, component="support-chat", origin="us-east",
        tenant=tenant, scheduled_s=0.1 * session, sent_s=0.1 * session, ttft_s=0.05, e2e_s=1.0,
        prompt_tokens=1100, completion_tokens=8, cached_tokens=1024, status=200,
        route="region=us-east; backend=us-east-dedicated; kind=dedicated", max_tokens=8,
    )  # fmt: skip


def test_a_bench_csv_keeps_the_gateways_chain_and_the_engines(tmp_path: Path) -> None:
    planner = Planner(load_workload(WORKLOAD))
    sessions = [s for s in range(40) if planner.session(s).tenant != "default"][:6]
    csv_path = tmp_path / "requests.csv"
    write_requests_csv([_record(s, planner.session(s).tenant) for s in sessions], csv_path)
    trace = from_bench_csv(csv_path, WORKLOAD)
    for line, session in zip(trace.lines, sessions, strict=True):
        plan = planner.session(session)
        body = request_body(plan, 0, [], user_field=False)
        assert line.prefix_hashes == profile_from_chat(body, plan.tenant).prefix_hashes
        assert line.engine_prefix_hashes == profile_from_chat(body, "default").prefix_hashes
        assert line.engine_prefix_hashes[0] != line.prefix_hashes[0]
    write_trace(tmp_path / "t.jsonl", trace)
    assert read_trace(tmp_path / "t.jsonl").lines == trace.lines


def _without_engine_chains(trace: TraceFile) -> TraceFile:
    lines = tuple(dataclasses.replace(ln, engine_prefix_hashes=()) for ln in trace.lines)
    return dataclasses.replace(trace, lines=lines)


def test_following_every_recorded_route_the_engines_cache_what_the_live_ones_did() -> None:
    """Recording 4 sent both tenants' requests with one system prompt to one backend: the live
    engine served the second tenant's from cache. Replayed along the recorded routes, every
    request finds as many cached tokens as it did live; with the gateway's (tenant-salted)
    chains on the engines, some find none."""
    recorded = read_trace(WARM)
    fleet = replay_fleet(Path("loadtests/fleets/three-region.yaml"), None, "us-east", 40.0)
    assert not isinstance(fleet, str)
    live = np.asarray([ln.recorded.cached_tokens if ln.recorded else -1 for ln in recorded.lines])
    misses = []
    for trace_file in (recorded, _without_engine_chains(recorded)):
        trace = ReplayTrace(trace_file, fleet.scenario.regions, fleet.gateway_region)
        run = following(fleet.scenario, trace, "predicted_ttft", Follow(seconds=1e9)).run()
        misses.append(int((run.results.cached_tokens != live).sum()))
    assert misses[0] == 0 and misses[1] > 0
