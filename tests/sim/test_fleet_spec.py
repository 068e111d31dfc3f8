"""What the simulated fleet tells routing about each backend comes from its engine."""

from __future__ import annotations

from loadtests.sim.fleet import build_fleet
from tests.sim.conftest import build, tiny


def test_the_step_budget_reaches_the_routing_spec() -> None:
    engine = {"max_num_seqs": 16, "kv_cache_blocks": 4096, "max_num_batched_tokens": 4096}
    fleet = build_fleet(build(tiny(engine_defaults=engine)))
    assert {b.spec.max_num_batched_tokens for b in fleet} == {4096}
    assert {b.spec.max_num_seqs for b in fleet} == {16}
