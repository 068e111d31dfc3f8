"""``meridian check-config`` refuses what ``meridian serve`` refuses: a listener other hosts can
reach with ``auth`` left unconfigured (it passed check-config and then would not start)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gateway.commands.check_config import main


def _write(tmp_path: Path, **extra: object) -> Path:
    config = {
        "backends": [{"name": "a", "region": "r", "url": "http://127.0.0.1:1/v1", "models": ["m"]}],
        **extra,
    }
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_an_open_listener_without_auth_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(_write(tmp_path, listen={"host": "0.0.0.0"}))]) == 1
    err = capsys.readouterr().err
    assert "listen.host 0.0.0.0" in err and "auth" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "extra",
    [
        {"listen": {"host": "0.0.0.0"}, "auth": {"mode": "keys"}},
        {"listen": {"host": "0.0.0.0"}, "auth": {"mode": "off"}},  # said explicitly
        {"listen": {"host": "127.0.0.1"}},  # loopback: auth may stay unconfigured
    ],
)
def test_auth_said_or_loopback_passes(tmp_path: Path, extra: dict[str, object]) -> None:
    assert main([str(_write(tmp_path, **extra))]) == 0


def test_the_shipped_example_passes_as_its_first_lines_say() -> None:
    example = Path(__file__).parents[2] / "deploy" / "gateway.example.yaml"
    assert main(["--allow-missing-secrets", str(example)]) == 0
