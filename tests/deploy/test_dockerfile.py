"""deploy/docker/Dockerfile: hadolint and checkov clean, and the promises deploy/README.md makes
about it (the image itself is built and run by test_image.py under `make image-test`)."""

from __future__ import annotations

import re

from tests.deploy.tools import DEPLOY, run, tool

DOCKERFILE = DEPLOY / "docker" / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())  # join continued lines
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "")
        for line in lines
        if line and not line.startswith("#")
    ]


def test_hadolint() -> None:
    run([tool("hadolint"), "--failure-threshold", "info", DOCKERFILE])


def test_checkov_dockerfile() -> None:
    result = run(
        [tool("checkov"), "-f", DOCKERFILE, "--framework", "dockerfile", "--skip-download"]
    )
    assert "Failed checks: 0" in result.stdout and "Passed checks:" in result.stdout


def test_multi_stage_non_root_with_health_check_and_drain_signal() -> None:
    steps = instructions()
    froms = [arg for op, arg in steps if op == "FROM"]
    assert froms == ["${BASE_IMAGE} AS build", "${BASE_IMAGE} AS runtime"]
    assert ("ARG", "BASE_IMAGE=python:3.12-slim") in steps
    runtime = steps[[s[1] for s in steps].index("${BASE_IMAGE} AS runtime") :]
    (user,) = [arg for op, arg in runtime if op == "USER"]
    assert not user.startswith(("0", "root"))
    (health,) = [arg for op, arg in runtime if op == "HEALTHCHECK"]
    assert "/healthz" in health
    assert ("STOPSIGNAL", "SIGTERM") in runtime
    assert ("CMD", '["serve", "--config", "/etc/meridian/gateway.yaml"]') in runtime
