"""A listener other than the public HTTP one that could not bind, named by its own address.

``meridian serve`` reports a failed bind as "cannot listen on HOST:PORT". The gRPC listener
binds inside the app's start-up, so without this its failure was reported under the HTTP
port, with advice to change ``--port``.
"""

from __future__ import annotations

import os


class ListenerBindError(OSError):
    """``where`` (host:port) could not be bound; ``setting`` is the config key that sets it."""

    def __init__(self, where: str, setting: str, errno_: int | None = None) -> None:
        self.where, self.setting = where, setting
        self.reason = os.strerror(errno_).lower() if errno_ else "could not bind"
        super().__init__(errno_ or 0, f"{setting} {where}: {self.reason}")
