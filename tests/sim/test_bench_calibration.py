"""The calibration benchmark's variants: what the command line says is what the policy gets."""

from __future__ import annotations

from loadtests.bench_arrivals import shipped
from loadtests.bench_calibration import parse_variant, with_params
from loadtests.sim.scenario import ScenarioError, load_scenario


def test_a_variant_is_a_name_and_json_params() -> None:
    assert parse_variant("off:learning_rate=1e-06,prewarm_share=0.5,mode=joint") == (
        "off",
        {"learning_rate": 1e-6, "prewarm_share": 0.5, "mode": "joint"},
    )
    assert parse_variant("shipped:") == ("shipped", {})


def test_variant_params_lie_over_the_scenarios_own() -> None:
    path = shipped(["3"])[0]
    loaded = load_scenario(path)
    assert not isinstance(loaded, ScenarioError)
    changed = with_params(loaded, {"learning_rate": 0.2}, seed=13)
    assert changed.seed == 13
    own = dict(loaded.policy_params["predicted_ttft"])
    assert own["prewarm_share"] == 1.0 and "learning_rate" not in own
    assert changed.policy_params["predicted_ttft"] == {**own, "learning_rate": 0.2}
    assert loaded.policy_params["predicted_ttft"] == own  # the scenario's own, untouched
