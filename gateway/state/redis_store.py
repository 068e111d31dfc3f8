"""The Redis state store (standalone or Redis Cluster): bounded, expiring, pipelined.

Every call runs under a short timeout and maps every failure to ``StateUnavailable``; the
circuit breaker around these calls lives in ``SharedStateSync``. Layout: see ``keys.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar, cast

from redis.asyncio import Redis, RedisCluster
from redis.exceptions import RedisError

from gateway.state.cancel import raise_if_cancelled
from gateway.state.errors import StateUnavailable, unavailable
from gateway.state.keys import KeyLayout, decode_block, encode_block, to_ms
from gateway.state.lua import LEASE_EXTEND, LEASE_RELEASE, TOKEN_BUCKET
from gateway.state.records import (
    Ejection,
    SharedPull,
    SignalRecord,
    TimedT,
    TokenResult,
    WriteBatch,
    decode_batch,
    decode_ejection,
    decode_signal,
    encode_batch,
    encode_ejection,
    encode_signal,
)
from gateway.state.redis_summary import summarise
from gateway.state.store import Retention, StoreSummary

T = TypeVar("T")
_ZADD_CHUNK = 2000  # members per ZADD, so one command never carries a huge payload
_PULL_PAGE = 5000  # blocks per read: tens of ms of decoding, well inside one op timeout
# _CLIENT_FAILURES: every failure of a store call becomes StateUnavailable, not only
# RedisError/OSError: the client library has raised AttributeError and KeyError from
# connections torn down by a concurrent timeout and from an unfilled cluster slot cache.
# A replica must degrade on those, never lose a background task to them.


class RedisStore:
    def __init__(
        self,
        client: Redis | RedisCluster,
        layout: KeyLayout,
        retention: Retention,
        op_timeout_s: float,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._client = client
        self._keys = layout
        self._keep = retention
        self._timeout_s = op_timeout_s
        self._wall = wall

    @property
    def kind(self) -> str:
        return "redis-cluster" if isinstance(self._client, RedisCluster) else "redis"

    @property
    def events_lossless(self) -> bool:
        return False  # redis-py may resubscribe after a broken connection without telling us

    async def _op(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        try:
            async with asyncio.timeout(self._timeout_s):
                return await call()
        except TimeoutError as exc:
            raise_if_cancelled()
            raise unavailable(f"{what}: no answer within {self._timeout_s:.3g}s") from exc
        except Exception as exc:  # see _CLIENT_FAILURES
            raise_if_cancelled()
            raise unavailable(f"{what}: {type(exc).__name__}: {exc}") from exc

    async def ping(self) -> None:
        await self._op("ping", self._client.ping)

    async def push(self, batch: WriteBatch) -> None:
        pipe = self._client.pipeline(transaction=False)
        self._queue_in_flight(pipe, batch)
        self._queue_prefix(pipe, batch)
        self._queue_records(pipe, batch)
        payload = encode_batch(batch)
        await self._op("push", pipe.execute)
        await self._op("publish", lambda: self._client.publish(self._keys.channel(), payload))

    def _queue_in_flight(self, pipe: Any, batch: WriteBatch) -> None:
        if batch.in_flight is None:
            return
        key, ttl_ms, now_ms = self._keys.in_flight(batch.replica), self._ttl_ms(), to_ms(batch.at)
        # Absolute counts, zeros included, written by their one owner: no read-modify-write.
        if batch.in_flight:
            pipe.hset(key, mapping=dict(batch.in_flight))
            pipe.pexpire(key, ttl_ms)
        pipe.zadd(self._keys.replicas(), {batch.replica: now_ms})
        pipe.zremrangebyscore(self._keys.replicas(), "-inf", now_ms - ttl_ms)

    def _queue_prefix(self, pipe: Any, batch: WriteBatch) -> None:
        ttl_ms = to_ms(self._keep.prefix_ttl_s)
        cutoff = to_ms(batch.at) - ttl_ms
        for backend, blocks in batch.prefix.items():
            key = self._keys.prefix_index(backend)
            items = [(encode_block(h), to_ms(t)) for h, t in blocks.items() if to_ms(t) > cutoff]
            for start in range(0, len(items), _ZADD_CHUNK):
                pipe.zadd(key, dict(items[start : start + _ZADD_CHUNK]), gt=True)
            pipe.zremrangebyscore(key, "-inf", cutoff)
            pipe.zremrangebyrank(key, 0, -(self._keep.prefix_blocks_per_backend + 1))
            pipe.pexpire(key, ttl_ms)
            pipe.zadd(self._keys.backends(), {backend: to_ms(batch.at)}, gt=True)
        if batch.prefix:
            pipe.zremrangebyscore(self._keys.backends(), "-inf", cutoff)

    def _queue_records(self, pipe: Any, batch: WriteBatch) -> None:
        if batch.signals:
            mapping = {b: encode_signal(s) for b, s in batch.signals.items()}
            pipe.hset(self._keys.signals(), mapping=mapping)
            pipe.pexpire(self._keys.signals(), to_ms(self._keep.signal_ttl_s))
        if batch.ejections:
            mapping = {b: encode_ejection(e) for b, e in batch.ejections.items()}
            pipe.hset(self._keys.ejections(), mapping=mapping)
            pipe.pexpire(self._keys.ejections(), to_ms(self._keep.ejection_ttl_s))

    def _ttl_ms(self) -> int:
        return to_ms(self._keep.in_flight_ttl_s)

    async def pull(self, since: float, now: float) -> SharedPull:
        """A few small round trips, then each backend's blocks in pages: every round trip has
        its own timeout and the event loop runs between pages, so even a full pull of large
        indexes neither trips the timeout nor stalls the request path."""
        replicas, backends, signals, ejections = await self._op(
            "pull", lambda: self._pull_head(now)
        )
        in_flight = await self._op("pull", lambda: self._pull_in_flight(replicas))
        oldest = to_ms(max(since, now - self._keep.prefix_ttl_s))
        prefix = {backend: await self._pull_blocks(backend, oldest) for backend in backends}
        return SharedPull(in_flight=in_flight, prefix=prefix, signals=signals, ejections=ejections)

    async def _pull_head(
        self, now: float
    ) -> tuple[list[str], list[str], dict[str, SignalRecord], dict[str, Ejection]]:
        keys, keep = self._keys, self._keep
        head = self._client.pipeline(transaction=False)
        head.zrangebyscore(keys.replicas(), to_ms(now - keep.in_flight_ttl_s), "+inf")
        head.zrangebyscore(keys.backends(), to_ms(now - keep.prefix_ttl_s), "+inf")
        head.hgetall(keys.signals())
        head.hgetall(keys.ejections())
        replicas, backends, signals, ejections = await head.execute()
        return (
            [r.decode() for r in replicas],
            [b.decode() for b in backends],
            _live(signals, decode_signal, now, keep.signal_ttl_s),
            _live(ejections, decode_ejection, now, keep.ejection_ttl_s),
        )

    async def _pull_in_flight(self, replicas: list[str]) -> dict[str, dict[str, int]]:
        if not replicas:
            return {}
        body = self._client.pipeline(transaction=False)
        for replica in replicas:
            body.hgetall(self._keys.in_flight(replica))
        results = await body.execute()
        return {
            replica: {b.decode(): int(n) for b, n in counts.items()}
            for replica, counts in zip(replicas, results, strict=True)
            if counts
        }

    async def _pull_blocks(self, backend: str, oldest_ms: int) -> dict[int, float]:
        # Offsets can shift while a writer trims the old end; a block missed here is seen
        # again by the next refresh if it is still in use. The index is approximate anyway.
        key, offset = self._keys.prefix_index(backend), 0
        blocks: dict[int, float] = {}

        async def read_page() -> list[tuple[bytes, float]]:
            page = await self._client.zrangebyscore(
                key, oldest_ms, "+inf", start=offset, num=_PULL_PAGE, withscores=True
            )
            return cast(list[tuple[bytes, float]], page)

        while True:
            page = await self._op("pull", read_page)
            blocks.update((decode_block(raw), score / 1000) for raw, score in page)
            if len(page) < _PULL_PAGE:
                return blocks
            offset += _PULL_PAGE
            await asyncio.sleep(0)  # let requests run between pages

    async def events(self) -> AsyncIterator[WriteBatch | None]:
        if isinstance(self._client, RedisCluster):
            # ClusterPubSub picks its node from the slot cache, which must be loaded first.
            await self._op("initialize", self._client.initialize)
        pubsub = self._client.pubsub()
        try:
            await self._op("subscribe", lambda: pubsub.subscribe(self._keys.channel()))
            yield None
            while True:
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                raise_if_cancelled()
                if message is None:
                    yield None
                elif message.get("type") == "message":
                    yield decode_batch(message["data"])
        except StateUnavailable:
            raise
        except Exception as exc:  # see _CLIENT_FAILURES
            raise_if_cancelled()
            raise unavailable(f"events: {type(exc).__name__}: {exc}") from exc
        finally:
            await _close_quietly(pubsub, self._timeout_s)

    async def forget_replica(self, replica: str) -> None:
        async def forget() -> None:
            await self._client.delete(self._keys.in_flight(replica))
            await self._client.zrem(self._keys.replicas(), replica)

        await self._op("forget_replica", forget)

    async def try_lease(self, name: str, holder: str, ttl_s: float) -> bool:
        key, ttl_ms = self._keys.lease(name), to_ms(ttl_s)

        async def acquire_or_extend() -> bool:
            if await LEASE_EXTEND.run(self._client, [key], [holder, ttl_ms]):
                return True
            return bool(await self._client.set(key, holder, nx=True, px=ttl_ms))

        return await self._op("try_lease", acquire_or_extend)

    async def release_lease(self, name: str, holder: str) -> bool:
        key = self._keys.lease(name)
        released = await self._op(
            "release_lease", lambda: LEASE_RELEASE.run(self._client, [key], [holder])
        )
        return bool(released)

    async def take_tokens(
        self, bucket: str, rate_per_s: float, burst: float, cost: float = 1.0
    ) -> TokenResult:
        if rate_per_s <= 0 or burst <= 0:
            raise ValueError("take_tokens: rate_per_s and burst must be > 0")
        key = self._keys.bucket(bucket)
        allowed, left_raw = await self._op(
            "take_tokens", lambda: TOKEN_BUCKET.run(self._client, [key], [rate_per_s, burst, cost])
        )
        left = float(left_raw)
        retry = 0.0 if allowed else max(0.0, (cost - left) / rate_per_s)
        return TokenResult(bool(allowed), left, retry)

    async def summary(self) -> StoreSummary:
        now = self._wall()
        live = await self.pull(0.0, now)
        return await self._op(
            "summary", lambda: summarise(self._client, self._keys, self.kind, live)
        )

    async def close(self) -> None:
        await _close_quietly(self._client, self._timeout_s)


def _live(
    raw: Mapping[bytes, bytes], decode: Callable[[bytes], TimedT], now: float, ttl_s: float
) -> dict[str, TimedT]:
    out: dict[str, TimedT] = {}
    for backend, value in raw.items():
        try:
            record = decode(value)
        except StateUnavailable:
            continue  # one unreadable record must not hide the others
        if now - record.at <= ttl_s:
            out[backend.decode()] = record
    return out


async def _close_quietly(closable: Any, timeout_s: float) -> None:
    # Closing a connection to a dead or paused server has nothing left to tell us, and must
    # not hang a shutdown.
    with contextlib.suppress(RedisError, OSError, RuntimeError, TimeoutError):
        async with asyncio.timeout(timeout_s):
            await closable.aclose()
