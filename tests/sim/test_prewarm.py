"""Pre-warm in the simulator: warm-ups keep a serverless pool out of its cold starts, at a cost
the summary reports (warm-ups sent, cold starts, share of serverless time warm)."""

from __future__ import annotations

from typing import Any

from loadtests.sim.loop import simulate
from loadtests.sim.report import serverless_lines
from loadtests.sim.summary import summarize
from loadtests.sim.trace import build_trace
from tests.sim.conftest import build, tiny


def _pool(share: float) -> dict[str, Any]:
    """A dedicated backend that holds the load alone, and a far serverless pool it never needs."""
    serverless = {"max_num_seqs": 16, "idle_timeout_s": 8, "cold_start_ms": 3000}
    return tiny(
        duration_s=30,
        backends=[
            {"name": "dedicated", "region": "near", "count": 1},
            {
                "name": "pool",
                "region": "far",
                "kind": "serverless",
                "count": 2,
                "engine": serverless,
            },
        ],
        clients={"users": {"region": "near", "rate_rps": 1}},
        policy_params={"predicted_ttft": {"prewarm_share": share}},
    )


def test_a_warm_share_wakes_the_pool_and_keeps_it_warm_at_a_reported_cost() -> None:
    off, on = build(_pool(0.0)), build(_pool(0.5))
    trace = build_trace(off)
    cold = summarize(simulate(off, trace, "predicted_ttft"), trace)
    warm = summarize(simulate(on, trace, "predicted_ttft"), trace)
    assert cold.warm_ups == 0 and cold.serverless_warm_share == 0.0  # never needed, never woken
    # One of the two is woken at once (a cold start), then kept warm by keep-alives.
    assert warm.cold_starts == 1 and warm.warm_ups >= 30 / (0.8 * 8) - 1
    assert warm.serverless_warm_share is not None and 0.45 < warm.serverless_warm_share <= 0.5
    assert "predicted_ttft" in serverless_lines([warm]) and serverless_lines([]) == ""
