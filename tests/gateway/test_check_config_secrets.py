"""``meridian check-config`` reads every secret a file references and names file and key path
of the ones it cannot read; ``--allow-missing-secrets`` checks the file alone (CI)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gateway.commands.check_config import main

BACKEND = {"region": "r", "kind": "dedicated", "engine": "vllm", "models": ["m"]}


def _write(tmp_path: Path, secret: dict[str, str]) -> Path:
    config = {
        "region": "r",
        "regions": [{"name": "r"}],
        "backends": [
            {**BACKEND, "name": "a", "url": "http://127.0.0.1:1/v1"},
            {**BACKEND, "name": "b", "url": "http://127.0.0.1:2/v1", "api_key": secret},
        ],
    }
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_missing_env_secret_names_file_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MERIDIAN_TEST_UNSET_KEY", raising=False)
    path = _write(tmp_path, {"env": "MERIDIAN_TEST_UNSET_KEY"})
    assert main([str(path)]) == 1
    err = capsys.readouterr().err
    assert f"{path}: backends[1].api_key: environment variable MERIDIAN_TEST_UNSET_KEY" in err
    assert "Traceback" not in err


def test_unreadable_secret_file_names_file_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, {"file": str(tmp_path / "absent")})
    assert main([str(path)]) == 1
    assert f"{path}: backends[1].api_key: cannot read secret file" in capsys.readouterr().err


def test_allow_missing_secrets_passes_and_still_says_what_was_not_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MERIDIAN_TEST_UNSET_KEY", raising=False)
    path = _write(tmp_path, {"env": "MERIDIAN_TEST_UNSET_KEY"})
    assert main(["--allow-missing-secrets", str(path)]) == 0
    out = capsys.readouterr()
    assert "OK" in out.out
    assert "not checked" in out.err and "backends[1].api_key" in out.err


def test_present_secret_passes_without_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MERIDIAN_TEST_SET_KEY", "sk-test")
    path = _write(tmp_path, {"env": "MERIDIAN_TEST_SET_KEY"})
    assert main([str(path)]) == 0
    out = capsys.readouterr()
    assert "sk-test" not in out.out + out.err
