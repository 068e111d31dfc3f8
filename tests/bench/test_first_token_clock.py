"""``loadtests.first_token_clock`` on real processes: every measured request is stamped at
each step of its first-token path, in order, so the tool notices when a function that marks a
step (the lean door's read, the routing profile, ``CoreCall.accept``, ``decide``, the upstream
write, ``_stamp``, the first write to the client) is renamed or moved."""

from __future__ import annotations

from pathlib import Path

from loadtests.first_token_clock import STEPS, measure


async def test_every_request_is_stamped_at_every_step_in_order(tmp_path: Path) -> None:
    sides = await measure(6, 1, {"this": None, "same": None}, tmp_path, warm_up=3)
    assert list(sides) == ["this", "same"]  # two gateways at once, each stamped on its own
    result = sides["same"]
    # Every measured stream (the first may lose its head's stamp if the signal that clears the
    # warm-up's stamps is handled after its read), none of the warm-up's.
    assert result["requests"] in (5, 6)
    steps = result["steps_us"]
    assert list(steps) == [name for name, _, _ in STEPS] + ["gateway total"]
    for name, quantiles in steps.items():
        assert 0 < quantiles["p50"] <= quantiles["p99"], (name, quantiles)
    assert set(result["client_added_ttft_ms"]) == {"p50", "p99"}
