"""``meridian state inspect`` against a real redis-server holding real replica state."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from gateway.commands.state import main
from gateway.state.sync import SharedStateSync
from tests.redis_server import RedisServer
from tests.state.conftest import eventually, fast_config


async def test_inspect_summarises_replicas_leases_in_flight_and_prefix(
    redis_server: RedisServer, tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = fast_config("redis", redis_server)
    sync = SharedStateSync.from_config(config, replica_id="r1")
    sync.contend(["probe:a1"])
    await sync.start()
    try:
        sync.note_in_flight("a1", +2)
        sync.note_prefix("a1", list(range(10)))
        await eventually(
            lambda: not sync.health().degraded and sync.health().pending_blocks == 0, 3
        )
        await eventually(lambda: sync.health().leases_held == ("probe:a1",), 3)
        config_file = tmp_path / "gateway.yaml"
        config_file.write_text(
            f"state:\n  backend: redis\n  url: {redis_server.url}\n  key_prefix: {config.key_prefix}\n"
        )
        code = await asyncio.to_thread(main, ["inspect", "--config", str(config_file)])
        table = capsys.readouterr().out
        assert code == 0
        assert "probe:a1" in table and "held by r1" in table
        argv = [
            "inspect",
            "--redis-url",
            redis_server.url,
            "--key-prefix",
            config.key_prefix,
            "--json",
        ]
        code = await asyncio.to_thread(main, argv)
        summary = orjson.loads(capsys.readouterr().out)
    finally:
        await sync.stop()
    assert code == 0
    assert summary["in_flight"] == {"a1": 2}
    assert summary["prefix_blocks"] == {"a1": 10}
    assert summary["leases"] == {"probe:a1": "r1"}
    assert summary["key_counts"]["pfx"] == 1
    assert summary["memory_bytes"]["pfx"] > 0


def test_inspect_reports_an_unreachable_store(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["inspect", "--redis-url", "redis://127.0.0.1:1/0"])
    assert code == 1
    assert "unavailable" in capsys.readouterr().err
