"""The buckets of every key and tenant: admit a request before any upstream work, charge its
completion tokens once known. Never awaits; bounded (LRU over ``max_tracked`` buckets, and a
bucket that has refilled is as good as a new one, so dropping it forgets nothing): the idle
sweep (gateway/idle_sweep.py) drops refilled buckets, so idle keys and tenants cost nothing."""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter

from gateway.errors import ApiError
from gateway.quota.allowance import Allowance, AllowanceLink
from gateway.quota.bucket import Bucket
from gateway.quota.config import QuotaConfig, QuotaLimits

BucketKey = tuple[str, str, str]  # (scope: key | tenant, name, dimension: requests | tokens)
AnyBucket = Bucket | Allowance


def _reset(seconds: float) -> str:
    return f"{max(0.0, seconds):.3f}s"


class Quotas:
    def __init__(
        self,
        config: QuotaConfig,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,
        link: AllowanceLink | None = None,
    ) -> None:
        """``link``: share every bucket with the other replicas through the state store
        (gateway/quota/allowance.py; its refiller runs in the background); None: this
        replica's own buckets."""
        self.config = config
        self.link = link
        self.enabled = bool(config.per_key or config.per_tenant or config.tenants)
        self._clock = clock
        self._buckets: OrderedDict[BucketKey, AnyBucket] = OrderedDict()
        self._quiet: dict[BucketKey, tuple[Allowance, float]] = {}  # allowances at the last sweep
        self.refused = Counter(
            "meridian_quota_refused",
            "Requests refused with 429 by a key's or tenant's quota, before any upstream call",
            ["scope", "dimension"],
            registry=registry,
        )
        self.fail_open = Counter(
            "meridian_quota_fail_open",
            "Requests admitted on this replica's own limits because the shared token buckets' "
            "store did not answer (quotas fail open to per-replica limits)",
            registry=registry,
        )

    def __len__(self) -> int:
        return len(self._buckets)

    def forget_full(self, step: int = 5_000) -> Iterator[int]:
        """Drop every bucket that has refilled (it is as good as a new one), ``step`` buckets
        at a time: yields how many each step dropped, so a caller can let the event loop run
        in between. Buckets used meanwhile are checked at their own time. A shared bucket's
        allowance goes once unused for a whole sweep interval with no claim under way (its
        unspent tokens go back to the store's bucket by refilling, as after an LRU eviction)."""
        keys = list(self._buckets)
        previous, self._quiet = self._quiet, {}
        for start in range(0, len(keys), step):
            now, dropped = self._clock(), 0
            for key in keys[start : start + step]:
                bucket = self._buckets.get(key)
                if bucket is None:
                    continue
                if isinstance(bucket, Allowance):
                    if not self._quiet_since(key, bucket, previous):
                        continue
                    bucket.dropped = True  # the refiller claims nothing more for it
                elif not bucket.is_full(now):
                    continue
                del self._buckets[key]
                dropped += 1
            yield dropped

    def _quiet_since(
        self,
        key: BucketKey,
        allowance: Allowance,
        previous: dict[BucketKey, tuple[Allowance, float]],
    ) -> bool:
        """Unused since the previous sweep: every use or claim moves ``level``."""
        if allowance.queued or allowance.local is not None:
            return False
        if previous.get(key) == (allowance, allowance.level):
            return True
        self._quiet[key] = (allowance, allowance.level)
        return False

    def _limits(self, scope: str, name: str) -> QuotaLimits | None:
        if scope == "key":
            return self.config.per_key
        return self.config.tenants.get(name, self.config.per_tenant)

    def _bucket(self, key: BucketKey, limits: QuotaLimits, now: float) -> AnyBucket | None:
        found = self._buckets.get(key)
        if found is not None:
            self._buckets.move_to_end(key)
            return found
        if key[2] == "requests":
            if limits.rps is None:
                return None
            rate, burst = limits.rps, limits.burst or max(1.0, limits.rps)
        else:
            if limits.tokens_per_minute is None:
                return None
            rate, burst = limits.tokens_per_minute / 60.0, float(limits.tokens_per_minute)
        bucket: AnyBucket
        if self.link is None:
            bucket = Bucket.full(rate, burst, now)
        else:
            bucket = Allowance("quota:" + ":".join(key), rate, burst, self.link)
        self._buckets[key] = bucket
        while len(self._buckets) > self.config.max_tracked:
            _, dropped = self._buckets.popitem(last=False)  # least recently used
            if isinstance(dropped, Allowance):
                dropped.dropped = True  # the refiller claims nothing more for it
        return bucket

    def _scopes(self, key_id: str | None, tenant: str) -> list[tuple[str, str, QuotaLimits]]:
        scopes = []
        for scope, name in (("key", key_id), ("tenant", tenant)):
            if name is None:
                continue
            limits = self._limits(scope, name)
            if limits is not None:
                scopes.append((scope, name, limits))
        return scopes

    def admit(self, key_id: str | None, tenant: str, prompt_tokens: int) -> None:
        """Take one request and ``prompt_tokens`` from every bucket, or none: 429 if short."""
        if not self.enabled:
            return
        now = self._clock()
        wanted: list[tuple[BucketKey, AnyBucket, float]] = []
        for scope, name, limits in self._scopes(key_id, tenant):
            for dimension, cost in (("requests", 1.0), ("tokens", float(prompt_tokens))):
                bucket = self._bucket((scope, name, dimension), limits, now)
                if bucket is not None:
                    bucket.refill(now)
                    wanted.append(((scope, name, dimension), bucket, cost))
        short = [(key, bucket, cost) for key, bucket, cost in wanted if bucket.tokens < cost]
        if short:
            for _, bucket, cost in short:
                bucket.missed(cost)
            raise self._refusal(short, wanted)
        for _, bucket, cost in wanted:
            bucket.take(cost, now)
        if self.link is not None and self.link.away and wanted:
            self.fail_open.inc()

    def charge(self, key_id: str | None, tenant: str, tokens: int) -> None:
        """Completion tokens, once the response is over (they slow the next request down)."""
        if not self.enabled or tokens <= 0:
            return
        now = self._clock()
        for scope, name, limits in self._scopes(key_id, tenant):
            bucket = self._bucket((scope, name, "tokens"), limits, now)
            if bucket is not None:
                bucket.debit(float(tokens), now)

    def _refusal(
        self,
        short: list[tuple[BucketKey, AnyBucket, float]],
        wanted: list[tuple[BucketKey, AnyBucket, float]],
    ) -> ApiError:
        key, bucket, cost = max(short, key=lambda item: item[1].wait_s(item[2]))
        self.refused.labels(key[0], key[2]).inc()
        wait = bucket.wait_s(cost)
        headers: dict[str, str] = {}
        for (_, _, dimension), each, _ in wanted:  # the tightest of each dimension wins
            limit_name = f"x-ratelimit-limit-{dimension}"
            remaining = str(max(0, math.floor(each.tokens)))
            if limit_name not in headers or int(
                headers[f"x-ratelimit-remaining-{dimension}"]
            ) > int(remaining):
                headers[limit_name] = str(math.floor(each.burst))
                headers[f"x-ratelimit-remaining-{dimension}"] = remaining
                headers[f"x-ratelimit-reset-{dimension}"] = _reset(each.reset_s())
        too_big = cost > bucket.burst
        what = "requests" if key[2] == "requests" else "tokens"
        message = (
            f"this request needs more tokens than the {key[0]}'s whole per-minute quota"
            if too_big
            else f"the {key[0]}'s {what} quota is used up; retry after {max(wait, 0.001):.3f}s"
        )
        return ApiError(
            429,
            message,
            "rate_limit_error",
            "quota_exceeded",
            None,
            max(wait, 0.001),
            tuple(headers.items()),
        )


QUOTAS = web.AppKey("quotas", Quotas)
