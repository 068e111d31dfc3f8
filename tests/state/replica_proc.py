"""A replica in its own process, for crash tests: it contends for one lease, holds in-flight
requests and notes a prefix, and prints one JSON status line whenever its status changes.

    python -m tests.state.replica_proc CONFIG_JSON REPLICA_ID
"""

from __future__ import annotations

import asyncio
import sys

import orjson

from gateway.state.config import StateConfig
from gateway.state.sync import SharedStateSync

LEASE = "probe:region-a"


async def run(config: StateConfig, replica_id: str) -> None:
    sync = SharedStateSync.from_config(config, replica_id=replica_id)
    sync.contend([LEASE])
    await sync.start()
    sync.note_in_flight("a1", +4)
    sync.note_prefix("a1", [7001, 7002, 7003])
    last: bytes = b""
    while True:
        line = orjson.dumps({"leader": sync.is_leader(LEASE), "status": str(sync.health().status)})
        if line != last:
            sys.stdout.write(line.decode() + "\n")
            sys.stdout.flush()
            last = line
        await asyncio.sleep(0.01)


if __name__ == "__main__":
    asyncio.run(run(StateConfig.model_validate_json(sys.argv[1]), sys.argv[2]))
