"""Where the gateway's time goes at concurrency 1: py-spy samples of ``meridian serve`` while a
separate load generator streams through it to a separate emulator process.

    python -m loadtests.profile_c1 [--requests 300] [--rate 2000] [--markdown PATH]

Three processes, as in ``loadtests/bench_overhead.py`` (same engine, same workload), plus py-spy
(``pip install py-spy``) attached to the gateway with ``--nonblocking`` so sampling never pauses
it. Only on-CPU samples are kept (py-spy drops idle threads by default), so each phase's share is
of the gateway's CPU; ``us/request`` scales those shares to the gateway's measured CPU time
(``/proc/<pid>/stat``) per request over the unsampled runs, so a descheduled process on a busy
machine (py-spy samples wall time) does not inflate it. A sample is filed under
the first phase below whose frames appear anywhere in its stack (the order matters: hashing runs
inside request parsing and learning inside the stream's end, so they are looked for first). Before and after the sampled window the same
workload runs direct and through the gateway without py-spy, for the added TTFT it explains.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from loadtests.bench.overhead_setup import ENGINE, MODEL, overhead_workload
from loadtests.bench.runner import BenchOptions, run_bench
from loadtests.bench.workload import parse_workload
from loadtests.bench_overhead import _side
from loadtests.processes import emulated_backend, gateway
from loadtests.results_file import write_results

# (phase, frame markers): a marker is "path-suffix" or "path-suffix:function".
PHASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("after the stream (finish, learn, metrics)", ("gateway/relay.py:finish",)),
    (
        "first chunk -> first byte out",
        (
            "gateway/attempt.py:_read_first",
            "gateway/attempt.py:_record_first_token",
            "gateway/relay.py:_stamp",
            "gateway/relay.py:_learn_first_token",
            "gateway/sse_writer.py:start",
            "gateway/lean_door/sse.py:start",
            "gateway/lean_door/sse.py:_first_write",
            "gateway/doors/sse_door.py:_response_headers",
            "gateway/walk.py:timing_entries",
            "aiohttp/web_response.py:prepare",
        ),
    ),
    ("profile + hashing", ("routing/profile.py", "routing/prefix.py")),
    ("decision", ("routing/", "gateway/relay.py:place", "gateway/placement.py")),
    (
        "per-event relay",
        (
            "gateway/stream.py",
            "gateway/opened_stream.py",  # its end-of-stream summary (in stream.py until 2026-12-08)
            "gateway/sse.py",
            "gateway/sse_writer.py",
            "gateway/doors/sse_door.py:_relay_stream",
            "gateway/doors/sse_door.py:_summary_json",
            "aiohttp/streams.py",
            "aiohttp/client_proto.py",
            "gateway/http_client.py:data_received",
            "gateway/http_client.py:readany",
            # Push mode (gateway/push_phase.py): the upstream socket's read callback relays each
            # read itself, so these frames sit under http_client.py, which "upstream request"
            # below would claim. Its one response-head read a request is filed here too.
            "gateway/push_phase.py",
            "gateway/http_client.py:buffer_updated",
            "gateway/upstream_response.py",
            "gateway/upstream_body.py",
        ),
    ),
    (
        "upstream request",
        (
            "gateway/attempt.py",
            "gateway/upstream.py",
            "gateway/http_client.py",
            "aiohttp/client",
            "aiohttp/connector.py",
        ),
    ),
    (
        "accept + parse",
        (
            "gateway/http_api.py",
            "gateway/doors/sse_door.py",
            "gateway/lifecycle/core.py",
            "gateway/inbound.py",
            "gateway/relay.py:open",
            "aiohttp/web_protocol.py",
            "aiohttp/web_request.py",
            "aiohttp/http_parser.py",
            "aiohttp/web_app.py",
            "gateway/lean_door/",
            "gateway/doors/door_http.py",
        ),
    ),
)
OTHER = "event loop, tasks, other"
# With --nonblocking py-spy cannot tell a thread blocked in epoll from one running, so a sample
# whose innermost Python frame is the loop runner itself is the loop waiting: idle, not counted.
# The same holds for the log writer's thread (gateway/observability/log_format.py): with its
# own frame innermost it is waiting in ``queue.get`` or ``time.sleep`` (its work is in
# ``_Writer._write``); counted, it read as a fifth of the gateway's CPU.
IDLE_LEAVES = ("Runner.run", "run_forever", "run_until_complete", "_Writer._run")


def _frames(stack: str) -> list[tuple[str, str]]:
    """(path, function) of each frame of one raw py-spy stack line, root first."""
    frames = []
    for frame in stack.split(";"):
        name, _, where = frame.partition(" (")
        frames.append((where.rsplit(":", 1)[0], name.strip()))
    return frames


def _matches(marker: str, path: str, function: str) -> bool:
    suffix, _, wanted = marker.partition(":")
    # py-spy names methods by their qualified name (``Relay.finish``)
    return suffix in path and (not wanted or function == wanted or function.endswith("." + wanted))


def classify(stack: str) -> str | None:
    """The phase a sample belongs to (None: the loop was idle)."""
    frames = _frames(stack)
    if frames and frames[-1][1] in IDLE_LEAVES:
        return None
    for phase, markers in PHASES:
        if any(_matches(m, path, func) for m in markers for path, func in frames):
            return phase
    return OTHER


# Innermost frames that are a socket write: the time below them is the send() system call.
WRITE_LEAVES = ("StreamWriter._writelines", "StreamWriter._write", "UpstreamConnection.send")


def tally(raw: str) -> tuple[Counter[str], Counter[str]]:
    """Samples per phase from py-spy's ``--format raw`` output (``stack count`` lines), and of
    those, the samples inside a socket write."""
    counts: Counter[str] = Counter()
    writes: Counter[str] = Counter()
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        phase = classify(stack) if stack and count.isdigit() else None
        if phase is not None:
            counts[phase] += int(count)
            if _frames(stack)[-1][1] in WRITE_LEAVES:
                writes[phase] += int(count)
    return counts, writes


async def _sampled(pid: int, rate: int, out: Path, run: asyncio.Future[Any]) -> None:
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    argv = [spy, "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw"]
    argv += ["--nonblocking", "--output", str(out)]
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )
    try:
        await run
    finally:
        process.send_signal(signal.SIGINT)  # py-spy writes its output on Ctrl-C
        await process.wait()


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


async def measure(requests: int, rate: int) -> dict[str, object]:
    workload = parse_workload(overhead_workload(1, requests))
    warm = parse_workload(overhead_workload(1, 50))
    options = BenchOptions(max_connections=1)
    async with emulated_backend("overhead", MODEL, ENGINE) as (backend_url, _):
        backend = {"name": "overhead", "region": "local", "url": backend_url + "/v1"}
        config = {"backends": [{**backend, "models": [MODEL], "max_connections": 64}]}
        async with gateway(config) as (gateway_url, pid):
            await run_bench(gateway_url, warm, options)
            direct = [await run_bench(backend_url, workload, options)]
            cpu_before = _cpu_s(pid)
            through = [await run_bench(gateway_url, workload, options)]
            cpu_s = _cpu_s(pid) - cpu_before
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp) / "gateway.raw"
                run = asyncio.ensure_future(run_bench(gateway_url, workload, options))
                await asyncio.sleep(0)
                await _sampled(pid, rate, out, run)
                sampled = run.result()
                raw = _read(out)
            direct.append(await run_bench(backend_url, workload, options))
            cpu_before = _cpu_s(pid)
            through.append(await run_bench(gateway_url, workload, options))
            cpu_s += _cpu_s(pid) - cpu_before
    cpu_us = cpu_s / (2 * requests) * 1e6  # measured on the unsampled runs
    served = len(sampled.records)
    counts, writes = tally(raw)
    total = sum(counts.values()) or 1
    phases = [
        {
            "phase": phase,
            "samples": counts.get(phase, 0),
            "share": counts.get(phase, 0) / total,
            "us_per_request": counts.get(phase, 0) / total * cpu_us,
            "socket_write_share": writes.get(phase, 0) / (counts.get(phase, 0) or 1),
        }
        for phase in [p for p, _ in PHASES] + [OTHER]
    ]
    d, g = _side(direct), _side(through)
    return {
        "raw": raw,
        "requests_sampled": served,
        "rate_hz": rate,
        "samples": total,
        "cpu_us_per_request": cpu_us,
        "phases": phases,
        "added_ttft_p50_ms": (g.ttft_p50_ms or 0) - (d.ttft_p50_ms or 0),
        "added_ttft_p99_ms": (g.ttft_p99_ms or 0) - (d.ttft_p99_ms or 0),
        "direct": d.__dict__,
        "gateway": g.__dict__,
    }


def format_table(result: dict[str, object]) -> str:
    head = f"{'phase':<44}{'samples':>8}{'share':>8}{'us/req':>9}{'in send()':>11}"
    lines = [head, "-" * len(head)]
    for row in result["phases"]:  # type: ignore[attr-defined]
        lines.append(
            f"{row['phase']:<44}{row['samples']:>8}{row['share'] * 100:>7.1f}%"
            f"{row['us_per_request']:>9.0f}{row['socket_write_share'] * 100:>10.0f}%"
        )
    lines.append(
        f"{'total gateway CPU':<44}{result['samples']:>8}{'100.0%':>8}"
        f"{result['cpu_us_per_request']:>9.0f}"
    )
    lines.append(
        f"added TTFT (unsampled runs, gateway - direct): p50 {result['added_ttft_p50_ms']:.2f} ms"
        f", p99 {result['added_ttft_p99_ms']:.2f} ms"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.profile_c1", description=__doc__)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--rate", type=int, default=2000, help="py-spy samples per second")
    parser.add_argument("--out", default="loadtests/results")
    parser.add_argument("--keep-raw", help="also write py-spy's raw stacks here")
    args = parser.parse_args(argv)
    if os.name != "posix":  # pragma: no cover
        raise SystemExit("py-spy attach needs a POSIX host")
    import uvloop

    result = uvloop.run(measure(args.requests, args.rate))
    raw = str(result.pop("raw"))
    if args.keep_raw:
        Path(args.keep_raw).write_text(raw)
    print(format_table(result))
    write_results(args.out, "profile_c1", result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
