"""StateConfig validation, and the local view's prefix matching and bounds."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from gateway.state.config import StateConfig
from gateway.state.errors import StateErrorKind, StateUnavailable
from gateway.state.records import SharedPull, WriteBatch
from gateway.state.store import Retention
from gateway.state.view import SharedView


def test_memory_is_the_default() -> None:
    assert StateConfig().backend == "memory"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"backend": "redis"}, "state.url: required"),
        ({"backend": "redis-cluster"}, "state.urls"),
        ({"backend": "redis", "url": "redis://:secret@h:6379"}, "password_env"),
        ({"backend": "redis", "url": "http://h"}, "redis://"),
        ({"key_prefix": "a{b}"}, "hash tags"),
        ({"password_env": "X", "password_file": "/p"}, "not both"),
        ({"tls": {"cert_file": "/c"}}, "together"),
        ({"password": "inline"}, "Extra inputs"),
    ],
)
def test_bad_configs_say_which_key_and_why(data: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace("{", r"\{")):
        StateConfig.model_validate(data)


def test_password_comes_from_env_or_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MERIDIAN_TEST_REDIS_PW", "s3cret")
    assert StateConfig(password_env="MERIDIAN_TEST_REDIS_PW").resolve_password() == "s3cret"
    secret = tmp_path / "pw"
    secret.write_text("from-file\n")
    assert StateConfig(password_file=secret).resolve_password() == "from-file"
    with pytest.raises(StateUnavailable) as raised:
        StateConfig(password_file=tmp_path / "missing").resolve_password()
    assert raised.value.error.kind is StateErrorKind.CONFIG
    assert "state.password_file" in raised.value.error.message


def test_cached_blocks_stops_at_the_first_miss_and_respects_ttl() -> None:
    view = SharedView("me", Retention(prefix_ttl_s=10.0, prefix_blocks_per_backend=100))
    view.add_prefix("a1", [1, 2, 3], now=100.0)
    view.add_prefix("a1", [4], now=105.0)
    assert view.cached_blocks("a1", [1, 2, 3, 4, 5]) == 4
    assert view.cached_blocks("a1", [9, 2, 3]) == 0
    view.prune(now=112.0)  # blocks 1..3 (seen at 100) are older than 10 s
    assert view.cached_blocks("a1", [4]) == 1
    assert view.cached_blocks("a1", [1, 2, 3]) == 0


def test_prefix_index_keeps_only_the_newest_blocks() -> None:
    view = SharedView("me", Retention(prefix_ttl_s=1e9, prefix_blocks_per_backend=16))
    for i in range(40):
        view.add_prefix("a1", [i], now=float(i))
    view.add_prefix("a1", [0], now=50.0)  # seen again: now among the newest
    view.prune(now=51.0)
    assert view.prefix_sizes() == {"a1": 16}
    assert view.cached_blocks("a1", [0]) == 1
    assert view.cached_blocks("a1", [24]) == 0


def test_remote_in_flight_expires_and_own_is_never_double_counted() -> None:
    view = SharedView("me", Retention(in_flight_ttl_s=5.0))
    view.add_in_flight("a1", 2)
    view.apply_batch(WriteBatch("other", 0.0, in_flight={"a1": 3}), now=100.0)
    view.apply_batch(WriteBatch("me", 0.0, in_flight={"a1": 50}), now=100.0)  # our own echo
    assert view.in_flight("a1") == 5
    view.apply_pull(SharedPull({"me": {"a1": 2}, "other": {"a1": 3}}, {}, {}, {}), now=101.0)
    assert view.in_flight("a1") == 5
    view.prune(now=107.0)
    assert view.in_flight("a1") == 2
    view.add_in_flight("a1", -5)
    assert view.in_flight("a1") == 0  # never negative
