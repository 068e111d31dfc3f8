"""AUTH against a real password-protected redis-server; the password comes from an env var."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.state.connect import open_store
from gateway.state.errors import StateUnavailable
from tests.redis_server import RedisServer
from tests.state.conftest import fast_config


async def test_password_from_env_authenticates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with RedisServer(tmp_path / "auth", password="s3cret-pw", unix_socket=True) as server:
        monkeypatch.setenv("MERIDIAN_TEST_REDIS_PW", "s3cret-pw")
        good = open_store(fast_config("redis", server, password_env="MERIDIAN_TEST_REDIS_PW"))
        bad = open_store(fast_config("redis", server))
        try:
            await good.ping()
            with pytest.raises(StateUnavailable, match=r"(?i)auth"):
                await bad.ping()
        finally:
            await good.close()
            await bad.close()
