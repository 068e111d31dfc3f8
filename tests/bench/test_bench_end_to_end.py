"""``meridian bench`` as a user runs it: a real process against a ``meridian emulate`` process."""

import csv
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from loadtests.bench import run_bench, summarize
from loadtests.bench.workload import parse_workload
from tests.bench.emulate_process import emulate, meridian

ENGINE = {
    "decode_base_ms": 5,
    "decode_per_seq_ms": 0,
    "first_token_overhead_ms": 20,
    "prefill_tokens_per_s": 1_000_000,
}
WORKLOAD = """
name: e2e
seed: 9
model: emulated-model
arrival: {mode: closed, concurrency: 4}
limits: {requests: 12, duration_s: 120}  # the request count ends it; time is a hang guard
request_timeout_s: 60
mix:
  - {name: chat, kind: chat, weight: 2, system_prompt: {groups: 1, tokens: 128}, max_tokens: 8}
  - {name: conversation, kind: session, turns: 2, max_tokens: 6}
populations:
  - {origin: us-east, addresses: [198.51.100.10]}
  - {origin: eu-west}
"""


_meridian = meridian


@pytest.fixture
def emulator_url() -> Iterator[str]:
    argv = ["--backend", "e2e", "--model", "emulated-model"]
    for key, value in ENGINE.items():
        argv += ["--engine", f"{key}={value}"]
    with emulate(*argv) as url:
        yield url


def test_bench_run_writes_report_csv_and_plots_then_compares(emulator_url, tmp_path):
    workload = tmp_path / "e2e.yaml"
    workload.write_text(WORKLOAD)
    out = tmp_path / "run"
    argv = ["bench", "--url", emulator_url, "--workload", str(workload), "--out", str(out)]
    argv += ["--slo-ttft-ms", "2000", "--slo-itl-p99-ms", "1000", "--no-progress"]
    done = subprocess.run(_meridian(*argv), capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    assert "TTFT" in done.stdout and "by origin" in done.stdout

    report = orjson.loads((out / "report.json").read_bytes())
    assert (report["requests"], report["ok"], report["errors"]) == (12, 12, {})
    assert report["usage_reported_fraction"] == 1.0
    assert report["ttft_ms"]["p50"] >= ENGINE["first_token_overhead_ms"]
    # A client's ITL is the gap between its reads: a busy machine bunches tokens (a late read,
    # then a quick one), so its p50 has no floor a test can promise (3.9 ms for a 5 ms step was
    # seen at load 8, 0.0 at load 9). The engine's schedule does give one: no token leaves
    # before its step.
    assert 0 <= report["itl_ms"]["p50"] <= 50
    for row in csv.DictReader((out / "requests.csv").open()):
        tokens, gaps = int(row["completion_tokens"]), row["itl_gaps_ms"].split()
        floor_ms = ENGINE["first_token_overhead_ms"] + (tokens - 1) * ENGINE["decode_base_ms"]
        assert float(row["e2e_ms"]) >= floor_ms * 0.99
        # Gaps and TTFT are milliseconds on one clock: together they fit inside the e2e.
        assert float(row["ttft_ms"]) + sum(map(float, gaps)) <= float(row["e2e_ms"]) + 0.1 * tokens
    assert report["completion_tokens"] == sum(
        int(r["completion_tokens"]) for r in csv.DictReader((out / "requests.csv").open())
    )
    assert report["goodput"]["good"] == 12 and report["goodput"]["slo_ttft_ms"] == 2000
    assert set(report["by_origin"]) <= {"us-east", "eu-west"}
    assert sum(g["requests"] for g in report["by_component"].values()) == 12
    assert report["cached_tokens"] > 0  # the shared system prompt hits the prefix cache
    rows = list(csv.DictReader((out / "requests.csv").open()))
    assert len(rows) == 12 and all(row["status"] == "200" for row in rows)
    assert all(len(row["itl_gaps_ms"].split()) == int(row["completion_tokens"]) - 1 for row in rows)
    for name in ("ttft_cdf.png", "itl_cdf.png", "timeline.png"):
        assert (out / name).read_bytes().startswith(b"\x89PNG")

    report_path = str(out / "report.json")
    compared = subprocess.run(
        _meridian("bench", "compare", report_path, report_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert compared.returncode == 0, compared.stderr
    ttft_row = next(line for line in compared.stdout.splitlines() if line.startswith("ttft p50"))
    assert ttft_row.split()[-1] == "1.000"


def test_bad_workload_is_reported_with_exit_status_2(tmp_path: Path):
    workload = tmp_path / "bad.yaml"
    workload.write_text("arrival: {mode: open}\nlimits: {}\nmix: []\n")
    done = subprocess.run(
        _meridian("bench", "--url", "http://127.0.0.1:9", "--workload", str(workload)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "bad.yaml" in done.stderr and "needs 'rate'" in done.stderr


@pytest.fixture
def pacer_url() -> Iterator[str]:
    argv = [sys.executable, "-m", "loadtests.bench.pacer", "--ttft-ms", "50", "--itl-ms", "10"]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        url = orjson.loads(process.stdout.readline())["url"]
        assert orjson.loads(process.stdout.readline()) == {"ready": True}
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


async def test_pacer_timing_is_what_the_bench_measures(pacer_url):
    workload = parse_workload(
        {
            "arrival": {"mode": "closed", "concurrency": 8},
            "limits": {"requests": 16},
            "mix": [{"kind": "chat", "user_tokens": 8, "max_tokens": [1, 12]}],
        }
    )
    result = await run_bench(pacer_url, workload)
    report = summarize(result)
    assert report.ok == 16 and report.usage_reported_fraction == 1.0
    assert all(r.completion_tokens == r.max_tokens == len(r.token_times_s) for r in result.records)
    # The pacer cannot be faster than its schedule, so these lower bounds always hold; how
    # close above them the bench lands is its accuracy, a measurement on a quiet machine
    # (python -m loadtests.bench.accuracy), not something a busy test machine can promise.
    assert (report.ttft_ms.p50 or 0) >= 50
    for record in result.records:
        # Times count from sending: the last token cannot leave the pacer before its first
        # token's 50 ms and 10 ms a token after it (a late first read only shrinks the gaps).
        last_s = record.token_times_s[-1]
        assert last_s >= 0.050 + (len(record.token_times_s) - 1) * 0.010 - 0.002
    assert set(report.by_backend) == {"pacer"}
