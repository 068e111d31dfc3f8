"""``meridian sim --replay``: the trace format, its importers, and a replay end to end."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import orjson
import pytest

from loadtests.bench.output import write_requests_csv
from loadtests.bench.plan import Planner, request_body
from loadtests.bench.records import RequestRecord
from loadtests.bench.workload import load_workload
from loadtests.sim.cli import main
from loadtests.sim.loop import simulate
from loadtests.sim.replay_fleet import replay_fleet
from loadtests.sim.replay_follow import replay_following
from loadtests.sim.replay_import import from_bench_csv, from_request_log, load_any
from loadtests.sim.replay_trace import (
    FIRST_ARRIVAL_S,
    Recorded,
    ReplayTrace,
    TraceFile,
    TraceFormatError,
    TraceLine,
    read_trace,
    write_trace,
)
from loadtests.sim.summary import summarize
from routing.profile import profile_from_chat
from routing.types import LatencyClass

SHIPPED = Path("loadtests/traces/bench-three-region-predicted_ttft.trace.jsonl")
FLEET = Path("loadtests/fleets/three-region.yaml")
WORKLOAD = Path("loadtests/workloads/chat-shared-prefix.yaml")


def test_a_trace_round_trips_and_holds_no_prompt_text(tmp_path: Path) -> None:
    line = TraceLine(
        t_s=1.5, prompt_tokens=100, output_tokens=7, origin="eu-west", tenant="acme",
        prefix_hashes=(1, 2**64 - 1), latency_class=LatencyClass.LONG_FORM,
        ttft_objective_ms=500.0, recorded=Recorded("b1", 40.0, 300.0, 64, 200),
    )  # fmt: skip
    path = tmp_path / "t.jsonl"
    write_trace(path, TraceFile((line, TraceLine(0.5, 10, 1)), source="test"))
    back = read_trace(path)
    assert back.lines == (TraceLine(0.5, 10, 1), line)  # sorted by arrival
    assert back.source == "test" and back.block_tokens == 16
    header = orjson.loads(path.read_bytes().splitlines()[0])
    assert header == {
        "format": "meridian-trace",
        "version": 2,
        "block_tokens": 16,
        "source": "test",
    }


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty file"),
        (b'{"format": "other"}\n', "not a meridian-trace file"),
        (b'{"format": "meridian-trace", "version": 3}\n', "version 3; this reader knows 1..2"),
        (b'{"format": "meridian-trace", "version": 1}\n{"t_s": 1}\n', ":2: 'prompt_tokens'"),
        (b'{"format": "meridian-trace", "version": 1}\nnope\n', ":2: not JSON"),
        (
            b'{"format": "meridian-trace", "version": 1}\n'
            b'{"t_s": 1, "prompt_tokens": 1, "output_tokens": 1, "prefix_hashes": ["xyz"]}\n',
            "hex strings",
        ),
    ],
)
def test_a_bad_trace_names_the_file_and_line(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    with pytest.raises(TraceFormatError, match=message):
        read_trace(path)


def _record(
    index: int, session: int, error: bool = False, timing: str | None = None
) -> RequestRecord:
    return RequestRecord(
        index=index, session=session, turn=0, component="support-chat", origin="eu-west",
        tenant="acme", scheduled_s=0.1 * index, sent_s=0.1 * index + 0.01, ttft_s=0.05,
        e2e_s=1.0, prompt_tokens=1100, completion_tokens=0 if error else 80,
        cached_tokens=1024, status=500 if error else 200,
        route="region=us-east; backend=us-east-dedicated; kind=dedicated", max_tokens=80,
        server_timing=timing,
    )  # fmt: skip


def test_a_bench_csv_becomes_a_trace_with_the_prefix_hashes_the_gateway_computed(
    tmp_path: Path,
) -> None:
    csv_path = tmp_path / "requests.csv"
    records = [
        _record(0, 3),
        _record(1, 4, error=True),
        _record(2, 5, timing="gw;dur=1, ttft;dur=42.5"),
    ]
    write_requests_csv(records, csv_path)
    trace = from_bench_csv(csv_path, WORKLOAD)
    assert [line.t_s for line in trace.lines] == [pytest.approx(0.01), pytest.approx(0.21)]
    plan = Planner(load_workload(WORKLOAD)).session(3)
    expected = profile_from_chat(request_body(plan, 0, [], user_field=False), plan.tenant)
    first = trace.lines[0]
    assert first.prefix_hashes == expected.prefix_hashes and first.prefix_hashes
    assert first.recorded is not None and first.recorded.backend == "us-east-dedicated"
    assert first.output_tokens == 80 and first.tenant == "acme" and first.origin == "eu-west"
    assert first.recorded.ttft_ms == 50.0  # the client's, when the gateway's is not there
    second = trace.lines[1].recorded
    assert second is not None and second.ttft_ms == 42.5  # the gateway's own ttft entry
    assert from_bench_csv(csv_path).lines[0].prefix_hashes == ()  # no workload: no hashes


def test_a_request_log_becomes_a_trace(tmp_path: Path) -> None:
    log = tmp_path / "gateway.log"
    lines = [
        {"time": "2026-12-01T10:00:01.000Z", "logger": "meridian.request", "msg": "request",
         "tenant": "acme", "origin": "us-east", "route": {"backend": "b1"}, "ttft_ms": 40.0,
         "e2e_ms": 500.0, "prompt_tokens": 900, "cached_tokens": 512, "completion_tokens": 30,
         "status": 200},
        {"time": "2026-12-01T10:00:02.000Z", "logger": "meridian.request", "msg": "request",
         "route": None, "e2e_ms": 3.0, "status": 503},
        {"time": "2026-12-01T10:00:03.000Z", "logger": "meridian.relay", "msg": "other"},
    ]  # fmt: skip
    log.write_bytes(b"\n".join(orjson.dumps(x) for x in lines) + b"\nnot json\n")
    trace = load_any(log)
    assert len(trace.lines) == 1
    only = trace.lines[0]
    assert only.t_s == 0.0 and only.prompt_tokens == 900 and only.tenant == "acme"
    assert only.recorded == Recorded("b1", 40.0, 500.0, 512, 200)
    log.write_bytes(orjson.dumps(lines[1]) + b"\n")
    with pytest.raises(TraceFormatError, match=r"no 'meridian\.request' lines"):
        from_request_log(log)


def test_the_shipped_trace_replays_on_its_fleet_and_is_compared_with_the_recording(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = read_trace(SHIPPED)
    assert len(trace.lines) == 40 and all(line.recorded for line in trace.lines)
    code = main([
        "--replay", str(SHIPPED), "--fleet", str(FLEET), "--policies",
        "predicted_ttft,round_robin", "--no-plots", "--out", str(tmp_path),
        "--save-trace", str(tmp_path / "copy.jsonl"), "--objective-ms", "800",
    ])  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out
    assert "recorded: TTFT p50" in out and "replay round_robin" in out
    result = orjson.loads((tmp_path / "results.json").read_bytes())
    rr = next(p for p in result["policies"] if p["policy"] == "round_robin")
    assert sum(rr["per_backend_requests"].values()) == 40
    copied = read_trace(tmp_path / "copy.jsonl").lines
    assert [line.ttft_objective_ms for line in copied] == [800.0] * 40
    assert [line.prefix_hashes for line in copied] == [line.prefix_hashes for line in trace.lines]
    assert result["slo"]["policies"][0]["objective_requests"] == 40


def test_replay_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--replay", str(SHIPPED)]) == 2
    assert "--replay needs --fleet" in capsys.readouterr().err
    assert main([]) == 2
    assert main(["--replay", str(tmp_path / "none.jsonl"), "--fleet", str(FLEET)]) == 2
    assert "cannot read" in capsys.readouterr().err
    fleet = replay_fleet(FLEET, None, "mars", 10.0)
    assert isinstance(fleet, str) and "'mars' is not in its regions" in fleet


def test_a_replay_trace_defaults_unknown_origins_to_the_gateway_region() -> None:
    file = TraceFile((TraceLine(2.0, 10, 3, origin="nowhere"), TraceLine(5.0, 10, 3)))
    trace = ReplayTrace(file, ["us-east", "eu-west"], "eu-west")
    assert trace.origins.tolist() == [1, 1] and trace.span_s == pytest.approx(3.001)
    assert len(trace) == 2
    first = next(trace.requests())
    assert (
        first.at == pytest.approx(FIRST_ARRIVAL_S)
        and first.origin == "eu-west"
        and first.max_tokens == 3
    )


def test_a_round_robin_recording_replays_to_its_own_split_and_ttft() -> None:
    """The shipped round-robin recording: a static policy's replay reproduces its split exactly
    and its TTFT p50 within 15% (docs/replay.md); the simulator is deterministic."""
    recorded = read_trace(Path("loadtests/traces/bench-three-region-round_robin.trace.jsonl"))
    fleet = replay_fleet(FLEET, Path("loadtests/traces/three-region-priced.yaml"), None, 40.0)
    assert not isinstance(fleet, str) and fleet.recorded_policy == "round_robin"
    trace = ReplayTrace(recorded, fleet.scenario.regions, fleet.gateway_region)
    summary = summarize(simulate(fleet.scenario, trace, "round_robin"), trace)
    counts: dict[str, int] = {}
    for line in recorded.lines:
        assert line.recorded is not None and line.recorded.backend is not None
        counts[line.recorded.backend] = counts.get(line.recorded.backend, 0) + 1
    assert dict(summary.per_backend_requests) == counts
    ttfts = [line.recorded.ttft_ms for line in recorded.lines if line.recorded]
    recorded_p50 = float(np.percentile([t for t in ttfts if t is not None], 50))
    assert abs(summary.ttft_p50_ms / recorded_p50 - 1.0) <= 0.15


def _split(backends: list[str | None]) -> dict[str, float]:
    named = [b for b in backends if b]
    return {b: named.count(b) / len(named) for b in set(named)}


def test_an_adaptive_recording_replays_to_its_split_once_the_router_starts_where_it_was() -> None:
    """The shipped predicted_ttft recording (a warm gateway): a replay that follows the recorded
    routes for its first 10 s (``replay_following``: the replay's router then holds what the
    recording's had learned) reproduces the split of the requests after them within 5 pp and
    their TTFT p50 within 15% (docs/replay.md); deterministic, as the simulator is."""
    recorded = read_trace(
        Path("loadtests/traces/bench-three-region-predicted_ttft-warm.trace.jsonl")
    )
    config = Path("loadtests/traces/three-region-priced.yaml")
    fleet = replay_fleet(FLEET, config, None, recorded.lines[-1].t_s)
    assert not isinstance(fleet, str)
    trace = ReplayTrace(recorded, fleet.scenario.regions, fleet.gateway_region)
    run = replay_following(fleet.scenario, trace, "predicted_ttft", 10.0)
    after = [i for i, line in enumerate(recorded.lines) if line.t_s - recorded.lines[0].t_s >= 10]
    assert len(after) == 164
    outcomes = [recorded.lines[i].recorded for i in after]
    assert all(r is not None and r.ttft_ms is not None for r in outcomes)
    theirs = _split([r.backend for r in outcomes if r is not None])
    mine = _split([run.backends[run.results.backend[i]].name for i in after])
    assert max(abs(mine.get(b, 0.0) - theirs.get(b, 0.0)) for b in {*mine, *theirs}) <= 0.05
    ttft = [r.ttft_ms for r in outcomes if r is not None and r.ttft_ms is not None]
    ratio = np.percentile(run.results.ttft_ms[after], 50) / np.percentile(ttft, 50)
    assert abs(ratio - 1.0) <= 0.15


def test_meridian_sim_follows_the_recording_when_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main([
        "--replay", "loadtests/traces/bench-three-region-predicted_ttft-warm.trace.jsonl",
        "--fleet", str(FLEET), "--policies", "predicted_ttft", "--no-plots",
        "--out", str(tmp_path), "--follow-recorded", "10",
    ])  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out
    assert "after following the recorded routes:" in out
    found = re.search(
        r"replay predicted_ttft +from 10.2 s, 164 requests: split off by at most ([0-9.]+) pp", out
    )
    assert found is not None and float(found.group(1)) <= 5.0


def test_a_followed_request_teaches_the_router_its_recorded_first_token_time() -> None:
    """While following, the router learns the recorded TTFT, not the simulated one: a
    recording whose us-east answers took a second more makes the replay avoid us-east after
    the window; the same routes with their own times do not."""
    recorded = read_trace(
        Path("loadtests/traces/bench-three-region-predicted_ttft-warm.trace.jsonl")
    )
    fleet = replay_fleet(FLEET, Path("loadtests/traces/three-region-priced.yaml"), None, 40.0)
    assert not isinstance(fleet, str)
    slow = "us-east-dedicated"
    lines = tuple(
        dataclasses.replace(
            line,
            recorded=dataclasses.replace(
                line.recorded, ttft_ms=(line.recorded.ttft_ms or 0) + 1000
            ),
        )
        if line.recorded is not None and line.recorded.backend == slow
        else line
        for line in recorded.lines
    )
    shares = []
    for trace_file in (recorded, dataclasses.replace(recorded, lines=lines)):
        trace = ReplayTrace(trace_file, fleet.scenario.regions, fleet.gateway_region)
        run = replay_following(fleet.scenario, trace, "predicted_ttft", 10.0)
        after = [
            i for i, line in enumerate(trace_file.lines)
            if 10.0 <= line.t_s - trace_file.lines[0].t_s < 15.0
        ]  # fmt: skip
        chosen = [run.backends[run.results.backend[i]].name for i in after]
        shares.append(chosen.count(slow) / len(chosen))
    assert shares[0] > 0.7 and shares[1] < 0.2
