"""``loadtests.python_relay`` (bench_peers' floors of a Python relay, on its own protocol and
behind aiohttp's web server) on real processes: the mock backend behind it, the lean client in
front, every stream relayed whole."""

from __future__ import annotations

import pytest

from loadtests.bench.lean_client import run_lean
from loadtests.bench.overhead_setup import overhead_workload
from loadtests.bench.workload import parse_workload
from loadtests.peer_servers import python_relay
from loadtests.processes import mock_backend

MODEL = "relay-model"


@pytest.mark.parametrize("server", ["protocol", "aiohttp"])
async def test_the_relay_passes_every_stream_through_whole(server: str) -> None:
    workload = overhead_workload(4, 40)
    workload["model"] = MODEL
    async with mock_backend(MODEL, 5.0, 1.0) as (backend_url, _):
        direct = await run_lean(backend_url, parse_workload(workload))
        async with python_relay(backend_url, server) as (url, _):
            relayed = await run_lean(url, parse_workload(workload))
    assert len(relayed.records) == 40
    for through, straight in zip(relayed.records, direct.records, strict=True):
        assert through.ok, through.error_detail
        assert through.status == 200
        assert len(through.token_times_s) == len(straight.token_times_s) > 0
        assert through.completion_tokens == straight.completion_tokens
