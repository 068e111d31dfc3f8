"""What a worker of ``meridian serve --workers N`` does beyond a lone ``meridian serve``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from prometheus_client import generate_latest

from gateway.admin import ADMIN
from gateway.app import RunningGateway
from gateway.config import GatewayConfig
from gateway.state_keys import METRICS
from gateway.workers.metrics_view import METRICS_VIEW, host_metrics_view


@dataclass(frozen=True, slots=True)
class WorkerRole:
    index: int
    count: int
    runtime_dir: str
    state_socket: str | None  # the supervisor's host store; None: the config's own store
    admin_port: int | None = None  # the admin port the supervisor reserved for every worker
    grpc_port: int | None = None  # the gRPC port it reserved (listen.grpc_port set; 0 resolved)

    def socket(self, index: int) -> str:
        return str(Path(self.runtime_dir) / f"worker-{index}.sock")

    def adjust(self, config: GatewayConfig) -> GatewayConfig:
        """The config as this worker runs it: the ports the supervisor reserved, and state in
        the host store when the file keeps it in memory (applied to every reload too, so a
        reload never sees a 'state' change)."""
        update: dict[str, object] = {}
        if self.admin_port is not None:
            update["admin"] = config.admin.model_copy(update={"port": self.admin_port})
        if self.grpc_port is not None and config.listen.grpc_port is not None:
            # a reload that removes the gRPC port keeps it removed
            update["listen"] = config.listen.model_copy(update={"grpc_port": self.grpc_port})
        if self.state_socket is not None and config.state.backend == "memory":
            update["state"] = config.state.model_copy(
                update={"backend": "host", "url": f"unix://{self.state_socket}"}
            )
        return config.model_copy(update=update) if update else config

    def prepare(self, app: web.Application) -> None:
        """Before the app starts: ``/metrics`` answers for every worker of the host."""
        registry = app[METRICS].registry
        sockets = [self.socket(i) for i in range(self.count)]
        app[METRICS_VIEW] = host_metrics_view(
            lambda: generate_latest(registry), self.index, sockets
        )

    async def listen_privately(self, gateway: RunningGateway) -> None:
        """This worker's own Unix socket, where its peers fetch its metrics: an admin listener
        (in a directory only this user can enter)."""
        path = self.socket(self.index)
        gateway.app[ADMIN].ports.add(path)
        site = web.UnixSite(gateway.runner, path)
        await site.start()
