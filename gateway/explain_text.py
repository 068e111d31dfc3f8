"""The human-readable rendering of an explain report (`meridian explain` without `--json`):
kept apart from the endpoint and the profile building in `gateway.explain`, which it only reads
the finished JSON report of."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Json = dict[str, Any]


def _ms(value: Any) -> str:
    return "-" if value is None else f"{float(value):.1f}"


def _age_text(value: Any) -> str:
    if value is None:
        return "never"
    return "config" if value == "config" else f"{float(value):.1f}s"


def _ago(value: Any) -> str:
    return "never" if value is None else f"{float(value):.1f}s ago"


def _term_line(terms: Mapping[str, Json]) -> str:
    return "  ".join(
        f"{name} {t['ms']:.1f}±{t['spread_ms']:.1f} ({_age_text(t['age_s'])})"
        for name, t in terms.items()
    )


def _signal_line(signals: Json | None) -> str:
    if signals is None:
        return "no signals"
    queue = "-" if signals["running"] is None else f"{signals['running']}+{signals['waiting']}"
    text = (
        f"probe rtt {_ms(signals['probe_rtt_ms'])} ms ({_age_text(signals['probe_age_s'])})  "
        f"engine run+wait {queue} ({_age_text(signals['metrics_age_s'])})  "
        f"in flight {signals['in_flight']}  "
        "last traffic " + _ago(signals["last_traffic_age_s"])
    )
    if signals["ejected_for_s"] is not None:
        text += f"  EJECTED for {signals['ejected_for_s']:.1f}s"
    return text


def render_text(report: Json) -> str:
    origin, profile = report["origin"], report["profile"]
    lines = [
        f"policy {report['policy']}  model {report['model']}  tenant {report['tenant']}  "
        f"gateway region {report['gateway_region'] or '-'}",
        f"origin {origin['region'] or 'unknown'} ({origin['source']}"
        + (f", {origin['country']}" if origin.get("country") else "")
        + (f": {origin['reason']}" if origin.get("reason") else "")
        + ")",
        f"request {profile['prompt_tokens']} prompt tokens, {profile['prefix_blocks']} prefix "
        f"blocks, {profile['latency_class']}, max_tokens {profile['max_tokens'] or '-'}"
        + (
            ""
            if profile["ttft_objective_ms"] is None
            else f", objective p90 TTFT <= {profile['ttft_objective_ms']:g} ms "
            f"({profile['objective_class']})"
        ),
    ]
    if report["panic"]:
        lines.append("PANIC MODE: too few healthy backends, health is ignored")
    lines.append("")
    for c in report["candidates"]:
        mark = "*" if c["chosen"] else " "
        lines.append(
            f"{c['rank']:>2}{mark} {c['backend']}  [{c['region']}, {c['kind']}]  "
            f"predicted TTFT {_ms(c['predicted_ttft_ms'])} ms (p90 {_ms(c['predicted_ttft_p90_ms'])})"
            f"  score {_ms(c['score'])}  cached {c['cached_tokens']} tokens"
            + ("" if c["expected_cost"] is None else f"  expected cost {c['expected_cost']:.6g}")
        )
        if c["terms"]:
            lines.append("     terms: " + _term_line(c["terms"]))
        lines.append("     signals: " + _signal_line(c["signals"]))
        lines.append("     why: " + c["why"])
    for f in report["filtered"]:
        lines.append(f"  x {f['backend']}  filtered by {f['filter']}: {f['why']}")
        lines.append("     signals: " + _signal_line(f["signals"]))
    if report["note"]:
        lines.append(report["note"])
    return "\n".join(lines)
