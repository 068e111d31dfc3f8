"""deploy/terraform checked offline: formatting; the provider-free topology module initialised,
validated and tested with its own ``.tftest.hcl``; every operator file it renders for the
three-region example passes ``meridian check-config`` and is the file the Kustomize overlay
ships; the provider modules' structure (python-hcl2) and checkov."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hcl2
import pytest
import yaml

from tests.deploy.tools import DEPLOY, MERIDIAN, run, tool

TERRAFORM = DEPLOY / "terraform"
TOPOLOGY = TERRAFORM / "modules" / "topology"
EXAMPLE = TERRAFORM / "examples" / "three-region"
TFVARS = EXAMPLE / "three-region.tfvars"
REGIONS = ("us-east", "eu-west", "ap-southeast")


def terraform_env(data_dir: Path) -> dict[str, str]:
    # No CLI config (no plugin mirrors or credentials of this machine) and working files in a
    # temp dir, never in the checkout.
    return {**os.environ, "TF_CLI_CONFIG_FILE": "/dev/null", "TF_DATA_DIR": str(data_dir)}


def terraform(*args: str | Path, cwd: Path, data_dir: Path) -> str:
    return run([tool("terraform"), *args], cwd=cwd, env=terraform_env(data_dir)).stdout


def test_fmt() -> None:
    run([tool("terraform"), "fmt", "-check", "-recursive", "-diff", TERRAFORM])


def test_topology_init_validate_and_test(tmp_path: Path) -> None:
    terraform("init", "-input=false", "-backend=false", cwd=TOPOLOGY, data_dir=tmp_path)
    terraform("validate", "-no-color", cwd=TOPOLOGY, data_dir=tmp_path)
    out = terraform("test", "-no-color", cwd=TOPOLOGY, data_dir=tmp_path)
    assert "0 failed" in out and " passed" in out, out
    assert not (TOPOLOGY / "terraform.tfstate").exists()


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The topology applied to the example's tfvars by deploy/terraform/render.sh, the command
    operators use (a scratch root with no providers)."""
    out = tmp_path_factory.mktemp("render")
    tool("terraform")  # render.sh needs it on PATH
    run(["sh", TERRAFORM / "render.sh", TFVARS, out])
    files = {region: (out / f"{region}.yaml").read_text() for region in REGIONS}
    return {
        "operator_files": files,
        "steering_records": json.loads((out / "steering.json").read_text()),
    }


@pytest.mark.parametrize("region", REGIONS)
def test_every_rendered_operator_file_passes_check_config(
    rendered: dict[str, Any], region: str, tmp_path: Path
) -> None:
    path = tmp_path / f"{region}.yaml"
    path.write_text(rendered["operator_files"][region])
    checked = run([MERIDIAN, "check-config", "--allow-missing-secrets", path])
    assert f"{path}: OK" in checked.stdout


@pytest.mark.parametrize("region", REGIONS)
def test_the_kustomize_overlay_ships_the_rendered_file(
    rendered: dict[str, Any], region: str
) -> None:
    """deploy/kubernetes/overlays/<region>/gateway.yaml is the topology's output, so the manifests
    and the Terraform path deploy the same gateway."""
    shipped = DEPLOY / "kubernetes" / "overlays" / region / "gateway.yaml"
    assert yaml.safe_load(shipped.read_text()) == yaml.safe_load(
        rendered["operator_files"][region]
    ), f"render again: {shipped} differs from the topology's output"


def test_steering_health_checks_readyz_on_every_region(rendered: dict[str, Any]) -> None:
    records = rendered["steering_records"]
    assert set(records) == set(REGIONS)
    for region, record in records.items():
        assert record["health_path"] == "/readyz"
        assert record["target"] == f"{region}.gateway.example.com"
        assert (record["health_protocol"], record["health_port"]) == ("HTTPS", 443)


def _unquote(node: Any) -> Any:
    """python-hcl2 keeps HCL's quotes around strings and block labels: drop them."""
    if isinstance(node, dict):
        return {_unquote(k): _unquote(v) for k, v in node.items() if not k.startswith("__")}
    if isinstance(node, list):
        return [_unquote(v) for v in node]
    if isinstance(node, str) and len(node) >= 2 and node[0] == node[-1] == '"':
        return node[1:-1]
    return node


def hcl(directory: Path) -> dict[str, list[Any]]:
    merged: dict[str, list[Any]] = {}
    for path in sorted(directory.glob("*.tf")):
        with path.open() as handle:
            for key, blocks in _unquote(hcl2.load(handle)).items():
                merged.setdefault(key, []).extend(blocks)
    return merged


def blocks(parsed: dict[str, list[Any]], kind: str) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(type, name, body) of every ``resource``/``data`` block, or (name, "", body) of modules."""
    for block in parsed.get(kind, []):
        for first, inner in block.items():
            if kind in {"resource", "data"}:
                for name, body in inner.items():
                    yield first, name, body
            else:
                yield first, "", inner


def test_global_module_health_checks_every_region_and_steers_by_latency() -> None:
    parsed = hcl(TERRAFORM / "modules" / "global")
    resources = {(t, n): body for t, n, body in blocks(parsed, "resource")}
    check = resources[("aws_route53_health_check", "region")]
    record = resources[("aws_route53_record", "region")]
    assert check["for_each"] == record["for_each"] == "${var.steering_records}"
    assert check["resource_path"] == "${each.value.health_path}"
    assert record["set_identifier"] == "${each.value.set_identifier}"
    assert record["latency_routing_policy"] == [{"region": "${each.value.latency_region}"}]
    assert record["health_check_id"] == "${aws_route53_health_check.region[each.key].id}"


def test_region_module_renders_the_checked_manifests_with_its_operator_file() -> None:
    parsed = hcl(TERRAFORM / "modules" / "region")
    data = {(t, n): body for t, n, body in blocks(parsed, "data")}
    overlay = data[("kustomization_overlay", "region")]
    assert overlay["resources"] == ["${local.kubernetes}/base"]
    assert overlay["namespace"] == "${local.namespace}"
    (generator,) = overlay["config_map_generator"]
    assert generator["name"] == "meridian-config" and generator["behavior"] == "replace"
    assert generator["literals"] == ["gateway.yaml=${var.operator_file}"]
    local = {k: v for block in parsed["locals"] for k, v in block.items()}
    assert local["kubernetes"] == "${path.module}/../../../kubernetes"
    assert (TERRAFORM / "modules" / "region" / "../../../kubernetes/base").resolve().is_dir()
    applied = {n for t, n, _ in blocks(parsed, "resource") if t == "kustomization_resource"}
    assert applied == {"p0", "p1", "p2"}


def test_example_wires_every_region_to_its_own_operator_file() -> None:
    parsed = hcl(EXAMPLE)
    modules = {name: body for name, _, body in blocks(parsed, "module")}
    tfvars = _unquote(hcl2.load(TFVARS.open()))
    assert set(tfvars["regions"]) == set(REGIONS)
    for region in REGIONS:
        module = modules[region.replace("-", "_")]
        assert module["source"] == "../../modules/region"
        assert module["region"] == region
        assert module["operator_file"] == f'${{module.topology.operator_files["{region}"]}}'
    assert modules["global"]["steering_records"] == "${module.topology.steering_records}"
    declared = {name for block in parsed["variable"] for name in block}
    assert set(tfvars) <= declared


def test_checkov_on_the_provider_modules() -> None:
    checkov = tool("checkov")
    result = run(
        [checkov, "-d", TERRAFORM, "--framework", "terraform", "--skip-download", "--compact"]
    )
    assert "Failed checks: 0" in result.stdout and "Passed checks:" in result.stdout
