"""The supervisor of ``meridian serve --workers N``.

It reserves the ports (``ports.reserve_port``: the public one, the admin listener's and, when
configured, the gRPC listener's), hosts the workers' shared state when the config
keeps state in memory (with ``state.backend: redis`` the workers share Redis instead, as
replicas on different hosts do), starts N ``meridian serve`` workers that each bind their own
``SO_REUSEPORT`` listener and run their own event loop, and prints ``meridian listening on
URL`` once every worker is listening. SIGTERM/SIGINT are forwarded (each worker drains its own
streams; a second signal is forwarded too and skips what is left of the drain), SIGHUP is
forwarded (each worker reloads the file), and a worker that dies unexpectedly is started again.
It exits once every worker has, with the first non-zero exit code among them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import signal
import socket
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from gateway.config import GatewayConfig
from gateway.listen_error import ListenerBindError
from gateway.state.connect import retention_of
from gateway.state.host_server import HostStateServer
from gateway.workers.ports import reserve_port

log = logging.getLogger("meridian.workers")

_READY_TIMEOUT_S = 60.0
_RESTART_PAUSE_S = 1.0  # a worker that keeps dying is restarted at most this often


@dataclass(frozen=True, slots=True)
class WorkerPlan:
    config_path: str
    host: str
    port: int
    count: int
    runtime_dir: str
    log_level: str
    state_socket: str | None  # the host store's socket (None: the config's Redis)
    admin_host: str
    admin_port: int
    scheme: str = "http"  # https with listen.tls
    grpc_port: int | None = None  # listen.grpc_port reserved (None: no gRPC listener)

    def argv(self, index: int) -> list[str]:
        argv = [sys.executable, "-m", "gateway.cli", "serve", "--config", self.config_path]
        argv += ["--host", self.host, "--port", str(self.port), "--log-level", self.log_level]
        argv += ["--worker-index", str(index), "--worker-count", str(self.count)]
        argv += ["--runtime-dir", self.runtime_dir, "--admin-port", str(self.admin_port)]
        if self.state_socket is not None:
            argv += ["--state-socket", self.state_socket]
        if self.grpc_port is not None:
            argv += ["--grpc-port", str(self.grpc_port)]
        return argv


@dataclass
class _Workers:
    plan: WorkerPlan
    processes: dict[int, asyncio.subprocess.Process] = field(default_factory=dict)
    stopping: bool = False
    exit_code: int = 0

    async def start(self, index: int) -> None:
        process = await asyncio.create_subprocess_exec(
            *self.plan.argv(index), stdout=asyncio.subprocess.PIPE
        )
        self.processes[index] = process
        stdout = process.stdout  # a pipe: asked for above
        first = await asyncio.wait_for(stdout.readline(), _READY_TIMEOUT_S) if stdout else b""
        if not first.startswith(b"meridian listening on "):
            raise RuntimeError(f"worker {index} did not start (exit {await process.wait()})")

    def signal_all(self, sig: int) -> None:
        for process in self.processes.values():
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(sig)

    async def watch(self, index: int) -> None:
        """Wait for worker ``index``; start it again if it died while we were not stopping."""
        while True:
            code = await self.processes[index].wait()
            if self.stopping:
                if code and not self.exit_code:
                    self.exit_code = code
                return
            log.error("worker %d exited with %d; starting it again", index, code)
            await asyncio.sleep(_RESTART_PAUSE_S)
            if self.stopping:
                return
            await self.start(index)


async def supervise(config: GatewayConfig, plan_args: dict[str, object]) -> int:
    """Run the workers until they have all exited; returns the exit code."""
    host, port = str(plan_args["host"]), int(str(plan_args["port"]))
    grpc_port = config.listen.grpc_port
    async with contextlib.AsyncExitStack() as held:
        # The ports stay ours while workers come and go; the admin and gRPC listeners' ports
        # are shared by the workers the same way as the public one.
        reserved = held.enter_context(reserve_port(host, port))
        admin_port = config.admin.port_for(port)
        admin = held.enter_context(_reserve(config.admin.host, admin_port, "admin.port"))
        grpc = None
        if grpc_port is not None:
            grpc = held.enter_context(_reserve(host, grpc_port, "listen.grpc_port"))
        runtime = tempfile.mkdtemp(prefix="meridian-workers-")
        held.callback(shutil.rmtree, runtime, ignore_errors=True)
        socket_path = None
        if config.state.backend == "memory":
            socket_path = str(Path(runtime) / "state.sock")
            store = HostStateServer(socket_path, retention_of(config.state))
            held.push_async_callback(store.close)
            await store.start()
        plan = WorkerPlan(
            config_path=str(plan_args["config"]),
            host=host,
            port=reserved.getsockname()[1],
            count=int(str(plan_args["workers"])),
            runtime_dir=runtime,
            log_level=str(plan_args["log_level"]),
            state_socket=socket_path,
            admin_host=config.admin.host,
            admin_port=admin.getsockname()[1],
            scheme="http" if config.listen.tls is None else "https",
            grpc_port=None if grpc is None else grpc.getsockname()[1],
        )
        return await _run(plan)


def _reserve(host: str, port: int, setting: str) -> socket.socket:
    """``reserve_port`` for a listener other than the public one: a failure names its port."""
    try:
        return reserve_port(host, port)
    except OSError as exc:
        raise ListenerBindError(f"{host}:{port}", setting, exc.errno) from exc


async def _run(plan: WorkerPlan) -> int:
    workers = _Workers(plan)
    loop = asyncio.get_running_loop()

    def on_stop(sig: int) -> None:
        workers.stopping = True
        workers.signal_all(sig)

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_stop, sig)
    loop.add_signal_handler(signal.SIGHUP, workers.signal_all, signal.SIGHUP)
    try:
        await asyncio.gather(*(workers.start(i) for i in range(plan.count)))
    except BaseException:
        workers.stopping = True
        workers.signal_all(signal.SIGTERM)
        await asyncio.gather(*(p.wait() for p in workers.processes.values()))
        raise
    log.info("%d workers listening on %s:%d", plan.count, plan.host, plan.port)
    print(f"meridian listening on {plan.scheme}://{plan.host}:{plan.port}", flush=True)
    print(f"meridian admin on http://{plan.admin_host}:{plan.admin_port}", flush=True)
    if plan.grpc_port is not None:
        print(f"meridian grpc on {plan.host}:{plan.grpc_port}", flush=True)
    await asyncio.gather(*(workers.watch(i) for i in range(plan.count)))
    return workers.exit_code
