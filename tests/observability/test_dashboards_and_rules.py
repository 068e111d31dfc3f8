"""deploy/prometheus rules pass promtool (syntax and unit tests); every Grafana panel query is
valid PromQL naming only what Meridian exports or the recording rules define."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import orjson
import yaml
from prometheus_client import generate_latest

from gateway.state_keys import METRICS
from tests.gateway.support import config_for
from tests.observability.test_metrics import PROMTOOL_HINT

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RULES = [
    DEPLOY / "prometheus" / "recording.rules.yml",
    DEPLOY / "prometheus" / "alerting.rules.yml",
]
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "meridian.json"
# Series names in PromQL: a metric (meridian_x, process_x) or a recording rule (meridian:x:y).
NAME = re.compile(r"\b((?:meridian|process)(?:_[a-z0-9_]+|(?::[a-z0-9_]+)+))\b")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    assert binary is not None, PROMTOOL_HINT
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=120)


def test_rules_are_valid_and_their_unit_tests_pass() -> None:
    checked = promtool("check", "rules", *map(str, RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool("test", "rules", str(DEPLOY / "prometheus" / "tests" / "meridian.test.yml"))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    alerts = {
        rule["alert"]
        for path in RULES
        for group in yaml.safe_load(path.read_text())["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }
    assert alerts == {
        "MeridianTTFTSLOBurnFast",
        "MeridianTTFTSLOBurnSlow",
        "MeridianBackendEjected",
        "MeridianModelUnavailable",
        "MeridianSharedStateDegraded",
        "MeridianSharedStateFlapping",
        "MeridianCalibrationDrifting",
        "MeridianConnectionsRefused",
        "MeridianGrpcFloodRefused",
        "MeridianEventLoopLagging",
    }


def _recorded() -> set[str]:
    return {
        rule["record"]
        for path in RULES
        for group in yaml.safe_load(path.read_text())["groups"]
        for rule in group["rules"]
        if "record" in rule
    }


def _panel_queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (panel["title"], target["expr"])
        for panel in dashboard["panels"]
        if panel["type"] != "row"
        for target in panel["targets"]
    ]


def _as_promql(expr: str) -> str:
    """A panel query with Grafana's variables replaced as Grafana would at some instant."""
    return re.sub(r'"\$[a-z_]+"', '".*"', expr.replace("$__rate_interval", "5m"))


_SUFFIXES = {
    "counter": ("", "_total"),  # the # TYPE line names it with or without _total
    "histogram": ("_bucket", "_sum", "_count"),
    "gauge": ("",),
    "info": ("_info",),
}


def _exported_names(text: str) -> set[str]:
    """Every series name the exposition declares, including those with no sample yet (a
    labelled counter nobody incremented still has its # TYPE line)."""
    names = set(re.findall(r"^([a-z_:]+)[{ ]", text, re.MULTILINE))
    for base, kind in re.findall(r"^# TYPE (\S+) (\S+)", text, re.MULTILINE):
        names.update(base.removesuffix("_total") + suffix for suffix in _SUFFIXES.get(kind, ("",)))
    return names


async def test_dashboard_queries_are_valid_and_name_only_real_series(
    emulator, gateway, tmp_path: Path
) -> None:
    dashboard = orjson.loads(DASHBOARD.read_bytes())
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert dashboard["uid"] == "meridian-overview"
    queries = _panel_queries(dashboard)
    titles = {title for title, _ in queries}
    for wanted in ("TTFT p99", "ITL p99", "Traffic share per backend", "Ejections"):
        assert wanted in titles
    # promtool parses every query: wrap them as recording rules.
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:query_{i}", "expr": _as_promql(expr)}
                    for i, (_, expr) in enumerate(queries)
                ],
            }
        ]
    }
    wrapped = tmp_path / "dashboard.rules.yml"
    wrapped.write_text(yaml.safe_dump(rules))
    checked = promtool("check", "rules", str(wrapped))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # Every series a panel names is exported by a live gateway (with its gRPC listener, whose
    # metrics only it registers) or recorded by a rule.
    backend = await emulator("b1")
    running = await gateway(config_for({"b1": backend.url}, listen={"grpc_port": 0}))
    text = generate_latest(running.app[METRICS].registry).decode()
    exported = _exported_names(text)
    named = {name for _, expr in queries for name in NAME.findall(expr)}
    unknown = sorted(named - exported - _recorded())
    assert unknown == []
    # ... and so is every series the rules read.
    rule_inputs = {
        name
        for path in RULES
        for group in yaml.safe_load(path.read_text())["groups"]
        for rule in group["rules"]
        for name in NAME.findall(rule["expr"])
        if not name.startswith("meridian:")
    }
    assert sorted(rule_inputs - exported) == []
