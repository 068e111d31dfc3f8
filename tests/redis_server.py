"""Real ``redis-server`` processes for tests: standalone (TCP on a free loopback port, or a unix
socket) and a small Redis Cluster. Everything lives in a temp dir and is torn down on exit.

Never skips: if ``redis-server`` is missing the helper fails with the fix to apply.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

INSTALL_HINT = (
    "redis-server not found on PATH: run scripts/install_redis.sh "
    "(Debian/Ubuntu: apt-get install redis-server redis-tools)"
)


class RedisUnavailableError(RuntimeError):
    pass


def require_binary(name: str = "redis-server") -> str:
    path = shutil.which(name)
    if path is None:
        raise RedisUnavailableError(
            INSTALL_HINT if name == "redis-server" else f"{name}: " + INSTALL_HINT
        )
    return path


def free_port(with_bus: bool = False) -> int:
    """A loopback port that is free now (and, for cluster nodes, so is port + 10000)."""
    for _ in range(50):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if not with_bus or (port + 10000 < 65536 and _is_free(port + 10000)):
            return port
    raise RedisUnavailableError("could not find a free loopback port")


def _is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class _ExitedError(RedisUnavailableError):
    """redis-server exited at start (on a port picked here: it may have been taken)."""


class RedisServer:
    """One ``redis-server``. ``kill``/``restart`` keep the same address, ``pause``/``resume``
    send SIGSTOP/SIGCONT to simulate a server that hangs."""

    def __init__(
        self,
        workdir: Path,
        *,
        unix_socket: bool = False,
        password: str | None = None,
        extra_args: Sequence[str] = (),
        port: int | None = None,
    ) -> None:
        self.binary = require_binary()
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.unix_socket = workdir / "redis.sock" if unix_socket else None
        self.port = 0 if unix_socket else (port or free_port())
        # A port picked here is free when picked, not when redis-server binds it (another
        # process, or an outgoing connection's ephemeral port, may take it meanwhile): the
        # first start picks again if the server exits. A restart keeps its port: clients hold
        # the URL.
        self._may_repick = not unix_socket and port is None
        self.password = password
        self.extra_args = list(extra_args)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        if self.unix_socket is not None:
            return f"unix://{self.unix_socket}"
        return f"redis://127.0.0.1:{self.port}/0"

    def _argv(self) -> list[str]:
        argv = [self.binary, "--bind", "127.0.0.1", "--port", str(self.port)]
        argv += ["--save", "", "--appendonly", "no", "--dir", str(self.workdir)]
        argv += ["--daemonize", "no", "--logfile", str(self.workdir / "redis.log")]
        if self.unix_socket is not None:
            argv += ["--unixsocket", str(self.unix_socket), "--unixsocketperm", "700"]
        if self.password:
            argv += ["--requirepass", self.password]
        return argv + self.extra_args

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        for _ in range(4 if self._may_repick else 0):
            try:
                return self._start(timeout_s)
            except _ExitedError:
                self.port = free_port()
        return self._start(timeout_s)

    def _start(self, timeout_s: float) -> RedisServer:
        self.process = subprocess.Popen(self._argv(), stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise _ExitedError(
                    f"redis-server exited with {self.process.returncode}; see "
                    f"{self.workdir / 'redis.log'}"
                )
            if self.answers():
                self._may_repick = False
                return self
            time.sleep(0.02)
        self.kill()
        raise RedisUnavailableError(f"redis-server did not answer within {timeout_s}s")

    def answers(self) -> bool:
        """Whether the server replies to PING (any reply, including NOAUTH)."""
        try:
            if self.unix_socket is not None:
                sock = socket.socket(socket.AF_UNIX)
                sock.settimeout(0.5)
                sock.connect(str(self.unix_socket))
            else:
                sock = socket.create_connection(("127.0.0.1", self.port), timeout=0.5)
            with sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64)[:1] in (b"+", b"-")
        except OSError:
            return False

    def pause(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL: the server vanishes without a goodbye, as in a crash."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)  # a stopped process cannot be reaped
            self.process.kill()
            self.process.wait(timeout=5)
        if self.unix_socket is not None:
            with contextlib.suppress(FileNotFoundError):
                self.unix_socket.unlink()

    def restart(self) -> RedisServer:
        self.kill()
        return self.start()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()


class RedisClusterServers:
    """Three (or more) masters on loopback ports joined with ``redis-cli --cluster create``."""

    def __init__(self, workdir: Path, masters: int = 3) -> None:
        self.workdir = workdir
        self.nodes = [
            RedisServer(
                workdir / f"node{i}",
                port=free_port(with_bus=True),
                extra_args=[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    str(workdir / f"node{i}" / "nodes.conf"),
                    "--cluster-node-timeout",
                    "2000",
                ],
            )
            for i in range(masters)
        ]

    @property
    def urls(self) -> list[str]:
        return [f"redis://127.0.0.1:{node.port}" for node in self.nodes]

    def start(self, timeout_s: float = 20.0) -> RedisClusterServers:
        cli = require_binary("redis-cli")
        for node in self.nodes:
            node.start()
        addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
        created = subprocess.run(
            [cli, "--cluster", "create", *addresses, "--cluster-yes"],
            capture_output=True,
            timeout=timeout_s,
            check=False,
        )
        if created.returncode != 0:
            self.stop()
            raise RedisUnavailableError(
                "redis-cli --cluster create failed: " + created.stdout.decode()[-500:]
            )
        self._wait_ok(cli, timeout_s)
        return self

    def _wait_ok(self, cli: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            states = [
                subprocess.run(
                    [cli, "-p", str(node.port), "cluster", "info"],
                    capture_output=True,
                    timeout=5,
                    check=False,
                ).stdout
                for node in self.nodes
            ]
            if all(b"cluster_state:ok" in state for state in states):
                return
            time.sleep(0.1)
        self.stop()
        raise RedisUnavailableError(f"cluster not ok within {timeout_s}s")

    def stop(self) -> None:
        for node in self.nodes:
            node.kill()

    def __enter__(self) -> RedisClusterServers:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
