"""``meridian serve``: run the gateway until SIGINT/SIGTERM.

Without ``--config`` it runs the embedded default: in-memory state and a small emulated
three-region fleet started in the same process, so one command gives a working gateway.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys

from gateway.app import start_gateway
from gateway.config import ConfigError, GatewayConfig, load_config

log = logging.getLogger("meridian.serve")


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="meridian serve", description=__doc__)
    parser.add_argument("--config", help="gateway YAML (default: embedded emulated fleet)")
    parser.add_argument("--host", help="listen address (overrides the config)")
    parser.add_argument("--port", type=int, help="listen port (overrides the config; 0 = any)")
    parser.add_argument("--log-level", default="INFO")
    return parser.parse_args(argv)


async def _serve(args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with contextlib.AsyncExitStack() as stack:
        if args.config:
            config: GatewayConfig = load_config(args.config)
        else:
            from gateway.embedded import start_embedded_fleet

            config = await stack.enter_async_context(start_embedded_fleet())
        gateway = await start_gateway(config, args.host, args.port)
        stack.push_async_callback(gateway.close)
        models = ", ".join(config.models())
        log.info("meridian listening on %s (models: %s)", gateway.url, models)
        print(f"meridian listening on {gateway.url}", flush=True)
        await stop.wait()
        log.info("shutting down")
    return 0


def main(argv: list[str]) -> int:
    args = _parse(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    try:
        import uvloop

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:  # pragma: no cover - uvloop is a dependency on every supported platform
        runner = asyncio.Runner()
    try:
        with runner:
            return runner.run(_serve(args))
    except ConfigError as exc:
        print(f"invalid configuration:\n{exc}", file=sys.stderr)
        return 1
