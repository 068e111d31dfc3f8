"""gRPC door overhead: added TTFT of a chat stream through the gateway's gRPC door, against the
same request sent straight to the emulated backend over HTTP (and, for reference, through the
gateway's HTTP door, and over gRPC through a bare gRPC door to the backend, ``direct_grpc``:
``loadtests/grpc_direct.py``), side by side in one run.

    python -m loadtests.bench_grpc_overhead [--requests N] [--rounds R] [--concurrency C]
        [--max-tokens T] [--grpc-engine grpcio|h2 ...] [--src before=DIR ...]
        [--workers W] [--channels K] [--grpc-max-age S] [--out DIR]

Four processes: the emulator (``meridian emulate``), the gateway (``meridian serve`` with a gRPC
port), the bare gRPC door and this client. The sides alternate ``--rounds`` times so machine noise hits them
alike; percentiles are over each side's pooled requests. TTFT is measured the same way on every
side: from sending the request to receiving the first chunk that carries content.

``--src NAME=DIR`` adds a gateway running the code in checkout DIR (e.g. a detached worktree of
main: ``git worktree add --detach /tmp/base main``) whose two doors join every round as
``NAME_http`` and ``NAME_grpc``, so a change is compared with its baseline in the same run.
Latency at c=16 on a shared machine swings between identical runs; the gateway's CPU per request
(CPU seconds of its process tree / requests) does not, so the table gives each gateway's gRPC /
HTTP CPU ratio as well. Its added TTFT ratio is given twice: each door over direct_http (the
issue's goal), and each door over its own protocol's direct side (gRPC over direct_grpc), which
leaves out the gRPC machinery of the client and of any gRPC server.

``--grpc-engine`` (repeatable; default both): the gRPC engine of this checkout's gateway
(``listen.grpc_engine``). ``grpcio`` is the side ``gateway`` (over ``direct_grpc``, a grpc.aio
bare door); ``h2`` is ``gateway_h2`` (over ``direct_grpc_h2``, an h2 bare door), each its own
gateway process with its own HTTP door, all interleaved in every round. ``--src`` gateways run
their own checkout's default engine (h2 since session 26, grpcio before; their gRPC side is read
over ``direct_grpc``). The load average is taken before every round.

``--workers W`` runs each gateway as ``meridian serve --workers W`` (its CPU is its process
tree's; its context switches are the supervisor's only). A gRPC channel keeps one connection,
which one worker accepted, so ``--channels K`` gives every gRPC side K channels, each on a
connection of its own, taking the calls in turn; the gateways' gRPC calls by worker are printed
at the end. ``--grpc-max-age S`` sets ``listen.grpc_connections.max_age_s``: each connection
is replaced every ~S seconds (what the reconnections cost, and how they spread the calls).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import time
from dataclasses import asdict
from typing import Any

import aiohttp
import grpc

from gateway.grpc.client import inference_stub
from loadtests.bench.grpc_overhead_clients import (
    MAX_TOKENS,
    MODEL,
    Samples,
    channels_to,
    context_switches,
    grpc_measure,
    http_measure,
    run_closed_loop,
)
from loadtests.bench.grpc_overhead_table import (
    Side,
    added_ms,
    door_ratios,
    format_table,
    side_from,
)
from loadtests.bench.overhead_setup import ENGINE  # the same mock schedule as HTTP
from loadtests.peer_servers import tree_cpu_s
from loadtests.processes import ADMIN_URLS, direct_grpc_server, emulated_backend, gateway
from loadtests.results_file import write_results
from loadtests.worker_balance import fetch_requests_by_worker, format_balance

ENGINES = ("grpcio", "h2")
GATEWAY_NAME = {"grpcio": "gateway", "h2": "gateway_h2"}  # side names: NAME_http, NAME_grpc
DIRECT_GRPC = {"grpcio": "direct_grpc", "h2": "direct_grpc_h2"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _env(src: str) -> dict[str, str]:
    """The environment of a gateway that runs the code in checkout ``src``."""
    return {**os.environ, "PYTHONPATH": src}


async def measure(
    concurrencies: list[int],
    requests: int,
    rounds: int,
    sources: dict[str, str] | None = None,
    max_tokens: int = MAX_TOKENS,
    engines: tuple[str, ...] = ENGINES,
    loads: dict[int, list[float]] | None = None,
    workers: int = 1,
    channels: int = 1,
    balance: dict[str, dict[str, float]] | None = None,
    max_age_s: float | None = None,
) -> dict[int, dict[str, Side]]:
    """Per concurrency, per side: the pooled samples of every round (sides interleaved).
    ``loads`` gets each level's 1-minute load average before each round. ``workers``: each
    gateway's (``--workers``); ``channels``: gRPC channels a side, each its own connection,
    taking calls in turn; ``balance`` gets each gateway's gRPC calls by worker at the end;
    ``max_age_s``: ``listen.grpc_connections.max_age_s`` of this checkout's gateways."""
    levels: dict[int, dict[str, Side]] = {}
    # (engine, env): a --src gateway runs its own checkout's default engine (None), since its
    # config may predate the field
    gateways: dict[str, tuple[str | None, dict[str, str] | None]] = {
        GATEWAY_NAME[engine]: (engine, None) for engine in engines
    }
    gateways.update({name: (None, _env(src)) for name, src in (sources or {}).items()})
    admins: dict[str, str] = {}  # gateway name -> its admin URL
    async with contextlib.AsyncExitStack() as stack:
        backend_url, _ = await stack.enter_async_context(
            emulated_backend("grpc-overhead", MODEL, ENGINE)
        )
        backend = {"name": "b", "region": "local", "url": backend_url + "/v1", "models": [MODEL]}
        session = await stack.enter_async_context(
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        )
        measures = {"direct_http": http_measure(session, backend_url, max_tokens)}
        pids: dict[str, int | None] = {"direct_http": None}
        for engine in dict.fromkeys(("grpcio", *engines)):  # grpcio's: --src's baseline too
            target, direct_pid = await stack.enter_async_context(
                direct_grpc_server(backend_url, engine)
            )
            direct_channel = await stack.enter_async_context(grpc.aio.insecure_channel(target))
            side = DIRECT_GRPC[engine]
            measures[side] = grpc_measure(inference_stub(direct_channel), max_tokens)
            pids[side] = direct_pid
        for name, (gateway_engine, env) in gateways.items():
            grpc_port = _free_port()
            listen: dict[str, Any] = {"host": "127.0.0.1", "grpc_port": grpc_port}
            if gateway_engine is not None:
                listen["grpc_engine"] = gateway_engine
                if max_age_s is not None:
                    listen["grpc_connections"] = {"max_age_s": max_age_s}
            config = {"listen": listen, "backends": [{**backend, "max_connections": 4096}]}
            url, pid = await stack.enter_async_context(gateway(config, workers, env))
            stubs = [
                inference_stub(await stack.enter_async_context(channel))
                for channel in channels_to(f"127.0.0.1:{grpc_port}", channels)
            ]
            measures[f"{name}_http"] = http_measure(session, url, max_tokens)
            measures[f"{name}_grpc"] = grpc_measure(stubs[0], max_tokens, *stubs[1:])
            pids[f"{name}_http"] = pids[f"{name}_grpc"] = pid
            admins[name] = ADMIN_URLS[url]
        for concurrency in concurrencies:
            for side_measure in measures.values():  # warm connections and code paths
                await run_closed_loop(side_measure, concurrency * 2, concurrency)
            pooled = {side: Samples([]) for side in measures}
            for _ in range(rounds):
                if loads is not None:
                    loads.setdefault(concurrency, []).append(os.getloadavg()[0])
                for side, side_measure in measures.items():
                    side_pid = pids[side]
                    gateway_cpu = tree_cpu_s(side_pid) if side_pid is not None else 0.0
                    switches = context_switches(side_pid) if side_pid is not None else 0
                    client_cpu = time.process_time()
                    result = await run_closed_loop(side_measure, requests, concurrency)
                    pooled[side].ttfts.extend(result.ttfts)
                    pooled[side].round_p50s.append(side_from(result.ttfts, 0).ttft_p50_ms)
                    pooled[side].errors += result.errors
                    if side_pid is not None:
                        pooled[side].gateway_cpu_s += tree_cpu_s(side_pid) - gateway_cpu
                        pooled[side].gateway_switches += context_switches(side_pid) - switches
                    pooled[side].client_cpu_s += time.process_time() - client_cpu
            levels[concurrency] = {
                side: samples.side(pids[side] is not None) for side, samples in pooled.items()
            }
        for name, admin in admins.items():
            if balance is not None:
                balance[name] = await fetch_requests_by_worker(admin, "grpc")
    return levels


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtests.bench_grpc_overhead", description=__doc__
    )
    parser.add_argument(
        "--concurrency", type=int, action="append", help="repeatable; default 1, 16"
    )
    parser.add_argument("--requests", type=int, default=100, help="requests per side per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--max-tokens", type=int, default=MAX_TOKENS, help="tokens per stream (default 8)"
    )
    parser.add_argument(
        "--src",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="also a gateway running the code in checkout DIR, both doors, in every round",
    )
    parser.add_argument(
        "--grpc-engine",
        action="append",
        choices=ENGINES,
        help="the gateway's gRPC engine; repeatable (default: both, interleaved)",
    )
    parser.add_argument(
        "--workers", type=int, default=1, help="each gateway's worker processes (default 1)"
    )
    parser.add_argument(
        "--channels",
        type=int,
        default=1,
        help="gRPC channels a side, each its own connection, calls in turn (default 1)",
    )
    parser.add_argument(
        "--grpc-max-age",
        type=float,
        metavar="S",
        help="listen.grpc_connections.max_age_s of this checkout's gateways (default: theirs)",
    )
    parser.add_argument("--out", default="loadtests/results")
    args = parser.parse_args(argv)
    sources = {name: src for name, _, src in (s.partition("=") for s in args.src)}
    import uvloop

    engines = tuple(dict.fromkeys(args.grpc_engine or ENGINES))
    loads: dict[int, list[float]] = {}
    balance: dict[str, dict[str, float]] = {}
    levels = uvloop.run(
        measure(
            args.concurrency or [1, 16],
            args.requests,
            args.rounds,
            sources,
            args.max_tokens,
            engines,
            loads,
            args.workers,
            args.channels,
            balance,
            args.grpc_max_age,
        )
    )
    print(format_table(levels))
    for name, counts in balance.items():
        print(format_balance(f"{name} gRPC", counts))
    for concurrency, level_loads in loads.items():
        each = ", ".join(f"{load:.2f}" for load in level_loads)
        print(f"c={concurrency}: 1-minute load average before each round: {each}")
    payload = {
        "benchmark": "grpc_overhead",
        "engine": ENGINE,
        "max_tokens": args.max_tokens,
        "rounds": args.rounds,
        "src": sources,
        "grpc_engines": list(engines),
        "workers": args.workers,
        "channels": args.channels,
        "grpc_max_age_s": args.grpc_max_age,
        "grpc_calls_by_worker": balance,
        "levels": [
            {
                "concurrency": concurrency,
                "load_average_by_round": loads.get(concurrency, []),
                **{side: asdict(s) for side, s in level.items()},
                "added_ms": {
                    side: {
                        "ttft_p50": added_ms(level, side, "ttft_p50_ms"),
                        "ttft_p99": added_ms(level, side, "ttft_p99_ms"),
                    }
                    for side in level
                    if side != "direct_http"
                },
                "grpc_over_http": door_ratios(level)[0],
                "grpc_over_http_by_round": door_ratios(level)[1],
            }
            for concurrency, level in levels.items()
        ],
    }
    write_results(args.out, "grpc-overhead", payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
