"""The simulated fleet: one emulator ``Engine`` per backend (without per-token events), with
what configuration says about it."""

from __future__ import annotations

from dataclasses import dataclass

from loadtests.emulator.config import EngineParams
from loadtests.emulator.engine import Engine
from loadtests.sim.scenario import Scenario, Slowdown
from routing.price import Price
from routing.types import BackendKind, BackendSpec


@dataclass(slots=True)
class SimBackend:
    index: int
    name: str
    region: str
    spec: BackendSpec
    engine: Engine
    base_params: EngineParams
    version: int = 0  # bumped whenever the simulator touches the engine (oracle cache key)
    path_extra_ms: float = 0.0  # added to the round trip of requests (a PathDelay event)
    probe_extra_ms: float = 0.0  # ...and of probes, when they take the same path
    probe_rtt_ms: float | None = None  # probes measure this instead (an edge answers them)

    def slow_down(self, factor: float) -> None:
        """Swap the engine's timing for ``factor`` x slower; the step in progress keeps its end."""
        p = self.base_params
        self.engine.params = p.model_copy(
            update={
                "prefill_tokens_per_s": p.prefill_tokens_per_s / factor,
                "decode_base_ms": p.decode_base_ms * factor,
                "decode_per_seq_ms": p.decode_per_seq_ms * factor,
            }
        )
        self.version += 1

    def restore(self) -> None:
        self.engine.params = self.base_params
        self.version += 1


def backend_spec(
    name: str,
    region: str,
    kind: BackendKind,
    model: str,
    p: EngineParams,
    price: Price | None = None,
) -> BackendSpec:
    """What an operator would configure: the engine's nominal numbers. The ITL is the step
    time of a half-full batch; the router learns the real one from observations."""
    return BackendSpec(
        name=name,
        region=region,
        kind=kind,
        models=frozenset({model}),
        max_num_seqs=p.max_num_seqs,
        max_num_batched_tokens=p.max_num_batched_tokens,
        prefill_tokens_per_s=p.prefill_tokens_per_s,
        itl_ms=p.decode_base_ms + p.decode_per_seq_ms * p.max_num_seqs / 2,
        first_token_overhead_ms=p.first_token_overhead_ms,
        cold_start_ms=p.cold_start_ms,
        idle_timeout_s=p.idle_timeout_s,
        price=price,
    )


def build_fleet(scenario: Scenario) -> list[SimBackend]:
    backends: list[SimBackend] = []
    names = iter(scenario.backend_names())
    for group in scenario.backends:
        for _ in range(group.count):
            name = next(names)
            price = None if group.price is None else group.price.price()
            spec = backend_spec(name, group.region, group.kind, scenario.model, group.engine, price)
            engine = Engine(group.engine, 0.0, token_events=False)
            backends.append(
                SimBackend(len(backends), name, group.region, spec, engine, group.engine)
            )
    return backends


def slowdowns(scenario: Scenario) -> list[Slowdown]:
    return [event for event in scenario.events if isinstance(event, Slowdown)]
