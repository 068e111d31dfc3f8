"""Hot reload: SIGHUP, or the config file changing, applies a new configuration in place.

The new file is loaded and validated first; if it is invalid the running configuration stays
and the log says why (file, key, what was expected). If it is valid a new
:class:`~gateway.relay_state.RelayState` is built — reusing the router, the signal hub and each
backend's connection pool wherever their configuration did not change — and swapped in with one
assignment. Requests already running keep the state they started on; once none is left, the
parts only the old state used (removed backends' pools, a replaced hub) are closed: removed
backends drain instead of being cut off. What only a restart can change (the listening
sockets, the body-size limit, shared state) is reported and left as it was.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from gateway.config import ConfigError, GatewayConfig, load_config
from gateway.config_warnings import config_warnings
from gateway.observability.events import gateway_event
from gateway.relay import Relay
from gateway.relay_state import RelayState, build_state
from gateway.signals.tasks import sleep_aligned

log = logging.getLogger("meridian.reload")


def _restart_only(old: GatewayConfig, new: GatewayConfig) -> list[str]:
    changed = []
    if old.listen != new.listen:
        changed.append("listen")
    if old.limits.max_body_bytes != new.limits.max_body_bytes:
        changed.append("limits.max_body_bytes")
    if old.door.lean != new.door.lean:  # the listener's protocol is chosen when it starts
        changed.append("door.lean")
    if getattr(old, "state", None) != getattr(new, "state", None):
        changed.append("state")
    return changed


def _file_digest(path: Path) -> bytes | None:
    try:
        return hashlib.sha256(path.read_bytes()).digest()
    except OSError:
        return None


class Reloader:
    def __init__(
        self,
        relay: Relay,
        path: str | Path,
        adjust: Callable[[GatewayConfig], GatewayConfig] | None = None,
    ) -> None:
        self.relay = relay
        self.path = Path(path)
        self._adjust = adjust or (lambda config: config)  # what the process overrides (workers)
        self._lock = asyncio.Lock()
        self._digest = _file_digest(self.path)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._watcher: asyncio.Task[None] | None = None
        self._watch_interval: float | None = None
        # The last state's retirement: each waits for the one before it, because a state
        # shares its pools and hub with its predecessor, whose requests may still use them.
        self._retiring: asyncio.Future[None] | None = None

    def request(self, reason: str) -> None:
        """From a signal handler: reload soon, in a task of its own."""
        self._spawn(self.reload(reason))

    async def reload(self, reason: str) -> bool:
        """Load, validate and apply the file; True when a new configuration was applied."""
        async with self._lock:
            self._digest = _file_digest(self.path)
            outcomes = self.relay.safety.reloads
            try:
                config = self._adjust(load_config(self.path))
                if config == self.relay.config:
                    log.info("config reload (%s): %s unchanged", reason, self.path)
                    outcomes.labels("unchanged").inc()
                    return False
                for warning in config_warnings(config):
                    log.warning("config reload: %s: %s", self.path, warning)
                state = build_state(
                    _keep_restart_only(self.relay.config, config), None, self.relay.state
                )
            except ConfigError as exc:
                gateway_event(
                    "config_reload_rejected",
                    f"config reload ({reason}) rejected, keeping the running config:\n{exc}",
                    logging.ERROR,
                    reason=reason,
                    path=str(self.path),
                )
                outcomes.labels("rejected").inc()
                return False
            await self._apply(state, reason)
            outcomes.labels("applied").inc()
        self.watch_every(config.reload.watch_interval_s)
        return True

    async def _apply(self, state: RelayState, reason: str) -> None:
        old_config = self.relay.config
        if state.fleet is not self.relay.state.fleet:
            await state.fleet.start()
        old = self.relay.swap(state)
        before = {b.name for b in old_config.backends}
        after = {b.name for b in state.config.backends}
        added, removed = sorted(after - before), sorted(before - after)
        gateway_event(
            "config_reloaded",
            f"config reloaded ({reason}): backends added={added or 'none'} "
            f"removed={removed or 'none'}; {old.active} request(s) finish on the old",
            reason=reason,
            backends_added=added,
            backends_removed=removed,
            in_flight_on_old=old.active,
        )
        self._retiring = self._spawn(self._retire(old, state, self._retiring))

    async def _retire(
        self, old: RelayState, new: RelayState, before: asyncio.Future[None] | None
    ) -> None:
        if before is not None:
            await asyncio.wait([before])  # its requests may still use what ``old`` shares
        await old.wait_idle()
        retired = old.pool.not_in(new.pool)
        for client in retired:
            await client.close()
        if old.fleet is not new.fleet:
            await old.fleet.stop()
        log.info("closed %d retired upstream pool(s)", len(retired))

    def watch_every(self, interval_s: float | None) -> None:
        """(Re)start polling the file at ``interval_s``; None stops it."""
        if interval_s == self._watch_interval:
            return
        if self._watcher is not None:
            self._watcher.cancel()
            self._watcher = None
        self._watch_interval = interval_s
        if interval_s is not None:
            self._watcher = asyncio.ensure_future(self.watch(interval_s))
            self._tasks.add(self._watcher)
            self._watcher.add_done_callback(self._tasks.discard)

    async def watch(self, interval_s: float) -> None:
        """Poll the file; reload when its bytes change."""
        while True:
            await sleep_aligned(interval_s)  # with the other housekeeping loops' wake-ups
            digest = _file_digest(self.path)
            if digest is not None and digest != self._digest:
                await self.reload("file changed")

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def _keep_restart_only(old: GatewayConfig, new: GatewayConfig) -> GatewayConfig:
    """``new`` with the parts only a restart can change put back as they run now."""
    changed = _restart_only(old, new)
    if not changed:
        return new
    log.warning("config reload: %s change(s) need a restart; keeping the running values", changed)
    limits = new.limits.model_copy(update={"max_body_bytes": old.limits.max_body_bytes})
    door = new.door.model_copy(update={"lean": old.door.lean})
    update: dict[str, object] = {"listen": old.listen, "limits": limits, "door": door}
    if hasattr(old, "state"):
        update["state"] = old.state
    return new.model_copy(update=update)
