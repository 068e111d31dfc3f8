"""Where each kind of state lives in Redis (the table in README.md mirrors this module).

Per-backend, per-replica, per-lease and per-bucket keys carry a Redis Cluster hash tag
(``{...}``) around their variable part, so every multi-command step on one of them stays in
one slot while different backends spread over the cluster. No Lua script touches more than
one key, so no two tagged keys ever need to share a slot.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_BLOCK = struct.Struct(">Q")
_U64 = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class KeyLayout:
    prefix: str

    def replicas(self) -> str:
        return f"{self.prefix}:replicas"  # zset replica -> last heartbeat (ms)

    def in_flight(self, replica: str) -> str:
        return f"{self.prefix}:inflight:{{{replica}}}"  # hash backend -> count, PX = TTL

    def backends(self) -> str:
        return f"{self.prefix}:backends"  # zset backend -> last prefix write (ms)

    def prefix_index(self, backend: str) -> str:
        return f"{self.prefix}:pfx:{{{backend}}}"  # zset block hash -> last seen (ms)

    def signals(self) -> str:
        return f"{self.prefix}:signals"  # hash backend -> SignalRecord JSON

    def ejections(self) -> str:
        return f"{self.prefix}:eject"  # hash backend -> Ejection JSON

    def lease(self, name: str) -> str:
        return f"{self.prefix}:lease:{{{name}}}"  # string holder, PX = lease TTL

    def bucket(self, name: str) -> str:
        return f"{self.prefix}:tb:{{{name}}}"  # hash tokens, ts (ms, server clock)

    def channel(self) -> str:
        return f"{self.prefix}:events"  # pub/sub: one encoded WriteBatch per flush

    def pattern(self) -> str:
        return f"{self.prefix}:*"

    def kind_of(self, key: str) -> str:
        """The kind segment right after the prefix ("pfx", "lease", ...)."""
        rest = key[len(self.prefix) + 1 :]
        return rest.split(":", 1)[0]

    @staticmethod
    def tagged_name(key: str) -> str:
        """The variable part of a tagged key (lease name, backend, replica)."""
        start, end = key.find("{"), key.rfind("}")
        return key[start + 1 : end] if 0 <= start < end else key


def encode_block(block: int) -> bytes:
    return _BLOCK.pack(block & _U64)


def decode_block(raw: bytes) -> int:
    return int.from_bytes(raw, "big")


def to_ms(seconds: float) -> int:
    return int(seconds * 1000)
