"""deploy/kubernetes: every overlay renders, validates against the Kubernetes API schemas
(strict), passes checkov and yamllint, and carries an operator file that Meridian accepts, with
the pod's stop budget longer than the file's drain."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.tools import DEPLOY, MERIDIAN, ROOT, run, run_failing, tool

KUBERNETES = DEPLOY / "kubernetes"
REGIONS = ("us-east", "eu-west", "ap-southeast")
KUBERNETES_VERSION = "1.36.0"  # a current release, as kubernetes-validate ships its schemas
PRESTOP_S = 5


@functools.cache
def render(region: str) -> str:
    return run([tool("kubectl"), "kustomize", KUBERNETES / "overlays" / region]).stdout


def objects(region: str) -> list[dict[str, Any]]:
    """A fresh copy each call (tests may not share mutations); the rendering is cached."""
    return [d for d in yaml.safe_load_all(render(region)) if d]


def one(docs: list[dict[str, Any]], kind: str, prefix: str = "meridian") -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].startswith(prefix)]
    return found


def operator_file(docs: list[dict[str, Any]]) -> dict[str, Any]:
    config_map = one(docs, "ConfigMap", "meridian-config-")
    parsed: dict[str, Any] = yaml.safe_load(config_map["data"]["gateway.yaml"])
    return parsed


@pytest.mark.parametrize("region", REGIONS)
def test_overlay_renders_into_its_namespace(region: str) -> None:
    docs = objects(region)
    kinds = {d["kind"] for d in docs}
    assert {
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "HorizontalPodAutoscaler",
        "ConfigMap",
        "ServiceMonitor",
        "NetworkPolicy",
        "ServiceAccount",
    } <= kinds
    for doc in docs:
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == f"meridian-{region}", doc["metadata"]
    services = {d["metadata"]["name"] for d in docs if d["kind"] == "Service"}
    assert {"meridian-http", "meridian-grpc", "meridian-admin"} <= services


@pytest.mark.parametrize("region", REGIONS)
def test_rendered_operator_file_passes_check_config(region: str, tmp_path: Path) -> None:
    config_map = one(objects(region), "ConfigMap", "meridian-config-")
    path = tmp_path / "gateway.yaml"
    path.write_text(config_map["data"]["gateway.yaml"])
    checked = run([MERIDIAN, "check-config", "--allow-missing-secrets", path])
    assert "OK" in checked.stdout
    assert yaml.safe_load(path.read_text())["region"] == region


@pytest.mark.parametrize("region", REGIONS)
def test_pod_outlives_its_drain_and_probes_the_right_endpoints(region: str) -> None:
    docs = objects(region)
    config = operator_file(docs)
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    drain = config["drain"]
    assert pod["terminationGracePeriodSeconds"] > (
        PRESTOP_S + drain["readiness_grace_s"] + drain["deadline_s"]
    )
    assert container["lifecycle"]["preStop"]["sleep"]["seconds"] == PRESTOP_S
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {
        "http": config["listen"]["port"],
        "grpc": config["listen"]["grpc_port"],
        "admin": config["admin"]["port"],
    }
    assert config["admin"]["host"] == "0.0.0.0"  # Prometheus scrapes it through the pod IP
    assert container["resources"]["requests"]
    assert pod["affinity"]["podAntiAffinity"]
    assert pod["securityContext"]["runAsNonRoot"] is True


@pytest.mark.parametrize("region", REGIONS)
def test_every_secret_the_operator_file_reads_is_mounted(region: str) -> None:
    docs = objects(region)
    config = operator_file(docs)
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    secret_dir = mounts["secrets"]
    config_dir = mounts["config"]
    assert pod["containers"][0]["args"] == ["serve", "--config", f"{config_dir}/gateway.yaml"]
    files = [b["api_key"]["file"] for b in config["backends"] if "api_key" in b]
    files += [config["state"]["password_file"]] if "password_file" in config["state"] else []
    assert files, "the example regions use secrets"
    for file in files:
        assert Path(file).parent == Path(secret_dir), file


@pytest.mark.parametrize("region", REGIONS)
def test_redis_is_in_the_cluster_only_where_the_operator_file_says_so(region: str) -> None:
    docs = objects(region)
    state = operator_file(docs)["state"]
    in_cluster = any(d["kind"] == "StatefulSet" for d in docs)
    assert in_cluster == state["url"].startswith("redis://meridian-redis:")


def test_service_monitor_scrapes_the_admin_service() -> None:
    docs = objects("us-east")
    monitor = one(docs, "ServiceMonitor")
    admin = one(docs, "Service", "meridian-admin")
    labels = admin["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics"
    assert endpoint["port"] in {p["name"] for p in admin["spec"]["ports"]}


@pytest.mark.parametrize("region", REGIONS)
def test_kubernetes_validate_strict(region: str, tmp_path: Path) -> None:
    rendered = tmp_path / f"{region}.yaml"
    rendered.write_text(render(region))
    validate = tool("kubernetes-validate")
    result = run([validate, "--strict", "-k", KUBERNETES_VERSION, rendered])
    # The only schema it lacks is the Prometheus Operator's CRD, checked structurally above.
    unknown = [line for line in result.stdout.splitlines() if "Couldn't find schema" in line]
    assert all("ServiceMonitor" in line for line in unknown), unknown
    assert result.stdout.count(" passed for resource ") == len(objects(region)) - len(unknown)


def test_kubernetes_validate_rejects_an_unknown_field(tmp_path: Path) -> None:
    """The strict check bites: a misspelt field fails it."""
    broken = render("eu-west").replace("terminationGracePeriodSeconds", "terminationGraceSeconds")
    path = tmp_path / "broken.yaml"
    path.write_text(broken)
    validate = tool("kubernetes-validate")
    result = run_failing([validate, "--strict", "-k", KUBERNETES_VERSION, path])
    assert "terminationGraceSeconds" in result


def test_checkov(tmp_path: Path) -> None:
    checkov = tool("checkov")
    config = KUBERNETES / ".checkov.yaml"
    result = run([checkov, "-d", KUBERNETES, "--config-file", config], cwd=ROOT)
    assert "Failed checks: 0" in result.stdout and "Passed checks:" in result.stdout


def test_yamllint() -> None:
    yamllint = tool("yamllint")
    targets = [KUBERNETES, DEPLOY / "gateway.example.yaml"]
    run([yamllint, "--strict", "-c", DEPLOY / ".yamllint.yaml", *targets])
