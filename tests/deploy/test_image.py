"""The container image as an operator runs it: config mounted at /etc/meridian/gateway.yaml, a
secret from the environment, one streaming request through the openai SDK, then SIGTERM in the
middle of a stream: the stream finishes (drain) and the container exits 0.

Needs a built image: ``make image-test`` builds it (podman + buildah + runc on a debootstrap
base) and runs this file with MERIDIAN_IMAGE set; without it these tests skip.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from openai import OpenAI

from tests.bench.emulate_process import emulate
from tests.deploy.tools import DEPLOY, run, serving, tool
from tests.ports import unclaimed_port

IMAGE = os.environ.get("MERIDIAN_IMAGE")
pytestmark = [
    pytest.mark.skipif(IMAGE is None, reason="no image built: run `make image-test`"),
    pytest.mark.timeout(300),
]
CONTAINERS_CONF = DEPLOY / "docker" / "ci" / "containers.conf"
MODEL = "llama-3.1-70b"
TOKENS = 40


def podman(*args: str | Path) -> list[str | Path]:
    return [tool("podman"), *args]


def podman_env() -> dict[str, str]:
    return {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}


@pytest.fixture
def backend() -> Iterator[str]:
    """An emulated engine on the host's loopback, slow enough that a stream is still running
    when SIGTERM arrives (40 tokens at 25 ms)."""
    engine = ["--engine", "decode_base_ms=25", "--engine", "decode_per_seq_ms=0"]
    with emulate("--backend", "host-emu", "--model", MODEL, *engine) as url:
        yield url


def test_image_serves_a_stream_and_drains_on_sigterm(backend: str, tmp_path: Path) -> None:
    port = unclaimed_port()  # the container shares the host's network (no CNI plugins in CI)
    config = {
        "region": "local",
        "listen": {"host": "127.0.0.1", "port": port},
        "admin": {"port": 0},
        "regions": [{"name": "local"}],
        "backends": [
            {
                "name": "host-emu",
                "region": "local",
                "url": backend + "/v1",
                "models": [MODEL],
                "api_key": {"env": "BACKEND_API_KEY"},
            }
        ],
        "drain": {"readiness_grace_s": 0, "deadline_s": 30},
    }
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o644)
    name = f"meridian-test-{uuid.uuid4().hex[:8]}"
    args = podman(
        "run", "--rm", "--name", name, "--network", "host", "--stop-timeout", "60",
        "-e", "BACKEND_API_KEY=sk-test", "-e", f"MERIDIAN_HEALTHCHECK_PORT={port}",
        "-v", f"{path}:/etc/meridian/gateway.yaml:ro,Z",
        IMAGE or "",
    )  # fmt: skip
    try:
        with serving(args, env=podman_env()) as served:
            uid = run(podman("exec", name, "id", "-u"), env=podman_env()).stdout.strip()
            assert uid == "10001"
            run(podman("healthcheck", "run", name), env=podman_env())

            client = OpenAI(base_url=served.url + "/v1", api_key="unused", max_retries=0)
            stream = client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": "Where does the time go?"}],
                max_tokens=TOKENS,
                stream=True,
                stream_options={"include_usage": True},
            )
            chunks = iter(stream)
            first = next(c for c in chunks if c.choices and c.choices[0].delta.content)
            assert first.choices[0].delta.content
            # Mid-stream: the container gets SIGTERM, as `podman stop` or the kubelet sends it.
            run(podman("kill", "--signal", "TERM", name), env=podman_env())
            rest = list(chunks)
            finishes = [c.choices[0].finish_reason for c in rest if c.choices]
            assert finishes[-1] == "length"  # the stream ran to its end during the drain
            (usage,) = [c.usage for c in rest if c.usage is not None]
            assert usage.completion_tokens == TOKENS
            assert served.process.wait(timeout=120) == 0, served.logged()
            logged = served.logged()
    finally:  # a failed test leaves no container behind (the podman client may be gone)
        subprocess.run(podman("rm", "--force", "--ignore", name), env=podman_env(), check=False)
    assert "draining" in logged
    assert "sk-test" not in logged
