"""The seeded request trace every policy replays: arrivals, prompts and their prefix hashes.

Prompts are synthetic text rendered as ``routing.prefix.canonical_chat`` would (a tenant's
shared system prompt, then the user's question). A system prompt's full blocks are hashed
once per (tenant, prompt); each request only hashes the tail of the system prompt plus its
question, continuing the same chain.

The trace is lazy: arrival times and origins are kept as compact arrays (about 10 bytes a
request), and :meth:`Trace.requests` regenerates the requests themselves, identically, each
time it is iterated. A million-request trace therefore costs ~10 MB rather than gigabytes of
hash tuples, at the price of hashing the prompts once per policy run.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import xxhash

from loadtests.sim.scenario import Bursts, ClientPopulation, ExtraLoad, Range, Scenario, Workload
from routing.prefix import BYTES_PER_TOKEN, DEFAULT_BLOCK_TOKENS, block_hashes, tenant_seed
from routing.types import LatencyClass

_SYSTEM_OPEN = b"\x1esystem\x1f"
_USER_OPEN = b"\x1euser\x1f"


@dataclass(frozen=True, slots=True)
class TraceRequest:
    id: int
    at: float
    origin: str  # the client's region; it talks to a gateway there
    gateway: int  # index into the simulation's gateway list
    workload: str
    tenant: str
    prompt_tokens: int
    prefix_hashes: tuple[int, ...]  # full blocks of the shared system prompt (shared object)
    suffix_hashes: tuple[int, ...]  # the rest of this request's chain
    max_tokens: int
    latency_class: LatencyClass
    ttft_objective_ms: float | None = None  # p90 TTFT objective (docs/slo.md)
    deadline_ms: float | None = None  # first-token deadline (early rejection)
    # The chain the engine hashes (a replay's, without the tenant salt: replay_trace.py);
    # empty: the engine hashes what the gateway does.
    engine_hashes: tuple[int, ...] = ()

    @property
    def long_form(self) -> bool:
        return self.latency_class is LatencyClass.LONG_FORM

    @property
    def hashes(self) -> tuple[int, ...]:
        return self.prefix_hashes + self.suffix_hashes


@dataclass(frozen=True, slots=True)
class BackgroundRequest:
    """Load that bypasses Meridian (a timed ``extra_load`` event)."""

    at: float
    region: str
    slot: int  # picks one of the region's backends: slot % count
    prompt_tokens: int
    max_tokens: int


class Trace:
    """Arrivals known up front; request contents regenerated on every :meth:`requests` pass."""

    def __init__(
        self,
        scenario: Scenario,
        arrivals: npt.NDArray[np.float64],
        populations: npt.NDArray[np.int16],
        background: tuple[BackgroundRequest, ...],
        block_tokens: int,
    ) -> None:
        self.scenario = scenario
        self.arrivals = arrivals  # time of each request, ascending
        self.populations = populations  # index into sorted(scenario.clients) of each request
        self.regions: tuple[str, ...] = tuple(scenario.regions)
        region_of = [
            self.regions.index(scenario.clients[k].region) for k in sorted(scenario.clients)
        ]
        # index into ``regions`` of each request's client region
        self.origins: npt.NDArray[np.int16] = np.asarray(region_of, np.int16)[populations]
        self.background = background
        self.block_tokens = block_tokens
        self.gateways, self._gateways_by_region = _gateways(scenario)  # region of each gateway

    def __len__(self) -> int:
        return len(self.arrivals)

    @property
    def span_s(self) -> float:
        return float(self.arrivals[-1]) if len(self.arrivals) else 0.0

    def requests(self) -> Iterator[TraceRequest]:
        """Every request in arrival order; the same sequence on every call."""
        scenario, seed = self.scenario, self.scenario.seed
        samplers = {
            name: _WorkloadSampler(name, workload, seed, self.block_tokens)
            for name, workload in sorted(scenario.workloads.items())
        }
        choices = [
            _choices(scenario.clients[key].workloads or sorted(samplers), scenario)
            for key in sorted(scenario.clients)
        ]
        by_region = self._gateways_by_region
        rng = random.Random(f"{seed}/requests")
        columns = zip(
            self.arrivals.tolist(), self.populations.tolist(), self.origins.tolist(), strict=True
        )
        for i, (t, population, origin) in enumerate(columns):
            region = self.regions[origin]
            names, cum = choices[population]
            sampler = samplers[names[bisect.bisect(cum, rng.random() * cum[-1])]]
            tenant, tokens, shared, own, output = sampler.sample(rng)
            gateways = by_region.get(region) or [0]
            workload = sampler.workload
            yield TraceRequest(
                i, t, region, gateways[rng.randrange(len(gateways))], sampler.name, tenant,
                tokens, shared, own, output, workload.latency_class,
                workload.ttft_objective_ms, workload.deadline_ms,
            )  # fmt: skip


def continue_chain(data: bytes, seed: int, block_tokens: int = DEFAULT_BLOCK_TOKENS) -> list[int]:
    """``routing.prefix.block_hashes`` from a mid-chain ``seed`` (the previous block's hash)."""
    size = block_tokens * BYTES_PER_TOKEN
    hash_block = xxhash.xxh3_64_intdigest
    out: list[int] = []
    for start in range(0, len(data) - size + 1, size):
        seed = hash_block(data[start : start + size], seed)
        out.append(seed)
    return out


@dataclass(frozen=True, slots=True)
class _SharedPrompt:
    full_hashes: tuple[int, ...]
    tail: bytes  # bytes after the last full block
    seed: int  # chain state at the end of the full blocks
    length: int  # bytes


def _text(rng: random.Random, tokens: int) -> bytes:
    """ASCII filler of ``tokens`` x 4 bytes (hex keeps it printable and incompressible)."""
    size = tokens * BYTES_PER_TOKEN
    return rng.randbytes(-(-size // 2)).hex().encode()[:size]


def _shared_prompt(tenant: str, text: bytes, block_tokens: int) -> _SharedPrompt:
    canonical = _SYSTEM_OPEN + text + _USER_OPEN
    full = block_hashes(canonical, tenant, block_tokens)
    cut = len(full) * block_tokens * BYTES_PER_TOKEN
    seed = full[-1] if full else tenant_seed(tenant)
    return _SharedPrompt(full, canonical[cut:], seed, len(canonical))


def _zipf_cumulative(count: int, skew: float) -> list[float]:
    return list(itertools.accumulate(1.0 / (k + 1) ** skew for k in range(count)))


def _draw(rng: random.Random, span: Range) -> int:
    return span.low if span.low == span.high else rng.randint(span.low, span.high)


class _WorkloadSampler:
    def __init__(self, name: str, workload: Workload, seed: int, block_tokens: int) -> None:
        self.name = name
        self.workload = workload
        self.block_tokens = block_tokens
        self._tenant_cum = _zipf_cumulative(workload.tenants, workload.tenant_skew)
        self._prompt_cum = _zipf_cumulative(workload.system_prompts, workload.prompt_skew)
        self._seed = seed
        self._prompts: dict[tuple[int, int], _SharedPrompt] = {}

    def tenant_name(self, index: int) -> str:
        return f"{self.name}-t{index}"

    def prompt(self, tenant: int, group: int) -> _SharedPrompt:
        key = (tenant, group)
        shared = self._prompts.get(key)
        if shared is None:
            rng = random.Random(f"{self._seed}/{self.name}/{tenant}/{group}")
            text = _text(rng, _draw(rng, self.workload.prefix_tokens))
            shared = _shared_prompt(self.tenant_name(tenant), text, self.block_tokens)
            self._prompts[key] = shared
        return shared

    def sample(self, rng: random.Random) -> tuple[str, int, tuple[int, ...], tuple[int, ...], int]:
        """(tenant, prompt tokens, shared hashes, own hashes, max tokens) of one request."""
        tenant = bisect.bisect(self._tenant_cum, rng.random() * self._tenant_cum[-1])
        group = bisect.bisect(self._prompt_cum, rng.random() * self._prompt_cum[-1])
        shared = self.prompt(tenant, group)
        question = _text(rng, _draw(rng, self.workload.question_tokens))
        suffix = continue_chain(shared.tail + question, shared.seed, self.block_tokens)
        tokens = -(-(shared.length + len(question)) // BYTES_PER_TOKEN)
        output = max(1, _draw(rng, self.workload.output_tokens))
        return self.tenant_name(tenant), tokens, shared.full_hashes, tuple(suffix), output


def _rate_at(population: ClientPopulation, t: float) -> tuple[float, float]:
    """(rate, end of the constant-rate segment containing ``t``)."""
    arrival, rate = population.arrival, population.rate_rps
    if not isinstance(arrival, Bursts):
        return rate, math.inf
    cycle, offset = (
        divmod(t - arrival.phase_s, arrival.period_s)
        if t >= arrival.phase_s
        else (-1.0, t - arrival.phase_s + arrival.period_s)
    )
    start = arrival.phase_s + cycle * arrival.period_s
    if offset < arrival.burst_s:
        return rate * arrival.burst_factor, start + arrival.burst_s
    quiet = arrival.period_s - arrival.burst_s
    low = rate * (arrival.period_s - arrival.burst_factor * arrival.burst_s) / quiet
    return low, start + arrival.period_s


def arrival_times(population: ClientPopulation, rng: random.Random, until: float) -> list[float]:
    """A (possibly bursty) Poisson process on [0, until); memoryless across rate changes."""
    out: list[float] = []
    t = 0.0
    while t < until:
        rate, segment_end = _rate_at(population, t)
        gap = rng.expovariate(rate) if rate > 0 else math.inf
        if t + gap < segment_end:
            t += gap
            if t < until:
                out.append(t)
        else:
            t = segment_end
    return out


def _background(scenario: Scenario, seed: int) -> tuple[BackgroundRequest, ...]:
    out: list[BackgroundRequest] = []
    for i, event in enumerate(scenario.events):
        if not isinstance(event, ExtraLoad):
            continue
        rng = random.Random(f"{seed}/background/{i}")
        t = event.start_s
        while True:
            t += rng.expovariate(event.rate_rps)
            if t >= event.end_s:
                break
            out.append(
                BackgroundRequest(
                    t, event.region, rng.randrange(1 << 30), _draw(rng, event.prompt_tokens),
                    max(1, _draw(rng, event.output_tokens)),
                )
            )  # fmt: skip
    out.sort(key=lambda r: r.at)
    return tuple(out)


def _arrivals(
    scenario: Scenario, seed: int, requests: int | None
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int16]]:
    """(time, population index in sorted(clients)) of every arrival, in time order, ``requests``
    of them if given. Ties in time go to the population first in name order."""
    total_rate = sum(p.rate_rps for p in scenario.clients.values())
    until = scenario.duration_s
    if requests is not None:
        until = max(1.2 * requests / total_rate, 1.0)
    keys = sorted(scenario.clients)
    while True:
        times, owners = [], []
        for index, key in enumerate(keys):
            rng = random.Random(f"{seed}/arrivals/{key}")
            mine = np.asarray(arrival_times(scenario.clients[key], rng, until), np.float64)
            times.append(mine)
            owners.append(np.full(len(mine), index, np.int16))
        merged, who = np.concatenate(times), np.concatenate(owners)
        order = np.argsort(merged, kind="stable")
        if requests is None or len(merged) >= requests:
            cut = len(merged) if requests is None else requests
            return merged[order][:cut], who[order][:cut]
        until *= 1.5


def _gateways(scenario: Scenario) -> tuple[tuple[str, ...], dict[str, list[int]]]:
    regions: list[str] = []
    by_region: dict[str, list[int]] = {}
    for region, count in sorted(scenario.gateway_counts().items()):
        for _ in range(count):
            by_region.setdefault(region, []).append(len(regions))
            regions.append(region)
    return tuple(regions), by_region


def build_trace(
    scenario: Scenario, requests: int | None = None, block_tokens: int = DEFAULT_BLOCK_TOKENS
) -> Trace:
    arrivals, populations = _arrivals(scenario, scenario.seed, requests)
    return Trace(
        scenario, arrivals, populations, _background(scenario, scenario.seed), block_tokens
    )


def _choices(names: Sequence[str], scenario: Scenario) -> tuple[list[str], list[float]]:
    ordered = sorted(names)
    return ordered, list(itertools.accumulate(scenario.workloads[n].weight for n in ordered))
