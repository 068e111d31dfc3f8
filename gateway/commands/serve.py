"""``meridian serve``: run the gateway until SIGTERM/SIGINT; SIGHUP reloads the config.

Without ``--config`` it runs the embedded default: in-memory state and a small emulated
three-region fleet started in the same process, so one command gives a working gateway.

SIGTERM (or SIGINT) drains gracefully (see gateway/drain.py): readiness fails, new requests
get 503, running streams finish until ``drain.deadline_s``; then the process exits 0. A second
SIGTERM/SIGINT skips what is left of the drain. SIGHUP, or a change to the config file when
``reload.watch_interval_s`` is set, reloads the configuration (see gateway/reload.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys

from aiohttp import web

from gateway.app import RunningGateway, start_gateway
from gateway.config import ConfigError, GatewayConfig, load_config
from gateway.config_warnings import config_warnings
from gateway.drain import drain
from gateway.heap import settle_after_start
from gateway.listen_error import ListenerBindError
from gateway.observability import log_format
from gateway.reload import Reloader
from gateway.state_keys import RELAY
from gateway.workers.ports import usable_cores
from gateway.workers.supervisor import supervise
from gateway.workers.worker import WorkerRole

log = logging.getLogger("meridian.serve")

_PORT_HINT = "choose another with --port, or PORT=... make run"


class ListenError(Exception):
    """The listening socket could not be opened (a port in use, an address not on this host).
    ``hint``: what to change."""

    def __init__(self, message: str, hint: str = _PORT_HINT) -> None:
        super().__init__(message)
        self.hint = hint


def _listen_error(exc: OSError, where: str) -> ListenError:
    """``exc`` as the operator reads it: the listener that failed, by its address."""
    if isinstance(exc, ListenerBindError):  # the admin or gRPC listener, not --port's
        return ListenError(f"cannot listen on {exc.where}: {exc.reason}", f"change {exc.setting}")
    reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
    return ListenError(f"cannot listen on {where}: {reason}")


async def _start(
    config: GatewayConfig, host: str | None, port: int | None, role: WorkerRole | None = None
) -> RunningGateway:
    try:
        return await start_gateway(
            config,
            host,
            port,
            reuse_port=role is not None,
            prepare=None if role is None else role.prepare,
        )
    except OSError as exc:
        where = f"{host or config.listen.host}:{config.listen.port if port is None else port}"
        raise _listen_error(exc, where) from exc


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="meridian serve", description=__doc__)
    parser.add_argument("--config", help="gateway YAML (default: embedded emulated fleet)")
    parser.add_argument(
        "--host", help="the public listeners' address, HTTP and gRPC (overrides listen.host)"
    )
    parser.add_argument("--port", type=int, help="listen port (overrides the config; 0 = any)")
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument(
        "--workers",
        type=int,
        help="worker processes sharing the port (SO_REUSEPORT), one event loop each; default: "
        "the CPUs this process may use (1 without --config: the embedded fleet is in-process)",
    )
    # Set by the supervisor of --workers N on each worker it starts; not for operators.
    for flag in ("--worker-index", "--worker-count", "--admin-port", "--grpc-port"):
        parser.add_argument(flag, type=int, help=argparse.SUPPRESS)
    for flag in ("--runtime-dir", "--state-socket"):
        parser.add_argument(flag, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def _announce_grpc(app: web.Application) -> None:
    """``meridian grpc on HOST:PORT`` after the admin line when the gRPC door is configured
    (the bound port when ``listen.grpc_port`` is 0)."""
    if app[RELAY].config.listen.grpc_port is None:
        return
    from gateway.grpc.mount import GRPC_SERVER  # grpc loads only when the door is configured

    server = app.get(GRPC_SERVER)
    if server is not None:
        print(f"meridian grpc on {server.target}", flush=True)


async def _drain_grpc(app: web.Application) -> None:
    if app[RELAY].config.listen.grpc_port is None:
        return
    from gateway.grpc.mount import GRPC_SERVER  # grpc loads only when the door is configured

    server = app.get(GRPC_SERVER)
    if server is not None:
        await server.drain()


async def _drain(gateway: RunningGateway, stop_now: asyncio.Event) -> None:
    relay = gateway.app[RELAY]
    draining = asyncio.ensure_future(drain(relay.drain, relay.config.drain))
    await _drain_grpc(gateway.app)
    forced = asyncio.ensure_future(stop_now.wait())
    await asyncio.wait({draining, forced}, return_when=asyncio.FIRST_COMPLETED)
    if not draining.done():
        log.warning("second signal: stopping without waiting for the drain")
        draining.cancel()
    forced.cancel()
    await asyncio.gather(draining, forced, return_exceptions=True)


def _role(args: argparse.Namespace) -> WorkerRole | None:
    if args.worker_index is None:
        return None
    return WorkerRole(
        args.worker_index,
        args.worker_count,
        args.runtime_dir,
        args.state_socket,
        args.admin_port,
        args.grpc_port,
    )


def _worker_count(args: argparse.Namespace) -> int:
    if args.worker_index is not None or not args.config:
        return 1
    count = usable_cores() if args.workers is None else args.workers
    if count < 1:
        raise SystemExit("meridian serve: --workers must be at least 1")
    return int(count)


async def _supervise(args: argparse.Namespace, workers: int) -> int:
    config = load_config(args.config)
    host = args.host or config.listen.host
    port = config.listen.port if args.port is None else args.port
    plan = {"config": args.config, "host": host, "port": port, "workers": workers}
    try:
        return await supervise(config, {**plan, "log_level": args.log_level})
    except OSError as exc:  # a port could not be reserved
        raise _listen_error(exc, f"{host}:{port}") from exc


async def _serve(args: argparse.Namespace) -> int:
    stop, stop_now = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_stop_signal() -> None:
        (stop_now if stop.is_set() else stop).set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_stop_signal)
    async with contextlib.AsyncExitStack() as stack:
        if args.config:
            config: GatewayConfig = load_config(args.config)
        else:
            from gateway.embedded import start_embedded_fleet

            config = await stack.enter_async_context(start_embedded_fleet())
        log_format.install(args.log_level, config.logging.format, sys.stderr)
        role = _role(args)
        if role is not None:
            config = role.adjust(config)
        for warning in config_warnings(config):
            log.warning("%s: %s", args.config or "embedded config", warning)
        gateway = await _start(config, args.host, args.port, role)
        stack.push_async_callback(gateway.close)
        if role is not None:
            await role.listen_privately(gateway)
        if args.config:
            reloader = Reloader(gateway.app[RELAY], args.config, role.adjust if role else None)
            stack.push_async_callback(reloader.close)
            loop.add_signal_handler(signal.SIGHUP, reloader.request, "SIGHUP")
            reloader.watch_every(config.reload.watch_interval_s)
        settle_after_start()  # no full collection walks what start-up built (gateway/heap.py)
        models = ", ".join(config.models())
        log.info("meridian listening on %s (models: %s)", gateway.url, models)
        log.info("admin listener (state, metrics, readiness details) on %s", gateway.admin_url)
        print(f"meridian listening on {gateway.url}", flush=True)
        print(f"meridian admin on {gateway.admin_url}", flush=True)  # the line after, always
        _announce_grpc(gateway.app)
        await stop.wait()
        log.info("shutting down: draining")
        await _drain(gateway, stop_now)
    return 0


def main(argv: list[str]) -> int:
    args = _parse(argv)
    log_format.install(args.log_level, "auto", sys.stderr)  # the config may change the format
    try:
        import uvloop

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:  # pragma: no cover - uvloop is a dependency on every supported platform
        runner = asyncio.Runner()
    try:
        with runner:
            workers = _worker_count(args)
            if workers > 1:
                return runner.run(_supervise(args, workers))
            return runner.run(_serve(args))
    except ConfigError as exc:
        print(f"invalid configuration:\n{exc}", file=sys.stderr)
        return 1
    except ListenError as exc:
        print(
            f"meridian serve: {exc} ({exc.hint})",
            file=sys.stderr,
        )
        return 1
