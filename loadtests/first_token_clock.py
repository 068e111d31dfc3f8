"""Where a streamed request's first token spends its time inside the gateway, by the gateway's
own clock: microseconds per step of the path, at concurrency 1, p50 / p90 / p99.

    python -m loadtests.first_token_clock [--requests 300] [--rounds 2] [--rate R] [--src NAME=DIR ...]

Client-side added TTFT at c=1 moves by ~20% between runs on a shared VM; the gateway's own
timestamps, taken at the steps of one request, move far less, so a change of 0.1 ms shows in
one run. Three processes as in ``call_census``: the mock backend, the gateway (``meridian
serve``, lean door, one worker) started through this file's ``_child``, which wraps the
functions that mark the steps with a ``perf_counter`` stamp (one extra call each, no profiler),
and a closed c=1 load that alternates direct and gateway runs (the client-side numbers, for
reference). The steps:

- ``door``: the read of the request's head -> the request's task running;
- ``parse``: auth, the strict parse, geo (-> the request's routing profile begun);
- ``profile``: the routing profile: the prompt's canonical form, its prefix block hashes and
  token count (``routing.profile``, as ``gateway.inbound`` calls it);
- ``accept``: the rest of the accept, the objective above all (``CoreCall.accept`` returns);
- ``admit``: the chain hop, the request's hold, admission, the fleet snapshot, the profile's
  placement (-> ``decide`` called);
- ``decide``: the routing decision;
- ``attempt``: the attempt's hold and the upstream request, until its bytes are handed to the
  kernel (the transport's ``write``);
- ``first in``: the upstream read that carried the first token -> the route stamped
  (``Relay._stamp``): the event parsed, the waiting task woken, the walk unwound;
- ``first out``: the stamp -> the first write to the client is handed to the kernel (timing
  entries, the response head, the first event).

A step ends where the gateway hands its bytes to the kernel, not where ``write`` returns: on
loopback the write runs the receiver's side of TCP, and the receiver it wakes may run first (a
write to the load client "took" ~0.3 ms that way, the client's own work after its TTFT).

The backend's own time (send -> the read with the first token) is not the gateway's and is left
out; ``gateway total`` is the sum of the steps. ``--rate R``: the streams arrive at R a second
(open loop, Poisson), so the gateway is idle between most of them as under a light real load; in
the default closed loop the next stream is sent the moment the last one ends. The stamps carry
no request key (each request's are the ones between two head reads), so ``R`` must stay low
enough that streams seldom overlap: at ~170 a second the steps mix requests. ``--src NAME=DIR``
measures another checkout (its ``PYTHONPATH``) in the same run: every side's gateway runs at
once, and they take turns within each round.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadtests.bench.overhead_setup import MODEL, one_backend_config, overhead_workload
from loadtests.bench.runner import BenchOptions, run_bench
from loadtests.bench.stats import percentile
from loadtests.bench.workload import Workload, parse_workload
from loadtests.probed_gateway import checkouts, gateway_env, probe_parser, written
from loadtests.probed_gateway import launcher as probe_launcher
from loadtests.processes import gateway, mock_backend
from loadtests.results_file import write_results

# (step, from mark, to mark)
STEPS = (
    ("door", "read", "serve"),
    ("parse", "serve", "profile"),
    ("profile", "profile", "profiled"),
    ("accept", "profiled", "accepted"),
    ("admit", "accepted", "route"),
    ("decide", "route", "decided"),
    ("attempt", "decided", "sent"),
    ("first in", "up", "stamp"),
    ("first out", "stamp", "write"),
)

Marks = list[tuple[str, float]]


def _stamp_before(marks: Marks, name: str, target: Callable[..., Any]) -> Callable[..., Any]:
    clock = time.perf_counter

    @functools.wraps(target)
    def stamped(*args: Any, **kwargs: Any) -> Any:
        marks.append((name, clock()))
        return target(*args, **kwargs)

    return stamped


def _stamp_after(marks: Marks, name: str, target: Callable[..., Any]) -> Callable[..., Any]:
    clock = time.perf_counter

    @functools.wraps(target)
    def stamped(*args: Any, **kwargs: Any) -> Any:
        result = target(*args, **kwargs)
        marks.append((name, clock()))
        return result

    return stamped


def _stamp_around(marks: Marks, before: str, after: str, target: Callable[..., Any]) -> Any:
    return _stamp_after(marks, after, _stamp_before(marks, before, target))


def _stamp_coroutine(marks: Marks, name: str, target: Callable[..., Any]) -> Callable[..., Any]:
    clock = time.perf_counter

    @functools.wraps(target)
    async def stamped(*args: Any, **kwargs: Any) -> Any:
        marks.append((name, clock()))
        return await target(*args, **kwargs)

    return stamped


class _StampedTransport:
    """An upstream connection's transport whose ``write`` is stamped first: the step ends when
    the bytes are handed to the kernel. (On loopback the write runs the receiver's side too,
    and the woken receiver may run before the writer returns: not the gateway's time.)"""

    def __init__(self, transport: Any, marks: Marks, name: str) -> None:
        self._transport, self._marks, self._name = transport, marks, name

    def write(self, data: bytes) -> None:
        self._marks.append((self._name, time.perf_counter()))
        self._transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def _wrap(marks: Marks) -> None:
    """Stamp the functions that mark the steps (the gateway's modules, imported by name)."""
    from gateway import http_client, inbound, relay
    from gateway.lean_door import connection, sse
    from gateway.lifecycle import call

    lean = connection.LeanConnection
    lean.data_received = _stamp_before(marks, "read", lean.data_received)  # type: ignore[method-assign]
    lean._serve = _stamp_coroutine(marks, "serve", lean._serve)  # type: ignore[method-assign]
    for name in ("profile_from_chat", "profile_from_completion"):  # read at call time
        setattr(inbound, name, _stamp_around(marks, "profile", "profiled", getattr(inbound, name)))
    call.CoreCall.accept = _stamp_after(marks, "accepted", call.CoreCall.accept)  # type: ignore[method-assign]
    setattr(relay, "decide", _stamp_around(marks, "route", "decided", vars(relay)["decide"]))  # noqa: B010
    upstream = http_client.UpstreamConnection
    made: Callable[[Any, Any], None] = upstream.connection_made

    def connection_made(self: Any, transport: Any) -> None:
        made(self, _StampedTransport(transport, marks, "sent"))

    upstream.connection_made = connection_made  # type: ignore[method-assign]
    upstream.buffer_updated = _stamp_before(marks, "up", upstream.buffer_updated)  # type: ignore[method-assign]
    upstream.data_received = _stamp_before(marks, "up", upstream.data_received)  # type: ignore[method-assign]
    relay.Relay._stamp = _stamp_before(marks, "stamp", relay.Relay._stamp)  # type: ignore[method-assign]
    sse.LeanSse._send = _stamp_before(marks, "write", sse.LeanSse._send)  # type: ignore[method-assign]


def _child(out: str, argv: list[str]) -> int:
    marks: Marks = []
    _wrap(marks)

    def dump(*_: object) -> None:
        Path(out).write_text(json.dumps(marks))

    signal.signal(signal.SIGUSR1, lambda *_: marks.clear())
    signal.signal(signal.SIGUSR2, dump)
    from gateway.cli import main

    return main(argv)


def requests_from(marks: Marks) -> list[dict[str, float]]:
    """Each request's marks, first of each name, but for ``up``: the last read before the
    stamp (the one that carried the first token; the head came in an earlier one)."""
    requests: list[dict[str, float]] = []
    current: dict[str, float] | None = None
    for name, at in marks:
        if name == "read" and (current is None or "write" in current):
            current = {"read": at}
            requests.append(current)
        elif current is None or "write" in current:
            continue
        elif name == "up" and "stamp" not in current:
            current["up"] = at
        elif name == "write" and "stamp" not in current:
            continue  # a head flushed early is not the first token's write
        elif name not in current:
            current[name] = at
    return [r for r in requests if all(mark in r for _, a, b in STEPS for mark in (a, b))]


def _pct(values: list[float], q: float) -> float:
    """The bench tools' percentile (``loadtests.bench.stats``) of values known to be there."""
    value = percentile(values, q)
    if value is None:
        raise SystemExit("a side measured nothing")
    return value


def summarize(
    marks: Marks, direct_ttft_s: list[float], gateway_ttft_s: list[float]
) -> dict[str, Any]:
    """Per step and in all: p50 / p90 / p99 in us; the client's added TTFT in ms."""
    requests = requests_from(marks)
    if not requests:
        raise SystemExit("no request was stamped at every step: a marked function moved")
    steps: dict[str, list[float]] = {
        step: [(r[b] - r[a]) * 1e6 for r in requests] for step, a, b in STEPS
    }
    steps["gateway total"] = [sum(values) for values in zip(*steps.values(), strict=True)]
    return {
        "requests": len(requests),
        "steps_us": {
            step: {f"p{q}": _pct(values, q) for q in (50, 90, 99)} for step, values in steps.items()
        },
        "client_added_ttft_ms": {
            f"p{q}": (_pct(gateway_ttft_s, q) - _pct(direct_ttft_s, q)) * 1e3 for q in (50, 99)
        },
    }


def _workload(requests: int, rate: float | None) -> Workload:
    """Streams one at a time (closed loop), or arriving at ``rate`` a second (open loop)."""
    spec = overhead_workload(1, requests)
    if rate is not None:
        spec["arrival"] = {"mode": "open", "rate": rate}
    return parse_workload(spec)


@dataclass
class _Side:
    """One checkout's gateway under measurement, and the TTFTs of its runs and their pairs."""

    url: str
    pid: int
    out: Path
    direct: list[float] = field(default_factory=list)
    through: list[float] = field(default_factory=list)


async def measure(
    requests: int,
    rounds: int,
    envs: dict[str, dict[str, str] | None],
    tmp: Path,
    warm_up: int = 50,
    rate: float | None = None,
) -> dict[str, dict[str, Any]]:
    """A gateway per side (``envs``: name -> another checkout's environment, or None for this
    one), all running at once; each stamped over ``rounds`` x ``requests`` streams, one at a
    time or arriving at ``rate`` a second. Sides take turns within a round (their order
    rotating from round to round), and each side's gateway run comes right after a direct run
    of its own, so a host that slows down mid-run slows every side alike."""
    options = BenchOptions(max_connections=1 if rate is None else 64)
    sides: dict[str, _Side] = {}
    async with mock_backend(MODEL) as (backend_url, _), contextlib.AsyncExitStack() as stack:
        config = one_backend_config("clock", backend_url)
        for number, (name, env) in enumerate(envs.items()):
            out = tmp / f"stamps-{number}.json"
            launcher = probe_launcher(__file__, out)  # by its path: see loadtests.probed_gateway
            started = gateway(config, 1, gateway_env(env), launcher)
            url, pid = await stack.enter_async_context(started)
            await run_bench(url, _workload(warm_up, None), options)
            os.kill(pid, signal.SIGUSR1)
            sides[name] = _Side(url, pid, out)
        order = list(sides.values())
        for turn in range(rounds * len(order)):
            side = order[(turn + turn // len(order)) % len(order)]
            for target, ttfts in ((backend_url, side.direct), (side.url, side.through)):
                result = await run_bench(target, _workload(requests, rate), options)
                if any(r.error or r.ttft_s is None for r in result.records):
                    raise SystemExit("a measured request failed")
                ttfts.extend(r.ttft_s for r in result.records if r.ttft_s is not None)
        for side in order:
            os.kill(side.pid, signal.SIGUSR2)
            await written(side.out, "stamps")
    return {name: summarize(_stamps(s.out), s.direct, s.through) for name, s in sides.items()}


def _stamps(out: Path) -> Marks:
    marks: Marks = json.loads(out.read_text())
    return marks


def format_table(sides: dict[str, dict[str, Any]]) -> str:
    names = list(sides)
    lines = [
        "| step (us) | " + " | ".join(f"{n} p50 / p90 / p99" for n in names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    for step in [s for s, _, _ in STEPS] + ["gateway total"]:
        cells = []
        for name in names:
            q = sides[name]["steps_us"][step]
            cells.append(f"{q['p50']:.0f} / {q['p90']:.0f} / {q['p99']:.0f}")
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    cells = [
        "{p50:+.2f} / {p99:+.2f} ms".format(**sides[name]["client_added_ttft_ms"]) for name in names
    ]
    lines.append("| client added TTFT p50 / p99 | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    parser = probe_parser(__doc__)
    parser.add_argument("--requests", type=int, default=300, help="per side per round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--rate", type=float, help="open-loop arrivals a second (default: closed loop, c=1)"
    )
    options = parser.parse_args(args)
    envs = dict(checkouts(options.src))
    with tempfile.TemporaryDirectory() as tmp:
        run = measure(options.requests, options.rounds, envs, Path(tmp), rate=options.rate)
        sides = asyncio.run(run)
    print(format_table(sides))
    settings = {"requests": options.requests, "rate": options.rate}
    write_results(options.out, "first-token-clock", {**settings, "sides": sides})
    return 0


if __name__ == "__main__":
    sys.exit(main())
