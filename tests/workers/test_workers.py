"""``meridian serve --workers 2`` as real processes: one port, two event loops, routing as one.

An in-process emulated backend; the supervisor and its workers are subprocesses. Every wait is
on an observable event (a metric, the state route, a process exit), polled with a generous
bound that a busy machine still meets.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
import yaml

from gateway.grpc.client import inference_stub
from gateway.workers.metrics_view import merge
from gateway.workers.ports import usable_cores
from loadtests.emulator.config import EngineParams
from tests.grpc.grpc_support import OWN_CONNECTION
from tests.grpc.grpc_support import chat as grpc_chat
from tests.servers import emulators

MODEL = "workers-model"
ENGINE = EngineParams(
    decode_base_ms=2.0,
    decode_per_seq_ms=0.0,
    first_token_overhead_ms=1.0,
    prefill_tokens_per_s=1_000_000.0,
    default_output_tokens=4,
)
SLOW = ENGINE.model_copy(update={"decode_base_ms": 50.0})  # a stream that stays open a while


async def _wait_for(check: Callable[[], Awaitable[bool]], within_s: float = 60.0) -> None:
    started = time.monotonic()
    while not await check():
        if time.monotonic() - started > within_s:
            raise AssertionError(f"condition not met within {within_s}s")
        await asyncio.sleep(0.05)


class Served:
    def __init__(
        self, process: asyncio.subprocess.Process, url: str, admin_url: str, config: Path
    ) -> None:
        self.process, self.url, self.admin_url, self.config = process, url, admin_url, config
        self.grpc_target = ""  # host:port, when the config has a gRPC listener

    async def get_json(self, path: str) -> Any:
        """From the admin listener (state, metrics), which every worker binds too."""
        async with (
            aiohttp.ClientSession() as session,
            session.get(self.admin_url + path) as response,
        ):
            assert response.status == 200
            return await response.json()

    async def metrics(self) -> str:
        async with (
            aiohttp.ClientSession() as session,
            session.get(self.admin_url + "/metrics") as r,
        ):
            assert r.status == 200
            return await r.text()

    async def chat(self, max_tokens: int = 4, content: str = "hello") -> bytes:
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens,
            "stream": True,
        }
        async with (
            aiohttp.ClientSession() as session,  # a new connection: the kernel picks the worker
            session.post(self.url + "/v1/chat/completions", json=body) as response,
        ):
            assert response.status == 200
            return await response.read()


def _sample(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if (line.startswith(name + "{") or line.startswith(name + " ")) and all(
            f'{k}="{v}"' in line for k, v in labels.items()
        ):
            total += float(line.rsplit(" ", 1)[1])
    return total


@contextlib.asynccontextmanager
async def _serve(
    tmp_path: Path,
    backend_url: str,
    workers: int = 2,
    listen: dict[str, object] | None = None,
    **state: object,
) -> AsyncIterator[Served]:
    config = {
        "listen": listen or {},
        "backends": [
            {"name": "b1", "region": "local", "url": backend_url + "/v1", "models": [MODEL]}
        ],
        "state": {
            "intervals": {"flush_s": 0.02, "refresh_s": 0.2, "lease_period_s": 1.0},
            **state,
        },
    }
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    argv = [sys.executable, "-m", "gateway.cli", "serve", "--config", str(path), "--port", "0"]
    process = await asyncio.create_subprocess_exec(
        *argv, "--workers", str(workers), stdout=asyncio.subprocess.PIPE
    )
    try:
        assert process.stdout is not None
        line = (await asyncio.wait_for(process.stdout.readline(), 60)).decode()
        assert line.startswith("meridian listening on "), line
        admin = (await asyncio.wait_for(process.stdout.readline(), 60)).decode()
        assert admin.startswith("meridian admin on "), admin
        served = Served(process, line.split()[-1], admin.split()[-1], path)
        if listen and "grpc_port" in listen:
            grpc_line = (await asyncio.wait_for(process.stdout.readline(), 60)).decode()
            assert grpc_line.startswith("meridian grpc on "), grpc_line
            served.grpc_target = grpc_line.split()[-1]
        yield served
    finally:
        if process.returncode is None:
            process.terminate()
            await asyncio.wait_for(process.wait(), 60)


@pytest.fixture
async def backend_url() -> AsyncIterator[str]:
    async with emulators(MODEL, ENGINE) as make:
        yield (await make("b1")).url


async def test_two_workers_share_one_port_and_one_metrics_view(
    tmp_path: Path, backend_url: str
) -> None:
    async with _serve(tmp_path, backend_url) as served:
        sent = 0

        async def both_served() -> bool:
            nonlocal sent
            await served.chat()
            sent += 1
            page = await served.metrics()
            counts = [
                _sample(page, "meridian_requests_total", worker=w, status="200") for w in "01"
            ]
            return all(counts)

        await _wait_for(both_served)

        async def every_request_counted_by_both() -> bool:
            # a request is booked after its last byte, and a busy peer may miss a scrape
            # (PEER_TIMEOUT_S): wait for a page that has them all, never more than were sent
            page = await served.metrics()
            total = _sample(page, "meridian_requests_total", status="200")
            assert total <= sent, (total, sent)
            return _sample(page, "meridian_workers_answering") == 2 and total == sent

        await _wait_for(every_request_counted_by_both)


@pytest.mark.parametrize("engine", ["grpcio", "h2"])
async def test_one_grpc_channel_moves_between_workers_as_its_connection_ages(
    tmp_path: Path, backend_url: str, engine: str
) -> None:
    """``listen.grpc_port: 0`` with two workers: the supervisor reserves one port and says which,
    and both workers serve gRPC on it (each engine binds SO_REUSEPORT; before, an h2 worker could
    not bind it and the gateway did not start). A gRPC channel sends every call on its one
    connection, so the worker that accepted it would serve them all; with
    ``listen.grpc_connections.max_age_s`` the connection is replaced (GOAWAY; calls on it
    finish) and the kernel places each new one afresh: one channel's calls reach both workers,
    and none fails."""
    listen = {"grpc_port": 0, "grpc_engine": engine, "grpc_connections": {"max_age_s": 0.2}}
    async with _serve(tmp_path, backend_url, listen=listen) as served:
        assert int(served.grpc_target.rsplit(":", 1)[1]) > 0
        async with grpc.aio.insecure_channel(served.grpc_target, options=OWN_CONNECTION) as channel:
            stub = inference_stub(channel)

            async def both_served() -> bool:
                assert [chunk async for chunk in stub.ChatCompletion(grpc_chat(model=MODEL))]
                page = await served.metrics()
                return all(
                    _sample(
                        page, "meridian_requests_total", worker=w, protocol="grpc", status="200"
                    )
                    for w in "01"
                )

            await _wait_for(both_served)


async def test_workers_route_as_one(tmp_path: Path) -> None:
    """A stream open on one worker counts as in flight on the other; probes run once per host
    (one worker holds the backend's lease)."""
    async with emulators(MODEL, SLOW) as make:
        backend = await make("b1")
        async with _serve(tmp_path, backend.url) as served:
            states: dict[str, dict[str, Any]] = {}

            async def seen_both() -> bool:
                state = await served.get_json("/v1/meridian/state")
                states[state["health"]["replica"]] = state
                return len(states) == 2 and all(s["health"]["events_live"] for s in states.values())

            await _wait_for(seen_both)
            assert {s["health"]["backend"] for s in states.values()} == {"host"}

            async def one_leader() -> bool:
                state = await served.get_json("/v1/meridian/state")
                states[state["health"]["replica"]] = state
                leaders = [r for r, s in states.items() if s["leads"] == ["b1"]]
                return len(leaders) == 1 and all(
                    s["leads"] in ([], ["b1"]) for s in states.values()
                )

            await _wait_for(one_leader)
            stream = asyncio.ensure_future(served.chat(max_tokens=400))  # ~20 s of decoding
            try:
                await _wait_for(lambda: _stream_started(backend))

                async def other_worker_counts_it() -> bool:
                    state = await served.get_json("/v1/meridian/state")
                    return bool(state["own_in_flight"]["b1"] == 0 and state["in_flight"]["b1"])

                await _wait_for(other_worker_counts_it)
            finally:
                stream.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await stream


async def test_workers_share_the_prefix_index(tmp_path: Path, backend_url: str) -> None:
    """Prompt blocks one worker served reach the other worker's router (its prefix feed),
    through the host coordinator's events: each worker reports blocks fed from its peer."""
    async with _serve(tmp_path, backend_url) as served:
        fed: dict[str, int] = {}
        sent = 0

        async def both_fed() -> bool:
            nonlocal sent
            sent += 1  # a new prompt each time (many blocks), on a connection the kernel places
            await served.chat(content=f"request {sent}: " + "a shared document. " * 200)
            state = await served.get_json("/v1/meridian/state")
            fed[state["health"]["replica"]] = state["prefix_fed_blocks"]
            return len(fed) == 2 and all(blocks > 0 for blocks in fed.values())

        await _wait_for(both_fed)


async def test_workers_learn_from_each_others_first_tokens(
    tmp_path: Path, backend_url: str
) -> None:
    """The first tokens one worker's router learned from reach the other worker's router
    through the host coordinator (gateway/state/sample_feeder.py): each reports samples it
    published and samples fed from its peer."""
    async with _serve(tmp_path, backend_url, share_learning=True) as served:
        seen: dict[str, dict[str, int]] = {}

        async def both_learned_from_the_other() -> bool:
            await served.chat()  # on a connection the kernel places
            state = await served.get_json("/v1/meridian/state")
            seen[state["health"]["replica"]] = {
                "published": state["learning_samples_published"],
                "fed": state["learning_samples_fed"],
            }
            return len(seen) == 2 and all(s["published"] and s["fed"] for s in seen.values())

        await _wait_for(both_learned_from_the_other)


async def _stream_started(backend: Any) -> bool:
    return bool(backend.stats.running)


async def test_sighup_reloads_every_worker_and_sigterm_drains_them(
    tmp_path: Path, backend_url: str
) -> None:
    async with _serve(tmp_path, backend_url) as served:
        config = yaml.safe_load(served.config.read_text())
        config["backends"][0]["models"].append("second-model")
        served.config.write_text(yaml.safe_dump(config))
        served.process.send_signal(signal.SIGHUP)

        async def both_reloaded() -> bool:
            page = await served.metrics()
            applied = [
                _sample(page, "meridian_config_reloads_total", worker=w, outcome="applied")
                for w in "01"
            ]
            return applied == [1.0, 1.0]

        await _wait_for(both_reloaded)
        served.process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(served.process.wait(), 60) == 0


def test_merge_labels_every_sample_by_worker() -> None:
    page = (
        "# HELP meridian_x_total things\n# TYPE meridian_x_total counter\n"
        'meridian_x_total{door="http"} 3.0\n'
    )
    merged = merge([("0", page), ("1", page.replace("3.0", "4.0"))]).decode()
    assert 'meridian_x_total{door="http",worker="0"} 3.0' in merged
    assert 'meridian_x_total{door="http",worker="1"} 4.0' in merged
    assert merged.count("# TYPE meridian_x_total counter") == 1
    assert "meridian_workers_answering 2.0" in merged


def test_usable_cores_follows_a_cgroup_quota(tmp_path: Path) -> None:
    limit = tmp_path / "cpu.max"
    limit.write_text("150000 100000\n")
    assert usable_cores(limit) == min(2, usable_cores(tmp_path / "absent"))
    limit.write_text("max 100000\n")
    assert usable_cores(limit) == usable_cores(tmp_path / "absent")
