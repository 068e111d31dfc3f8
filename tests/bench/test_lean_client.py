"""The overhead benchmarks' cheap parts on real processes: ``loadtests.mock_backend`` as a
subprocess, driven by the lean load generator and by ``run_bench`` (aiohttp), which must
observe the same streams."""

from __future__ import annotations

import itertools

import aiohttp
import pytest

from loadtests.bench.lean_client import run_lean
from loadtests.bench.overhead_setup import overhead_workload
from loadtests.bench.plan import poisson_arrivals
from loadtests.bench.records import ErrorKind
from loadtests.bench.runner import BenchOptions, run_bench
from loadtests.bench.workload import parse_workload
from loadtests.processes import mock_backend

MODEL = "lean-model"
TTFT_MS, ITL_MS = 20.0, 1.0


def _closed(concurrency: int, requests: int) -> dict[str, object]:
    workload = overhead_workload(concurrency, requests)
    workload["model"] = MODEL
    return workload


async def test_lean_and_aiohttp_clients_see_the_same_streams() -> None:
    workload = parse_workload(_closed(4, 24))
    async with mock_backend(MODEL, TTFT_MS, ITL_MS) as (url, _):
        lean = await run_lean(url, workload)
        reference = await run_bench(url, workload, BenchOptions(max_connections=4))
    for result in (lean, reference):
        assert len(result.records) == 24
        assert [r.index for r in result.records] == list(range(24))
        for record in result.records:
            assert record.ok, record.error_detail
            assert record.status == 200
            assert len(record.token_times_s) == 16  # max_tokens of the overhead workload
            # libuv's timers count whole milliseconds: the first token may come ~1 ms early
            assert record.ttft_s is not None and record.ttft_s >= (TTFT_MS - 2) / 1000
            assert record.usage_reported and record.completion_tokens == 16
    assert [r.prompt_tokens for r in lean.records] == [r.prompt_tokens for r in reference.records]


async def test_open_loop_sends_on_the_seeded_poisson_schedule() -> None:
    data = _closed(1, 20)
    data["arrival"] = {"mode": "open", "rate": 400}
    workload = parse_workload(data)
    async with mock_backend(MODEL, TTFT_MS, ITL_MS) as (url, _):
        result = await run_lean(url, workload)
    offsets = list(itertools.islice(poisson_arrivals(400, workload.seed), 20))
    assert [r.index for r in result.records] == list(range(20))
    assert result.mode == "open"
    for record, offset in zip(result.records, offsets, strict=True):
        assert record.ok, record.error_detail
        assert len(record.token_times_s) == 16
        assert record.scheduled_s == pytest.approx(offset)
        assert record.sent_s >= record.scheduled_s


async def test_an_error_status_is_recorded_not_raised() -> None:
    workload = parse_workload(_closed(2, 4))
    async with mock_backend(MODEL) as (url, _):
        result = await run_lean(url + "/nowhere", workload)  # -> /nowhere/v1/chat/completions
        assert len(result.records) == 4
        for record in result.records:
            assert record.status == 404
            assert record.error is ErrorKind.HTTP_STATUS
            assert "not found" in record.error_detail
        # the connection stayed usable: the same server still streams
        ok = await run_lean(url, parse_workload(_closed(1, 2)))
        assert all(r.ok for r in ok.records)


async def test_a_refused_connection_is_a_connect_error() -> None:
    async with mock_backend(MODEL) as (url, _):
        pass  # the server is gone once its context has closed
    result = await run_lean(url, parse_workload(_closed(1, 2)))
    assert [r.error for r in result.records] == [ErrorKind.CONNECT, ErrorKind.CONNECT]


async def test_the_mock_answers_probes_and_metrics() -> None:
    async with mock_backend(MODEL) as (url, _), aiohttp.ClientSession() as session:
        async with session.get(url + "/v1/models") as response:
            assert response.status == 200
            assert (await response.json())["data"][0]["id"] == MODEL
        async with session.get(url + "/metrics") as response:
            assert "vllm:num_requests_running" in await response.text()
        body = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
        async with session.post(url + "/v1/chat/completions", json=body) as response:
            assert response.status == 400  # it only streams, and says so
        async with session.post(url + "/v1/chat/completions", data=b"[not json") as response:
            assert response.status == 400
