"""A new user's first hour with the load generator: every shipped workload runs against the
embedded default (`make run`) as it is, and a run that cannot measure anything fails loudly."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from gateway.app import start_gateway
from gateway.embedded import start_embedded_fleet
from loadtests.bench import run_bench, summarize
from loadtests.bench.runner import BenchOptions
from loadtests.bench.workload import Workload, load_workload, parse_workload, with_overrides

WORKLOADS = sorted((Path(__file__).resolve().parents[2] / "loadtests" / "workloads").glob("*.yaml"))
SMOKE = WORKLOADS[0].parent / "smoke.yaml"


def _shortened(workload: Workload) -> Workload:
    """The workload as shipped (model, mix, prompts, populations), with short replies, two-turn
    sessions and no think time, so that it runs in a second rather than minutes."""
    data = workload.model_dump()
    for component in data["mix"]:
        component["max_tokens"] = {"min": 4, "max": 4}
        if "turns" in component:
            component["turns"] = {"min": 2, "max": 2}
        if "think_time_s" in component:
            component["think_time_s"] = 0.0
    shortened = parse_workload(data, "shortened")
    return with_overrides(shortened, mode="closed", concurrency=2, requests=4, duration_s=60)


async def test_every_shipped_workload_runs_against_the_embedded_default() -> None:
    assert len(WORKLOADS) >= 5
    async with start_embedded_fleet() as config:
        served = set(config.models())
        gateway = await start_gateway(config, "127.0.0.1", 0)
        try:
            for path in WORKLOADS:
                shipped = load_workload(path)
                models = {c.model or shipped.model for c in shipped.mix}
                assert models <= served, (
                    f"{path.name} asks for {models}, `make run` serves {served}"
                )
                workload = _shortened(shipped)
                result = await run_bench(gateway.url, workload, BenchOptions(progress=False))
                report = summarize(result)
                assert report.requests >= 4, path.name
                assert (report.ok, report.errors) == (report.requests, {}), path.name
        finally:
            await gateway.close()


def _meridian(*args: str) -> list[str]:
    return [sys.executable, "-m", "gateway.cli", *args]


@pytest.fixture
def failing_emulator() -> Iterator[str]:
    """A backend that serves the workloads' model and answers every request 500."""
    argv = _meridian("emulate", "--backend", "broken", "--model", "llama-3.1-70b")
    process = subprocess.Popen(
        [*argv, "--fault", "error_rate=1"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        lines = [orjson.loads(process.stdout.readline()) for _ in range(2)]
        assert lines[1] == {"ready": True}
        yield lines[0]["url"]
    finally:
        process.terminate()
        process.wait(timeout=30)


def _bench(url: str, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = ["bench", "--url", url, "--workload", str(SMOKE), "--out", str(out), "--no-progress"]
    return subprocess.run(
        _meridian(*argv, "--requests", "4", *extra), capture_output=True, text=True, timeout=120
    )


def test_a_run_where_every_request_failed_exits_1_and_says_why(
    failing_emulator: str, tmp_path: Path
) -> None:
    done = _bench(failing_emulator, tmp_path)
    assert done.returncode == 1
    assert "all 4 requests failed (http_500 x4)" in done.stderr
    assert (tmp_path / "report.json").exists()  # the records stay, for looking into
    assert not list(tmp_path.glob("*.png"))


def test_a_model_the_server_does_not_serve_is_refused_before_the_run(
    failing_emulator: str, tmp_path: Path
) -> None:
    done = _bench(failing_emulator, tmp_path, "--model", "emulated-model")
    assert done.returncode == 1
    assert "does not serve model 'emulated-model' (it serves: llama-3.1-70b)" in done.stderr
    assert "pass --model llama-3.1-70b" in done.stderr
    assert not (tmp_path / "report.json").exists()


def test_an_unreachable_server_is_one_clear_line(tmp_path: Path) -> None:
    done = _bench("http://127.0.0.1:9", tmp_path)
    assert done.returncode == 1
    assert done.stderr.startswith("meridian bench: cannot reach http://127.0.0.1:9/v1/models")
    assert "Traceback" not in done.stderr
