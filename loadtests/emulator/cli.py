"""``meridian emulate``: start emulated backends and say where they listen.

    meridian emulate FLEET.yaml [--host 127.0.0.1] [--from-region R]
    meridian emulate --backend NAME --model M [--port P] [--rtt-ms 0] [--engine KEY=VALUE ...]
    meridian emulate ... --tls-cert CERT.pem --tls-key KEY.pem   (HTTPS, as a provider serves)

Prints one JSON line per backend (name, url, region, kind, models), then ``{"ready": true}``,
and serves until SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import ssl
import sys
from collections.abc import Sequence
from typing import Any

import orjson
import yaml
from pydantic import ValidationError

from loadtests.emulator.config import EmulatedBackendConfig
from loadtests.emulator.fleet import FleetError, load_fleet
from loadtests.emulator.server import RunningEmulator, start_emulated_backend


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="meridian emulate", description=__doc__.split("\n")[0])
    parser.add_argument("fleet", nargs="?", help="fleet YAML file")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--from-region", help="add each backend's RTT from this region")
    parser.add_argument("--tls-cert", help="PEM server certificate: serve HTTPS (with --tls-key)")
    parser.add_argument("--tls-key", help="PEM private key of --tls-cert")
    single = parser.add_argument_group("a single backend, without a fleet file")
    single.add_argument("--backend", help="backend name")
    single.add_argument("--model", action="append", default=[], help="model served (repeat)")
    single.add_argument("--region", default="local")
    single.add_argument("--kind", default="dedicated", choices=["dedicated", "serverless"])
    single.add_argument("--port", type=int, default=0, help="0 = ephemeral")
    single.add_argument("--rtt-ms", type=float, default=0.0)
    single.add_argument("--seed", type=int, default=0)
    single.add_argument(
        "--engine", action="append", default=[], metavar="KEY=VALUE",
        help="engine parameter, e.g. prefill_tokens_per_s=20000 (repeat)",
    )  # fmt: skip
    single.add_argument(
        "--fault", action="append", default=[], metavar="KEY=VALUE",
        help="fault setting, e.g. error_rate=0.1 (repeat)",
    )  # fmt: skip
    return parser


def _assignments(pairs: Sequence[str], flag: str) -> dict[str, Any] | str:
    values: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            return f"{flag} expects KEY=VALUE, got {pair!r}"
        values[key] = yaml.safe_load(value)  # numbers, booleans, null as YAML reads them
    return values


def _single_config(args: argparse.Namespace) -> EmulatedBackendConfig | str:
    engine = _assignments(args.engine, "--engine")
    faults = _assignments(args.fault, "--fault")
    if isinstance(engine, str):
        return engine
    if isinstance(faults, str):
        return faults
    try:
        return EmulatedBackendConfig.model_validate(
            {
                "name": args.backend,
                "models": args.model or ["emulated-model"],
                "region": args.region,
                "kind": args.kind,
                "engine": engine,
                "faults": faults,
                "rtt_ms": args.rtt_ms,
                "seed": args.seed,
            }
        )
    except ValidationError as exc:
        return f"invalid backend settings: {exc}"


def _configs(args: argparse.Namespace) -> list[tuple[EmulatedBackendConfig, int]] | str:
    if args.fleet and args.backend:
        return "give either a fleet file or --backend, not both"
    if args.backend:
        single = _single_config(args)
        return single if isinstance(single, str) else [(single, args.port)]
    if not args.fleet:
        return "give a fleet file or --backend NAME"
    fleet = load_fleet(args.fleet)
    if isinstance(fleet, FleetError):
        return fleet.message
    if args.from_region is not None and args.from_region not in fleet.regions:
        return f"--from-region {args.from_region!r}: not a region of {args.fleet}"
    return [(config, 0) for config in fleet.backend_configs(args.from_region)]


def _announce(emulator: RunningEmulator) -> None:
    config = emulator.config
    line = {
        "name": emulator.name,
        "url": emulator.url,
        "region": config.region,
        "kind": str(config.kind),
        "models": list(config.models),
    }
    sys.stdout.write(orjson.dumps(line).decode() + "\n")


def _tls(args: argparse.Namespace) -> ssl.SSLContext | str | None:
    if (args.tls_cert is None) != (args.tls_key is None):
        return "--tls-cert and --tls-key go together"
    if args.tls_cert is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(args.tls_cert, args.tls_key)
    except (OSError, ssl.SSLError) as exc:
        return f"cannot load --tls-cert/--tls-key: {exc}"
    return context


async def _serve(
    configs: list[tuple[EmulatedBackendConfig, int]], host: str, tls: ssl.SSLContext | None
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    running: list[RunningEmulator] = []
    try:
        for config, port in configs:
            running.append(await start_emulated_backend(config, host, port, tls))
        for emulator in running:
            _announce(emulator)
        sys.stdout.write('{"ready": true}\n')
        sys.stdout.flush()
        await stop.wait()
    finally:
        for emulator in reversed(running):
            await emulator.close()


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    configs = _configs(args)
    tls = _tls(args)
    if isinstance(configs, str) or isinstance(tls, str):
        problem = configs if isinstance(configs, str) else tls
        print(f"meridian emulate: {problem}", file=sys.stderr)
        return 2
    try:
        import uvloop

        runner: Any = uvloop.run
    except ImportError:
        runner = asyncio.run
    try:
        with contextlib.suppress(KeyboardInterrupt):
            runner(_serve(configs, args.host, tls))
    except OSError as exc:  # e.g. the port is taken
        print(f"meridian emulate: cannot listen on {args.host}: {exc}", file=sys.stderr)
        return 1
    return 0
