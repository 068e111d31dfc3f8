"""``meridian emulate`` as a real process: announces its listeners, serves, exits on SIGTERM."""

from __future__ import annotations

import json
import signal
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from loadtests.tls_certs import local_certificates
from tests.emulator.helpers import read_announcements, spawn_emulate
from tests.servers import PROCESS_BOUND_S


def test_single_backend_process() -> None:
    process = spawn_emulate("--backend", "solo", "--model", "m", "--engine", "decode_base_ms=5")
    try:
        (line,) = read_announcements(process)
        assert line["name"] == "solo" and line["models"] == ["m"]
        body = json.dumps({"model": "m", "prompt": "hi", "max_tokens": 2}).encode()
        request = urllib.request.Request(
            f"{line['url']}/v1/completions", body, {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=5) as resp:
            assert json.load(resp)["usage"]["completion_tokens"] == 2
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=PROCESS_BOUND_S) == 0


def test_bad_arguments_exit_2() -> None:
    process = spawn_emulate("--backend", "x", "--engine", "max_num_seqs=-1")
    assert process.wait(timeout=PROCESS_BOUND_S) == 2
    assert process.stderr is not None and "max_num_seqs" in process.stderr.read()


def test_serves_https_verified_against_its_ca(tmp_path: Path) -> None:
    certificates = local_certificates(tmp_path)
    process = spawn_emulate(
        "--backend", "tls", "--model", "m", "--engine", "decode_base_ms=5",
        "--tls-cert", str(certificates.cert_file), "--tls-key", str(certificates.key_file),
    )  # fmt: skip
    try:
        (line,) = read_announcements(process)
        assert str(line["url"]).startswith("https://127.0.0.1:")
        url = f"{line['url']}/v1/models"
        trusting = ssl.create_default_context(cafile=str(certificates.ca_file))
        with urllib.request.urlopen(url, timeout=5, context=trusting) as resp:
            assert [model["id"] for model in json.load(resp)["data"]] == ["m"]
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            urllib.request.urlopen(url, timeout=5, context=ssl.create_default_context())
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=PROCESS_BOUND_S) == 0


def test_a_certificate_without_its_key_exits_2(tmp_path: Path) -> None:
    process = spawn_emulate("--backend", "x", "--tls-cert", str(tmp_path / "cert.pem"))
    assert process.wait(timeout=PROCESS_BOUND_S) == 2
    assert process.stderr is not None and "go together" in process.stderr.read()
