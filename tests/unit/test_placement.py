from gateway.placement import UNRESTRICTED, PlacementConfig, resolve

CONFIG = PlacementConfig.model_validate(
    {
        "tenants": {
            "acme-eu": {"allowed_regions": ["eu-west", "eu-central"]},
            "fast": {"region_penalty_ms": {"ap-southeast": 40}},
        },
        "origins": {
            "eu-west": {
                "allowed_regions": ["eu-west", "us-east"],
                "region_penalty_ms": {"us-east": 25},
            },
        },
    }
)


def test_no_rule_is_unrestricted() -> None:
    assert resolve(CONFIG, "someone", "us-east") is UNRESTRICTED
    assert resolve(CONFIG, "someone", None) is UNRESTRICTED


def test_tenant_and_origin_rules_combine() -> None:
    placement = resolve(CONFIG, "acme-eu", "eu-west")
    assert placement.allowed_regions == frozenset({"eu-west"})  # intersection
    assert placement.region_penalty_ms == {"us-east": 25}


def test_penalties_add_and_allowed_stays_open_without_a_list() -> None:
    placement = resolve(CONFIG, "fast", "eu-west")
    assert placement.allowed_regions == frozenset({"eu-west", "us-east"})
    assert placement.region_penalty_ms == {"us-east": 25, "ap-southeast": 40}
    assert resolve(CONFIG, "fast", None).allowed_regions is None
