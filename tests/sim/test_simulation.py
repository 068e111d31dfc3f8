from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from loadtests.sim.cli import main
from loadtests.sim.loop import simulate
from loadtests.sim.markdown import source_revision
from loadtests.sim.report import table
from loadtests.sim.summary import summarize
from loadtests.sim.trace import build_trace
from tests.sim.conftest import build, tiny


@pytest.mark.parametrize("policy", ["predicted_ttft", "random", "oracle"])
def test_same_seed_same_results(policy: str) -> None:
    scenario = build(tiny())
    trace = build_trace(scenario, requests=150)
    first, again = simulate(scenario, trace, policy), simulate(scenario, trace, policy)
    np.testing.assert_array_equal(first.results.backend, again.results.backend)
    np.testing.assert_array_equal(first.results.ttft_ms, again.results.ttft_ms)
    assert not np.isnan(first.results.ttft_ms).any()  # every request completed


@pytest.mark.parametrize("policy", ["predicted_ttft", "oracle"])
def test_idle_local_backend_beats_idle_one_200ms_away(policy: str) -> None:
    scenario = build(tiny(clients={"users": {"region": "near", "rate_rps": 1}}))
    trace = build_trace(scenario, requests=60)
    summary = summarize(simulate(scenario, trace, policy), trace)
    assert summary.cross_region_share == 0.0
    assert summary.ttft_p99_ms < 200.0  # a remote backend would cost the 200 ms round trip


def test_round_robin_pays_the_round_trip_half_the_time() -> None:
    scenario = build(tiny(clients={"users": {"region": "near", "rate_rps": 1}}))
    trace = build_trace(scenario, requests=60)
    summary = summarize(simulate(scenario, trace, "round_robin"), trace)
    assert summary.cross_region_share == pytest.approx(0.5, abs=0.05)
    assert summary.ttft_p90_ms > 200.0


def test_a_slowed_region_is_slower_for_nearest_region_routing() -> None:
    slow = {"kind": "slowdown", "region": "near", "start_s": 0, "end_s": 100, "factor": 4}
    base = build(tiny())
    slowed = build(tiny(events=[slow]))
    trace = build_trace(base, requests=100)
    fast_p50 = summarize(simulate(base, trace, "nearest_region"), trace).ttft_p50_ms
    slow_p50 = summarize(simulate(slowed, trace, "nearest_region"), trace).ttft_p50_ms
    assert slow_p50 > 2 * fast_p50


def test_the_mean_e2e_of_completed_requests_is_in_the_summary_and_the_table() -> None:
    scenario = build(tiny())
    trace = build_trace(scenario, requests=200)
    run = simulate(scenario, trace, "round_robin")
    summary = summarize(run, trace)
    done = ~np.isnan(run.results.ttft_ms)
    assert summary.e2e_mean_ms == pytest.approx(float(run.results.e2e_ms[done].mean()))
    assert summary.e2e_p50_ms <= summary.e2e_p99_ms
    header, row = table([summary]).splitlines()[:3:2]
    assert header.split()[:8] == ["policy", "TTFT", "p50", "p90", "p99", "E2E", "mean", "p50"]
    assert row.split()[4] == f"{summary.e2e_mean_ms:.0f}"


def test_cli_writes_table_json_and_plots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(yaml.safe_dump(tiny()))
    out = tmp_path / "out"
    argv = [str(scenario), "--policies", "predicted_ttft,round_robin,oracle", "--requests", "120"]
    assert main([*argv, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "predicted_ttft" in printed and "round_robin / predicted_ttft" in printed
    doc = json.loads((out / "results.json").read_text())
    assert [p["policy"] for p in doc["policies"]] == ["predicted_ttft", "round_robin", "oracle"]
    assert doc["meta"]["requests"] == 120
    assert doc["comparison"]["p99_over_oracle"] > 0
    assert (out / "ttft_cdf.png").stat().st_size > 0
    assert (out / "backend_load.png").stat().st_size > 0


def test_cli_markdown_page_names_the_code_and_holds_the_table(tmp_path: Path) -> None:
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(yaml.safe_dump(tiny(description="two near, two far")))
    page = tmp_path / "docs" / "tiny.md"
    argv = [str(scenario), "--policies", "round_robin,oracle", "--requests", "60", "--no-plots"]
    assert main([*argv, "--out", str(tmp_path), "--markdown", str(page)]) == 0
    text = page.read_text()
    assert text.startswith("# Simulator results: tiny\n\ntwo near, two far\n")
    revision = source_revision()
    assert revision != "unknown" and len(revision.split()[0]) == 40  # a full commit id
    assert f"- code: `{revision}`" in text
    assert (
        f"- command: `meridian sim {scenario} --policies round_robin,oracle --requests 60 " in text
    )
    assert "--markdown" not in text and "--out" not in text and "requests 60" in text
    rows = [line.split()[0] for line in text.splitlines() if line.startswith(("round", "oracle"))]
    assert rows == ["round_robin", "oracle"]
    assert main([*argv, "--out", str(tmp_path), "--markdown", str(page), "--revision", "abc"]) == 0
    assert "- code: `abc`" in page.read_text()


def test_cli_rejects_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(tiny(regions=["near"], rtt_ms={})))
    assert main([str(bad), "--no-plots", "--out", str(tmp_path)]) == 2
    assert f"{bad}: backends[1].region: unknown region 'far'" in capsys.readouterr().err
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(tiny()))
    assert main([str(good), "--policies", "magic"]) == 2
    assert "--policies: unknown magic" in capsys.readouterr().err
