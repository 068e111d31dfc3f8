"""The ``meridian`` command as an operator uses it, in real subprocesses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import openai
import pytest

ROOT = Path(__file__).resolve().parents[2]
MERIDIAN = [sys.executable, "-m", "gateway.cli"]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*MERIDIAN, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )


def test_version() -> None:
    result = run("--version")
    assert result.returncode == 0 and result.stdout.startswith("meridian ")


def test_unknown_command_is_an_error() -> None:
    result = run("frobnicate")
    assert result.returncode == 2 and "unknown command" in result.stderr


def test_check_config_accepts_the_example() -> None:
    result = run("check-config", "deploy/gateway.example.yaml", env={"SERVERLESS_API_KEY": "k"})
    assert result.returncode == 0, result.stderr
    assert "OK" in result.stdout


def test_check_config_names_file_key_and_expectation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "backends:\n"
        "  - name: a\n    region: r\n    url: not-a-url\n    models: [m]\n"
        "  - name: b\n    region: r\n    url: http://h/v1\n    models: []\n"
        "    capacity: {max_num_seqs: 0}\n"
        "timeouts: {first_token_s: -1}\n"
    )
    result = run("check-config", str(bad))
    assert result.returncode == 1
    err = result.stderr
    assert f"{bad}: backends[0].url:" in err
    assert f"{bad}: backends[1].models:" in err
    assert (
        f"{bad}: backends[1].capacity.max_num_seqs: Input should be greater than or equal to 1"
        in err
    )
    assert f"{bad}: timeouts.first_token_s:" in err


def test_check_config_missing_secret_and_bad_yaml(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SERVERLESS_API_KEY"}
    result = subprocess.run(
        [*MERIDIAN, "check-config", "deploy/gateway.example.yaml"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=env,
    )
    assert result.returncode == 1 and "SERVERLESS_API_KEY is not set" in result.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text("backends: [unclosed\n")
    result = run("check-config", str(broken))
    assert result.returncode == 1 and "not valid YAML" in result.stderr


def test_published_schema_is_current() -> None:
    result = run("check-config", "--schema")
    committed = json.loads((ROOT / "docs" / "config.schema.json").read_text())
    assert json.loads(result.stdout) == committed, "regenerate: meridian check-config --schema"


@pytest.mark.timeout(60)
def test_serve_with_no_config_runs_the_embedded_fleet() -> None:
    proc = subprocess.Popen(
        [*MERIDIAN, "serve", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("meridian listening on "), line
        url = line.split()[-1]
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        models = [m.id for m in client.models.list().data]
        assert models == ["llama-3.1-70b"]
        raw = client.chat.completions.with_raw_response.create(
            model="llama-3.1-70b", messages=[{"role": "user", "content": "hello"}], max_tokens=4
        )
        completion = raw.parse()
        assert completion.choices[0].message.content
        assert "kind=" in raw.headers["x-meridian-route"]
        client.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=20)
    assert proc.returncode == 0, stderr
    assert "EMULATED" in stderr


def test_geo_default_origin_is_checked_against_top_level_regions(tmp_path: Path) -> None:
    config = tmp_path / "geo.yaml"
    config.write_text(
        "regions: [{name: us-east}]\n"
        "signals: {geo: {default_origin: mars}}\n"
        "backends: [{name: a, region: us-east, url: 'http://h/v1', models: [m]}]\n"
    )
    result = run("check-config", str(config))
    assert result.returncode == 1
    assert "signals.geo.default_origin 'mars' is not in 'regions' (us-east)" in result.stderr
    config.write_text(config.read_text().replace("mars", "us-east"))
    assert run("check-config", str(config)).returncode == 0
