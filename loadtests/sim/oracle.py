"""The oracle's truth: what a request would see on each backend, from the engines' real state.

It knows what no router can: the exact queue on every engine right now, the KV cache's real
contents, whether a serverless engine is cold or still warming, the true round trip. From
those it computes the first-token time with the engine's own scheduling rules in closed form
(FIFO admission, chunked prefill sharing each step's token budget with the decoding batch,
a slot freed when the running sequence with the fewest tokens left finishes). It does not know
requests that will arrive later, and the closed form is not a replay of every step, so it is a
near-perfect reference rather than an exact one; its own error is reported beside the results.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from loadtests.emulator.engine import Backlog
from loadtests.sim.fleet import SimBackend
from loadtests.sim.scenario import Scenario
from routing.types import LatencyClass, RequestProfile


class EngineTruth:
    """``OracleTruth`` for the gateway in ``region``."""

    def __init__(self, scenario: Scenario, region: str, backends: Mapping[str, SimBackend]) -> None:
        self.backends = backends
        self._one_way_s = {
            name: scenario.rtt(region, b.region) / 2000.0 for name, b in backends.items()
        }
        self._backlogs: dict[str, tuple[int, Backlog]] = {}

    def _backlog(self, backend: SimBackend, now: float) -> Backlog:
        cached = self._backlogs.get(backend.name)
        if cached is not None and cached[0] == backend.version:
            return cached[1]
        backlog = backend.engine.backlog(now)
        self._backlogs[backend.name] = (backend.version, backlog)
        return backlog

    def latency_ms(self, backend: str, profile: RequestProfile, now: float) -> float | None:
        sim = self.backends.get(backend)
        if sim is None:
            return None
        engine, p = sim.engine, sim.engine.params
        one_way = self._one_way_s[backend] + sim.path_extra_ms / 2000.0
        arrive = now + one_way
        backlog = self._backlog(sim, now)
        uncached = engine.uncached_tokens(profile.prompt_tokens, profile.prefix_hashes)
        batch = min(backlog.running + 1, p.max_num_seqs)
        step_s = (p.decode_base_ms + p.decode_per_seq_ms * batch) / 1000.0
        per_step = max(p.max_num_batched_tokens - batch, 1)

        def prefill_s(tokens: int) -> float:
            return tokens / p.prefill_tokens_per_s + math.ceil(tokens / per_step) * step_s

        ahead_done = max(backlog.busy_until, arrive) + prefill_s(backlog.prefill_tokens)
        start = max(
            engine.ready_at(arrive), ahead_done, _slot_free_at(backlog, p.max_num_seqs, step_s)
        )
        first = (
            start + prefill_s(uncached)
            if backlog.running
            else start + uncached / p.prefill_tokens_per_s
        )
        ttft = first + one_way - now
        if profile.latency_class is LatencyClass.LONG_FORM:
            output = profile.max_tokens if profile.max_tokens is not None else 1
            ttft += max(output - 1, 0) * step_s
        return 1000.0 * ttft


def _slot_free_at(backlog: Backlog, max_num_seqs: int, step_s: float) -> float:
    """When a batch slot frees for a new request, given FIFO admission of the queue ahead."""
    need = backlog.queued + 1 - (max_num_seqs - backlog.running)
    if need <= 0 or not backlog.remaining_tokens:
        return backlog.busy_until if need > 0 else -math.inf
    remaining = backlog.remaining_tokens
    rounds, k = divmod(need - 1, len(remaining))
    tokens = remaining[k] + rounds * remaining[-1]
    return backlog.busy_until + tokens * step_s
