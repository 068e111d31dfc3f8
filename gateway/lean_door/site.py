"""The public listener with the lean door in front of aiohttp's server."""

from __future__ import annotations

import asyncio

from aiohttp import web
from aiohttp.web_runner import BaseSite

from gateway.lean_door.connection import LeanConnection
from gateway.lean_door.door import LeanDoor


class LeanSite(web.TCPSite):
    """``web.TCPSite`` whose connections start as :class:`LeanConnection` (plain TCP only)."""

    def __init__(self, runner: web.AppRunner, lean: LeanDoor, *args: object, **kwargs: object):
        super().__init__(runner, *args, **kwargs)  # type: ignore[arg-type]
        self._lean = lean

    async def start(self) -> None:
        await BaseSite.start(self)  # registers the site with its runner
        lean = self._lean
        self._server = await asyncio.get_running_loop().create_server(
            lambda: LeanConnection(lean),
            self._host,
            self._port,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
        )
