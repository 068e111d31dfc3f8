"""How many Python calls a streamed request costs the gateway, by segment of its path: a count,
not a timing, so the same code gives the same figure on a quiet host and a busy one.

    python -m loadtests.call_census [--requests 100] [--top 0] [--inclusive] [--src NAME=DIR ...]

At concurrency 1 on this VM a byte relay in Python adds ~0.2 ms, Meridian ~2 ms
(``docs/results/profile-c1.md``). Timings cannot resolve a 10% change of that on a shared host
in one run; a census of the calls says how much work the path does (whether time follows it is
measured apart: docs/results/perf-issue16.md, "Session 21"). Three processes as in
``profile_c1``: the mock backend, the gateway (``meridian serve``, lean door, one worker)
started through this file's ``_child``, which counts calls with ``sys.setprofile`` between
SIGUSR1 and SIGUSR2, and this load
generator (closed loop, one stream at a time, after a warm-up). Each call is filed under the
segment the request is in when it starts:

- ``head -> upstream sent``: from the read of the request's head (the lean door's
  ``data_received``) until the upstream request's ``send()`` returns;
- ``first read -> first byte``: from the first read of the upstream's answer until the first
  write to the client (``LeanSse._first_write``) returns;
- ``rest``: the per-event relay, the stream's end and everything the gateway does between
  requests (housekeeping included).

``--src NAME=DIR`` counts another checkout's code (its ``PYTHONPATH``) too, after this one's.
``--inclusive`` also files every call under each function on the stack when it starts (a call
tree's inclusive counts: what a step costs with everything it calls), listed with ``--top``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import tempfile
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

from loadtests.bench.overhead_setup import MODEL, one_backend_config, overhead_workload
from loadtests.bench.runner import BenchOptions, run_bench
from loadtests.bench.workload import parse_workload
from loadtests.probed_gateway import checkouts, gateway_env, probe_parser, written
from loadtests.probed_gateway import launcher as probe_launcher
from loadtests.processes import gateway, mock_backend
from loadtests.results_file import write_results

SEGMENTS = {
    "A": "head -> upstream sent",
    "B": "first read -> first byte",
    "C": "rest (events, end, idle)",
}
_WAITING = "W"  # the upstream request is out, its answer not yet read (counted as rest)
_INCLUSIVE_ENV = "MERIDIAN_CENSUS_INCLUSIVE"


class _Census:
    """The child's counter: calls per (file, function, line) and C calls per segment."""

    def __init__(self, inclusive: bool = False) -> None:
        self.segment = "C"
        self.calls: dict[str, Counter[tuple[str, str, int]]] = {s: Counter() for s in SEGMENTS}
        self.c_calls: dict[str, Counter[str]] = {s: Counter() for s in SEGMENTS}
        self.inclusive: dict[str, Counter[tuple[str, str, int]]] | None = (
            {s: Counter() for s in SEGMENTS} if inclusive else None
        )

    def file_on_stack(self, frame: FrameType | None, segment: str) -> None:
        """One call, counted once under every distinct function on the stack."""
        assert self.inclusive is not None
        counts, seen = self.inclusive[segment], set()
        while frame is not None:
            code = frame.f_code
            key = (code.co_filename, code.co_name, code.co_firstlineno)
            if key not in seen:
                seen.add(key)
                counts[key] += 1
            frame = frame.f_back

    def hook(self, frame: FrameType, event: str, arg: Any) -> None:
        code = frame.f_code
        segment = self.segment
        if event == "call":
            name, path = code.co_name, code.co_filename
            if (
                segment == "C"
                and name == "data_received"
                and path.endswith("lean_door/connection.py")
            ):
                segment = self.segment = "A"
            elif (
                segment == _WAITING
                and name == "buffer_updated"
                and path.endswith("gateway/http_client.py")
            ):
                segment = self.segment = "B"
            segment = "C" if segment == _WAITING else segment
            self.calls[segment][(path, name, code.co_firstlineno)] += 1
            if self.inclusive is not None:
                self.file_on_stack(frame, segment)
        elif event == "return":
            if (
                segment == "A"
                and code.co_name == "send"
                and code.co_filename.endswith("gateway/http_client.py")
            ):
                self.segment = _WAITING
            elif (
                segment == "B"
                and code.co_name == "_first_write"
                and code.co_filename.endswith("lean_door/sse.py")
            ):
                self.segment = "C"
        elif event == "c_call":
            key = getattr(arg, "__qualname__", type(arg).__name__)
            self.c_calls["C" if segment == _WAITING else segment][key] += 1

    def start(self, *_: object) -> None:
        for calls in self.calls.values():
            calls.clear()
        for c_calls in self.c_calls.values():
            c_calls.clear()
        for inclusive in (self.inclusive or {}).values():
            inclusive.clear()
        self.segment = "C"
        sys.setprofile(self.hook)

    def dump(self, path: str) -> None:
        sys.setprofile(None)
        payload = {
            s: {
                "calls": [[list(key), n] for key, n in self.calls[s].items()],
                "c_calls": sorted(self.c_calls[s].items()),
                "inclusive": []
                if self.inclusive is None
                else [[list(key), n] for key, n in self.inclusive[s].items()],
            }
            for s in SEGMENTS
        }
        Path(path).write_text(json.dumps(payload))


def _child(out: str, argv: list[str]) -> int:
    census = _Census(inclusive=bool(os.environ.get(_INCLUSIVE_ENV)))
    signal.signal(signal.SIGUSR1, census.start)
    signal.signal(signal.SIGUSR2, lambda *_: census.dump(out))
    from gateway.cli import main  # after the handlers: the gateway installs its own for others

    return main(argv)


def _short(path: str) -> str:
    """A path from its package on: ``gateway/relay.py``, ``aiohttp/web.py``, ``asyncio/...``."""
    if "site-packages/" in path:
        return path.split("site-packages/", 1)[1]
    if "/lib/python3." in path:
        return path.split("/lib/python3.", 1)[1].split("/", 1)[-1]
    for package in ("/gateway/", "/routing/", "/loadtests/"):
        if package in path:
            return package[1:] + path.rsplit(package, 1)[1]
    return path


def summarize(raw: dict[str, Any], requests: int, top: int) -> dict[str, Any]:
    """Per segment: Python calls and C calls a request, distinct functions, the top callees."""
    segments = {}
    for key, name in SEGMENTS.items():
        calls, inclusive = _by_function(raw[key]["calls"]), _by_function(raw[key]["inclusive"])
        c_calls = sum(n for _, n in raw[key]["c_calls"])
        segments[name] = {
            "python_calls_per_request": sum(calls.values()) / requests,
            "c_calls_per_request": c_calls / requests,
            "distinct_functions": len(calls),
            "top": [[k, n / requests] for k, n in calls.most_common(top)],
            "inclusive_top": [[k, n / requests] for k, n in inclusive.most_common(top)],
        }
    return segments


def _by_function(raw: list[tuple[tuple[str, str, int], int]]) -> Counter[str]:
    counts: Counter[str] = Counter()
    for (path, function, line), n in raw:
        counts[f"{_short(path)}:{line}:{function}"] += n
    return counts


async def count_calls(
    requests: int,
    env: dict[str, str] | None,
    out: Path,
    warm_up: int = 60,
    inclusive: bool = False,
) -> None:
    """Count a gateway's calls over ``requests`` streams (after ``warm_up`` more) into
    ``out`` (the child's raw JSON; :func:`summarize` reads it). ``env``: the gateway's whole
    environment (another checkout's ``PYTHONPATH``), or None for this checkout.
    ``inclusive``: count each call under every function on its stack too."""
    options = BenchOptions(max_connections=1)
    workload = parse_workload(overhead_workload(1, requests))
    warm = parse_workload(overhead_workload(1, warm_up))
    launcher = probe_launcher(__file__, out)  # by its path: see loadtests.probed_gateway
    env = gateway_env(env)
    if inclusive:
        env[_INCLUSIVE_ENV] = "1"
    async with mock_backend(MODEL) as (backend_url, _):
        config = one_backend_config("census", backend_url)
        async with gateway(config, 1, env, launcher) as (url, pid):
            await run_bench(url, warm, options)
            os.kill(pid, signal.SIGUSR1)
            result = await run_bench(url, workload, options)
            if len(result.records) != requests or any(r.error for r in result.records):
                raise SystemExit("a counted request failed: the census would be wrong")
            os.kill(pid, signal.SIGUSR2)
            await written(out, "census")


def format_table(sides: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| side | segment | Python calls a request | C calls a request | distinct functions |",
        "|---|---|---:|---:|---:|",
    ]
    for side, segments in sides.items():
        for name, row in segments.items():
            lines.append(
                f"| {side} | {name} | {row['python_calls_per_request']:.1f} | "
                f"{row['c_calls_per_request']:.1f} | {row['distinct_functions']} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    parser = probe_parser(__doc__)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--top", type=int, default=0, help="list each segment's top N functions")
    parser.add_argument("--inclusive", action="store_true", help="count call trees too")
    options = parser.parse_args(args)
    sides: dict[str, dict[str, Any]] = {}
    for name, env in checkouts(options.src):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "census.json"
            asyncio.run(count_calls(options.requests, env, out, inclusive=options.inclusive))
            sides[name] = summarize(json.loads(out.read_text()), options.requests, options.top)
    print(format_table(sides))
    for side, segments in sides.items():
        for name, row in segments.items():
            for function, n in row["top"]:
                print(f"  {side} / {name}: {n:6.1f}  {function}")
            for function, n in row["inclusive_top"]:
                print(f"  {side} / {name}, inclusive: {n:6.1f}  {function}")
    write_results(options.out, "call-census", {"requests": options.requests, "sides": sides})
    return 0


if __name__ == "__main__":
    sys.exit(main())
