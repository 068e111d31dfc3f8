"""The requests the relay core holds right now, and where each one is in its lifecycle.

A request that seems stuck says where it is: the admin status (``/status.json``, section
``requests``) counts the live requests by lifecycle state and lists the oldest with their
state and age. Registration is one dict insert and one delete per request; nothing is
computed until someone asks.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.lifecycle.handles import RequestHold

OLDEST_SHOWN = 5


class LiveRequests:
    __slots__ = ("_holds",)

    def __init__(self) -> None:
        self._holds: dict[int, RequestHold] = {}

    def __len__(self) -> int:
        return len(self._holds)

    def add(self, hold: RequestHold) -> None:
        self._holds[id(hold)] = hold

    def discard(self, hold: RequestHold) -> None:
        self._holds.pop(id(hold), None)

    def summary(self, now: float | None = None) -> dict[str, Any]:
        """Live requests by state, and the oldest few: id, state, attempts live, age."""
        now = time.perf_counter() if now is None else now
        holds = list(self._holds.values())
        by_state = Counter(hold.lifecycle.state.value for hold in holds)
        oldest = sorted(holds, key=lambda hold: hold.started_at)[:OLDEST_SHOWN]
        return {
            "live": len(holds),
            "by_state": dict(sorted(by_state.items())),
            "oldest": [
                {
                    "request_id": hold.request_id,
                    "state": hold.lifecycle.state.value,
                    "live_attempts": hold.lifecycle.live_attempts,
                    "age_s": round(now - hold.started_at, 3),
                }
                for hold in oldest
            ],
        }
