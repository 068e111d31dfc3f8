"""What ``meridian state inspect`` reports about a Redis store: key counts and memory per kind,
lease holders, in-flight totals and prefix index sizes. Operator tool; uses SCAN, never KEYS."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis, RedisCluster

from gateway.state.keys import KeyLayout
from gateway.state.records import SharedPull
from gateway.state.store import StoreSummary

_MEMORY_SAMPLES_PER_KIND = 64  # MEMORY USAGE on a sample, extrapolated to the kind's count


async def summarise(
    client: Redis | RedisCluster, keys: KeyLayout, kind: str, live: SharedPull
) -> StoreSummary:
    by_kind: dict[str, list[bytes]] = {}
    async for key in client.scan_iter(match=keys.pattern(), count=1000):
        by_kind.setdefault(keys.kind_of(key.decode()), []).append(key)
    memory: dict[str, int] = {}
    for kind_name, members in by_kind.items():
        sample = members[:_MEMORY_SAMPLES_PER_KIND]
        sizes = [await client.memory_usage(k) or 0 for k in sample]
        memory[kind_name] = int(sum(sizes) * len(members) / max(1, len(sample)))
    leases: dict[str, str] = {}
    for key in by_kind.get("lease", []):
        holder = await client.get(key)
        if holder is not None:
            leases[KeyLayout.tagged_name(key.decode())] = _text(holder)
    prefix_blocks = {}
    for key in by_kind.get("pfx", []):
        prefix_blocks[KeyLayout.tagged_name(key.decode())] = int(await client.zcard(key))
    totals: dict[str, int] = {}
    for counts in live.in_flight.values():
        for backend, count in counts.items():
            totals[backend] = totals.get(backend, 0) + count
    return StoreSummary(
        backend=kind,
        key_counts={k: len(v) for k, v in sorted(by_kind.items())},
        memory_bytes=memory,
        leases=leases,
        in_flight=totals,
        replicas=tuple(sorted(live.in_flight)),
        prefix_blocks=prefix_blocks,
        server=await _server_info(client),
    )


async def _server_info(client: Redis | RedisCluster) -> dict[str, str]:
    if isinstance(client, RedisCluster):
        per_node: dict[str, Any] = await client.info("memory", target_nodes=RedisCluster.PRIMARIES)
        used = sum(int(info.get("used_memory", 0)) for info in per_node.values())
        versions: dict[str, Any] = await client.info("server", target_nodes=RedisCluster.PRIMARIES)
        version = next((info.get("redis_version") for info in versions.values()), "?")
        return {
            "redis_version": str(version),
            "nodes": str(len(per_node)),
            "used_memory": str(used),
        }
    server: dict[str, Any] = await client.info("server")
    mem: dict[str, Any] = await client.info("memory")
    return {
        "redis_version": str(server.get("redis_version", "?")),
        "used_memory": str(mem.get("used_memory", "?")),
        "maxmemory": str(mem.get("maxmemory", "?")),
        "maxmemory_policy": str(mem.get("maxmemory_policy", "?")),
    }


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
