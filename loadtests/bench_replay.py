"""Does a replay reproduce what really happened? Record a ``meridian bench`` run against the
emulated three-region fleet, replay its ``requests.csv`` through the simulator, compare.

    python -m loadtests.bench_replay [--policy predicted_ttft] [--rate 8] [--duration 40]
                                     [--out DIR] [--trace-out FILE]

Three processes as ``loadtests.bench_fleet`` runs them (``meridian emulate
loadtests/fleets/three-region.yaml --from-region us-east``, ``meridian serve`` in front of it
with ``routing.policy = --policy`` and the prices below, the load generator driving
``loadtests/workloads/chat-shared-prefix.yaml`` open-loop). Its ``requests.csv`` becomes a
``meridian-trace`` (prefix hashes regenerated from the workload's seed), which is replayed on
the same fleet file under the recorded policy and, for the operator question of docs/slo.md,
under round_robin, predicted_ttft and slo_cost (``--objective-ms``). Each policy is replayed cold
(from the configuration) and followed (the recorded routes for the first ``--warmup`` seconds,
``loadtests/sim/replay_follow.py``, compared after them). Reported: the recorded and replayed
per-backend split (the goal: within 5 percentage points), TTFT p50 (within 15%)
and p99, and spend at the prices below. JSON in ``loadtests/results/bench_replay.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson
import yaml
from aiohttp import ClientSession
from prometheus_client.parser import text_string_to_metric_families

from loadtests.bench.output import write_requests_csv
from loadtests.bench.runner import BenchOptions, run_bench
from loadtests.bench.workload import load_workload, with_overrides
from loadtests.bench_fleet import FLEET, WORKLOAD, emulated_fleet, gateway_config
from loadtests.emulator.fleet import FleetError, load_fleet
from loadtests.learner_watch import watch_learner
from loadtests.processes import ADMIN_URLS, gateway
from loadtests.results_file import write_results
from loadtests.sim.loop import simulate
from loadtests.sim.replay_cli import recorded_spend
from loadtests.sim.replay_fleet import replay_fleet
from loadtests.sim.replay_follow import Follow, following, let_go_at, replay_following
from loadtests.sim.replay_import import from_bench_csv
from loadtests.sim.replay_trace import ReplayTrace, write_trace
from loadtests.sim.results import PolicyRun

# Per million tokens: premium GPUs next to the gateway, cheaper ones further away, serverless
# at a per-token premium in each region.
PRICES: dict[str, dict[str, float]] = {
    "us-east-dedicated": {"prompt_per_mtok": 3.0, "cached_prompt_per_mtok": 0.3,
                          "completion_per_mtok": 15.0},
    "us-east-serverless": {"prompt_per_mtok": 4.0, "completion_per_mtok": 20.0},
    "eu-west-dedicated": {"prompt_per_mtok": 1.5, "cached_prompt_per_mtok": 0.15,
                          "completion_per_mtok": 6.0},
    "eu-west-serverless": {"prompt_per_mtok": 2.0, "completion_per_mtok": 8.0},
    "ap-southeast-dedicated": {"prompt_per_mtok": 0.8, "cached_prompt_per_mtok": 0.08,
                               "completion_per_mtok": 3.0},
    "ap-southeast-serverless": {"prompt_per_mtok": 1.0, "completion_per_mtok": 4.0},
}  # fmt: skip


def _placeholder_backends() -> list[dict[str, Any]]:
    """The fleet's backends without a running fleet (a replay reads no URL)."""
    fleet = load_fleet(FLEET)
    assert not isinstance(fleet, FleetError), fleet
    return [{"name": b.name, "url": "http://127.0.0.1:1/v1"} for b in fleet.backend_configs()]


def operator_config(backends: list[dict[str, Any]], policy: str) -> dict[str, Any]:
    config = gateway_config(backends)
    for backend in config["backends"]:
        backend["price"] = PRICES[backend["name"]]
    config["routing"] = {"policy": policy}
    return config


async def record(
    policy: str,
    rate: float,
    duration_s: float,
    csv_path: Path,
    cold: bool = False,
    watch: Path | None = None,
) -> dict[str, Any]:
    """``cold``: the load starts with the gateway (no wait for its signals); ``watch``: the
    live router's per-backend terms, polled during the run (loadtests/learner_watch.py)."""
    async with emulated_fleet() as backends:
        config = operator_config(backends, policy)
        async with gateway(config) as (url, _):
            if not cold:
                await signals_warm(ADMIN_URLS[url], [b["name"] for b in config["backends"]])
            model = backends[0]["models"][0]
            workload = with_overrides(
                load_workload(WORKLOAD), mode="open", rate=rate, duration_s=duration_s,
                requests=None, model=model,
            )  # fmt: skip
            stop = asyncio.Event()
            watching = None
            if watch is not None:
                watching = asyncio.create_task(watch_learner(url, model, 0.1, stop, watch))
            result = await run_bench(url, workload, BenchOptions())
            stop.set()
            if watching is not None:
                await watching
    write_requests_csv(result.records, csv_path)
    return config


async def signals_warm(admin_url: str, names: list[str], scrapes: int = 2) -> None:
    """Until the gateway has probed every backend and scraped each one ``scrapes`` times (its
    fleet snapshot then holds engine metrics): a gateway whose "last hour" is replayed has been
    running, and the simulator's gateway starts with its signals. A load that starts at the
    gateway's first second is routed on configuration alone (no queue term: nothing scraped),
    which the replay reproduces only with ``--signals-after`` (docs/replay.md)."""
    async with ClientSession() as session:
        while True:
            async with session.get(f"{admin_url}/metrics") as response:
                page = await response.text()
            probed: set[str] = set()
            scraped: dict[str, float] = {}
            for family in text_string_to_metric_families(page):
                for sample in family.samples:
                    backend = sample.labels.get("backend", "")
                    if sample.name == "meridian_probe_rtt_ewma_seconds":
                        probed.add(backend)
                    elif sample.name == "meridian_scrape_duration_seconds_count":
                        scraped[backend] = scraped.get(backend, 0.0) + sample.value
            if all(n in probed and scraped.get(n, 0.0) >= scrapes for n in names):
                return
            await asyncio.sleep(0.1)  # a benchmark's start-up, never a test


def replay(
    csv_path: Path,
    config: dict[str, Any],
    policies: list[str],
    objective_ms: float,
    trace_out: Path,
    warmup_s: float,
    follow_samples: int = 0,
    signals_after_s: float = 0.0,
) -> dict[str, Any]:
    recorded = from_bench_csv(csv_path, WORKLOAD)
    write_trace(trace_out, recorded)  # as recorded: no objective
    recorded = dataclasses.replace(
        recorded,
        lines=tuple(
            dataclasses.replace(line, ttft_objective_ms=objective_ms) for line in recorded.lines
        ),
    )
    with tempfile.TemporaryDirectory() as tmp:
        config_path = Path(tmp) / "gateway.yaml"
        stripped = {
            **config,
            "backends": [{**b, "url": "http://127.0.0.1:1/v1"} for b in config["backends"]],
        }
        config_path.write_text(yaml.safe_dump(stripped))
        span = recorded.lines[-1].t_s - recorded.lines[0].t_s
        fleet = replay_fleet(FLEET, config_path, None, span, signals_after_s)
    assert not isinstance(fleet, str), fleet
    trace = ReplayTrace(recorded, fleet.scenario.regions, fleet.gateway_region)
    names = [g.name for g in fleet.scenario.backends]
    start = recorded.lines[0].t_s
    windows = {
        "all": np.ones(len(recorded.lines), np.bool_),
        f"after {warmup_s:g} s": np.asarray([ln.t_s - start >= warmup_s for ln in recorded.lines]),
    }
    got_backend = [ln.recorded.backend if ln.recorded else None for ln in recorded.lines]
    got_ttft = np.asarray(
        [
            ln.recorded.ttft_ms if ln.recorded and ln.recorded.ttft_ms else np.nan
            for ln in recorded.lines
        ]
    )
    out: dict[str, Any] = {
        "requests": len(recorded.lines), "warmup_s": warmup_s, "follow_samples": follow_samples,
        "recorded": {},
    }  # fmt: skip
    for label, mask in windows.items():
        out["recorded"][label] = _window(names, got_backend, got_ttft, mask)
    out["recorded"]["spend"] = recorded_spend(recorded, fleet.scenario)
    out["replays"] = {}
    for policy in policies:
        # Cold: the replay's router starts from the configuration, compared over every window.
        # Followed: it follows the recorded routes for the first ``warmup_s`` (so it starts from
        # the recording's learned state) and is compared after them (replay_follow.py).
        cold = simulate(fleet.scenario, trace, policy)
        entry: dict[str, Any] = {"spend": float(cold.results.cost.sum())}
        for label, mask in windows.items():
            entry[label] = _versus(names, cold, mask, out["recorded"][label])
        after = f"after {warmup_s:g} s"
        followed = replay_following(fleet.scenario, trace, policy, warmup_s)
        entry[f"followed, {after}"] = _versus(
            names, followed, windows[after], out["recorded"][after]
        )
        if follow_samples:
            # Followed until every backend the recording used has ``follow_samples`` learned
            # first tokens (replay_follow.Follow.samples), compared from where it let go.
            simulation = following(fleet.scenario, trace, policy, Follow(samples=follow_samples))
            run = simulation.run()
            since = let_go_at(simulation)
            mask = np.asarray([ln.t_s - start >= since for ln in recorded.lines])
            if not mask.any():
                continue  # it never let go: nothing to compare
            label = f"followed {follow_samples} samples, after {since:.1f} s"
            entry[label] = _versus(names, run, mask, _window(names, got_backend, got_ttft, mask))
        out["replays"][policy] = entry
    return out


def _versus(names: list[str], run: PolicyRun, mask: Any, theirs: dict[str, Any]) -> dict[str, Any]:
    res = run.results
    backend = [run.backends[b].name if b >= 0 else None for b in res.backend.tolist()]
    mine = _window(names, backend, res.ttft_ms, mask)
    mine["split_max_diff_pp"] = 100 * max(abs(mine["split"][n] - theirs["split"][n]) for n in names)
    mine["ttft_p50_ratio"] = mine["ttft_p50_ms"] / theirs["ttft_p50_ms"]
    return mine


def _window(
    names: list[str], backend: list[str | None], ttft_ms: npt.NDArray[np.float64], mask: Any
) -> dict[str, Any]:
    """Per-backend split and TTFT p50 / p99 of the requests in ``mask``."""
    chosen = [b for b, keep in zip(backend, mask.tolist(), strict=True) if keep and b]
    total = max(len(chosen), 1)
    ttfts = ttft_ms[mask & ~np.isnan(ttft_ms)]
    return {
        "requests": len(chosen),
        "split": {n: chosen.count(n) / total for n in names},
        "ttft_p50_ms": float(np.percentile(ttfts, 50)),
        "ttft_p99_ms": float(np.percentile(ttfts, 99)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.bench_replay", description=__doc__)
    parser.add_argument("--policy", default="predicted_ttft", help="the recording gateway's")
    parser.add_argument("--rate", type=float, default=8.0, help="sessions per second")
    parser.add_argument("--duration", type=float, default=40.0, help="seconds of load")
    parser.add_argument("--objective-ms", type=float, default=1000.0, help="for slo_cost")
    parser.add_argument("--out", type=Path, default=Path("loadtests/results"))
    parser.add_argument("--trace-out", type=Path, default=None, help="keep the trace here")
    parser.add_argument(
        "--warmup", type=float, default=10.0,
        help="also compare only requests after this many seconds, cold and after following "
        "the recorded routes for them (the replay's router then starts from the recording's state)",
    )  # fmt: skip
    parser.add_argument(
        "--from-csv", type=Path, default=None,
        help="replay this earlier run's requests.csv (recorded under --policy) instead of recording",
    )  # fmt: skip
    parser.add_argument(
        "--follow-samples", type=int, default=0, metavar="N",
        help="also follow until the router learned N recorded first tokens on every backend "
        "the recording used N times, compared from there (replay_follow.Follow.samples)",
    )  # fmt: skip
    parser.add_argument(
        "--signals-after", type=float, default=0.0, metavar="S",
        help="the replays neither scrape nor probe for their first S s (a --from-csv recording "
        "of a gateway that had just started)",
    )  # fmt: skip
    parser.add_argument(
        "--cold", action="store_true",
        help="record a gateway that gets its load as it starts (no wait for its signals)",
    )  # fmt: skip
    parser.add_argument(
        "--watch-learner", type=Path, default=None, metavar="FILE",
        help="poll the live router's per-backend terms during the recording into FILE (JSONL)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.from_csv is not None:
        csv_path = args.from_csv
        config = operator_config(_placeholder_backends(), args.policy)
    else:
        csv_path = args.out / f"bench_replay-{args.policy}-requests.csv"
        config = asyncio.run(
            record(args.policy, args.rate, args.duration, csv_path, args.cold, args.watch_learner)
        )
    trace_out = args.trace_out or args.out / f"bench_replay-{args.policy}.trace.jsonl"
    policies = list(dict.fromkeys([args.policy, "round_robin", "predicted_ttft", "slo_cost"]))
    doc = replay(
        csv_path, config, policies, args.objective_ms, trace_out, args.warmup,
        args.follow_samples, args.signals_after,
    )  # fmt: skip
    doc.update(policy=args.policy, rate=args.rate, duration_s=args.duration)
    rec = doc["recorded"]
    print(f"recorded under {args.policy}: {doc['requests']} requests, spend {rec['spend']:.4f}")
    for label, window in rec.items():
        if label == "spend":
            continue
        print(
            f"  {label}: {window['requests']} requests, TTFT p50 {window['ttft_p50_ms']:.0f} ms, "
            f"p99 {window['ttft_p99_ms']:.0f} ms; split "
            + ", ".join(f"{n} {v:.1%}" for n, v in window["split"].items() if v)
        )
    for policy, entry in doc["replays"].items():
        for label, r in entry.items():
            if label == "spend":
                continue
            print(
                f"replay {policy:<15} [{label}] split off by <= {r['split_max_diff_pp']:.1f} pp, "
                f"TTFT p50 {r['ttft_p50_ms']:.0f} ms ({r['ttft_p50_ratio']:.2f}x), "
                f"p99 {r['ttft_p99_ms']:.0f} ms"
            )
        print(f"replay {policy:<15} spend {entry['spend']:.4f}")
    path = write_results(args.out, f"bench_replay-{args.policy}", orjson.loads(orjson.dumps(doc)))
    print(f"wrote {path} and {trace_out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
