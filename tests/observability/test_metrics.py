"""Every metric docs/observability.md lists, exported and moved by real traffic through both
doors; the labels operators filter by, bounded by the config; promtool accepts the output."""

from __future__ import annotations

import asyncio
import re
import shutil
import socket
import subprocess
from pathlib import Path

import aiohttp
import orjson
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gateway.state_keys import METRICS
from loadtests.emulator.config import FaultConfig
from proto.meridian.v1 import inference_pb2 as pb
from tests.gateway.support import FAST_ENGINE, MODEL, config_for
from tests.grpc.grpc_support import MODEL as GRPC_MODEL
from tests.grpc.grpc_support import chat as grpc_chat
from tests.grpc.test_grpc_gateway import grpc_gateway
from tests.observability.support import until
from tests.servers import post_bytes

DOC = Path(__file__).resolve().parents[2] / "docs" / "observability.md"
PROMTOOL_HINT = "promtool not found: run make setup (Debian package: prometheus)"


def _documented() -> list[str]:
    """Metric names in the tables of docs/observability.md, in order."""
    names = []
    for line in DOC.read_text().splitlines():
        match = re.match(r"^\| `((?:meridian|process)_[a-z_]+)`", line)
        if match:
            names.append(match.group(1))
    return names


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _samples(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def _value(samples: Samples, name: str, **labels: str) -> float:
    """Sum of ``name``'s samples whose labels include ``labels``."""
    return sum(
        (
            value
            for (sample, have), value in samples.items()
            if sample == name and set(labels.items()) <= set(have)
        ),
        0.0,
    )


def promtool_check(text: str) -> subprocess.CompletedProcess[str]:
    promtool = shutil.which("promtool")
    assert promtool is not None, PROMTOOL_HINT
    return subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )


async def _chat(session: aiohttp.ClientSession, url: str, **body: object) -> int:
    payload = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **body}
    async with session.post(url + "/v1/chat/completions", json=payload) as response:
        await response.read()
        return response.status


async def test_request_metrics_carry_model_region_backend_door_and_promtool_accepts_them(
    emulator, gateway
) -> None:
    failing = await emulator("b1", faults=FaultConfig(error_rate=1.0))
    healthy = await emulator("b2")
    config = config_for({"b1": failing.url, "b2": healthy.url}, routing={"policy": "round_robin"})
    running = await gateway(config)
    usage = {"stream_options": {"include_usage": True}}
    async with aiohttp.ClientSession() as session:
        # round robin: b1 (fails, retried on b2), b2, b1 (retried), b2
        for _ in range(2):
            assert await _chat(session, running.url, stream=True, max_tokens=5, **usage) == 200
        assert await _chat(session, running.url, max_tokens=3) == 200
        assert await _chat(session, running.url, stream=True, max_tokens=5, **usage) == 200
        assert await _chat(session, running.url, model="not-configured") == 404
        async with session.get(running.admin_url + "/metrics") as response:
            text = await response.text()
    samples = _samples(text)
    route = {"model": MODEL, "region": "local", "backend": "b2", "door": "http"}
    assert _value(samples, "meridian_ttft_seconds_count", **route) == 3  # streams only
    assert _value(samples, "meridian_request_duration_seconds_count", **route) == 4
    assert _value(samples, "meridian_itl_seconds_count", **route) == 3 * 4  # 5 tokens, 4 gaps
    assert _value(samples, "meridian_output_tokens_total", **route) == 3 * 5 + 3
    assert _value(samples, "meridian_prompt_tokens_total", **route) > 0
    assert _value(samples, "meridian_admission_queue_time_seconds_count", **route) == 4
    assert _value(samples, "meridian_request_outcomes_total", **route, outcome="ok") == 4
    unknown = {"model": "other", "backend": "none", "outcome": "failed"}
    assert _value(samples, "meridian_request_outcomes_total", **unknown) == 1
    attempts = "meridian_attempt_outcomes_total"
    assert _value(samples, attempts, backend="b1", kind="first", outcome="5xx") == 2
    assert _value(samples, attempts, backend="b2", kind="retry", outcome="ok") == 2
    assert _value(samples, attempts, backend="b2", kind="first", outcome="ok") == 2
    assert _value(samples, "meridian_build_info", version="0.1.0", routing="interpreted") == 1
    assert _value(samples, "process_resident_memory_bytes") > 0
    assert not any(
        labels and dict(labels).get("model") == "not-configured" for _, labels in samples
    )
    result = promtool_check(text)
    assert result.returncode == 0, result.stdout + result.stderr


async def test_every_documented_metric_is_exported() -> None:
    documented = _documented()
    assert len(documented) >= 30
    async with grpc_gateway() as door:
        call = door.stub.ChatCompletion(
            grpc_chat(max_tokens=3, stream_options=pb.StreamOptions(include_usage=True))
        )
        assert [chunk async for chunk in call]
        traceresponse = dict(await call.initial_metadata())["traceresponse"]
        assert re.fullmatch(r"00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]", traceresponse)
        registry = door.gateway.app[METRICS].registry
        text = generate_latest(registry).decode()
    helps = set(re.findall(r"^# HELP (\S+)", text, re.MULTILINE))
    missing = [n for n in documented if n not in helps and n + "_total" not in helps]
    assert missing == []
    samples = _samples(text)
    route = {"model": GRPC_MODEL, "backend": "b1", "door": "grpc"}
    assert _value(samples, "meridian_ttft_seconds_count", **route) == 1
    assert _value(samples, "meridian_output_tokens_total", **route) == 3
    # The default policy predicts TTFT: calibration per backend.
    assert _value(samples, "meridian_ttft_predicted_seconds_count", backend="b1") == 1
    assert _value(samples, "meridian_ttft_prediction_error_ratio_count", backend="b1") == 1
    assert promtool_check(text).returncode == 0


async def _stuck_reader(host: str, port: int, release: asyncio.Event) -> None:
    """A client that sends a streaming request and then reads nothing until ``release``."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, (host, port))
    body = orjson.dumps(
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
            "max_tokens": 20000,
        }
    )
    await loop.sock_sendall(sock, post_bytes(host, "/v1/chat/completions", body))
    await release.wait()
    sock.close()


async def test_stream_buffer_metrics_show_a_stream_stuck_behind_a_slow_reader(
    emulator, gateway
) -> None:
    """Regression: the peak and the per-stream histogram stayed 0 while streams were stuck."""
    backend = await emulator("b1", engine=FAST_ENGINE.model_copy(update={"decode_base_ms": 0.5}))
    running = await gateway(
        config_for({"b1": backend.url}, streams={"buffer_bytes": 65536, "write_timeout_s": 60.0})
    )
    registry = running.app[METRICS].registry
    release = asyncio.Event()
    reader = asyncio.ensure_future(_stuck_reader(running.host, running.port, release))

    def gauge(name: str) -> float:
        return registry.get_sample_value(name) or 0.0

    try:
        # While the stream is still stuck: the live gauges see what it holds.
        await until(lambda: gauge("meridian_stream_buffer_bytes") > 16384)
        assert gauge("meridian_streams_open") == 1
        assert gauge("meridian_stream_buffer_peak_bytes") >= gauge("meridian_stream_buffer_bytes")
    finally:
        release.set()
        await reader
    await until(lambda: gauge("meridian_stream_buffer_max_bytes_count") == 1)
    assert gauge("meridian_stream_buffer_max_bytes_sum") > 16384
    assert gauge("meridian_streams_open") == 0 and gauge("meridian_stream_buffer_bytes") == 0
    assert gauge("meridian_stream_buffer_peak_bytes") > 16384
