"""Server-side scripts: run with EVALSHA, falling back to EVAL when the script cache is empty
(after a restart, a failover, or on a cluster node that never saw it). Each touches one key."""

from __future__ import annotations

import hashlib
from typing import Any

from redis.asyncio import Redis, RedisCluster
from redis.exceptions import NoScriptError


class LuaScript:
    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()

    async def run(
        self, client: Redis | RedisCluster, keys: list[str], args: list[str | int | float]
    ) -> Any:
        try:
            return await client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            return await client.eval(self.source, len(keys), *keys, *args)


# KEYS[1] bucket; ARGV rate/s, burst, cost. The server clock (TIME) is the only clock, so
# replicas with skewed clocks still share one bucket fairly. Floats travel as strings
# because Lua numbers are truncated to integers in replies.
TOKEN_BUCKET = LuaScript(
    """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rate = tonumber(ARGV[1]) / 1000
local burst = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1])
local ts = tonumber(state[2])
if tokens == nil or ts == nil then
  tokens = burst
  ts = now
end
tokens = math.min(burst, tokens + math.max(0, now - ts) * rate)
local allowed = 0
if tokens >= cost then
  tokens = tokens - cost
  allowed = 1
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', now)
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate) + 1000)
return {allowed, tostring(tokens)}
"""
)

# KEYS[1] lease; ARGV holder, ttl ms. Extend only a lease we still hold.
LEASE_EXTEND = LuaScript(
    """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
)

# KEYS[1] lease; ARGV holder. Release only a lease we still hold.
LEASE_RELEASE = LuaScript(
    """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""
)
