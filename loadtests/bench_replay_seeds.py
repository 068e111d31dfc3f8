"""How reliably does a followed replay reproduce its recordings? Replay several kept
``meridian bench`` recordings (``python -m loadtests.bench_replay``'s ``requests.csv``) under
their own policy with several simulator seeds, for each way of following the recorded routes
(``loadtests/sim/replay_follow.py``), and count the replays that meet the goals: per-backend
split within 5 percentage points and TTFT p50 within 15% of the recording, over the requests
after the replay's router let go.

    python -m loadtests.bench_replay_seeds RUN1/requests.csv RUN2/requests.csv ... \\
        [--policy predicted_ttft] [--seeds 5] [--follow 10s --follow 15s --follow 12n] [--out DIR]

``--follow``: ``<S>s`` follows S seconds, ``<N>n`` until every backend the recording used N
times taught the router N recorded first tokens; ``0s``: cold (not followed, compared over all
requests). A seed changes the simulator's random draws (scrape and probe schedules, probe
noise, the router's tie-breaking), not the recording: the spread over seeds is how much of a
result is one lucky draw. Table on stdout, JSON in ``loadtests/results/``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import yaml

from loadtests.bench_fleet import FLEET, WORKLOAD
from loadtests.bench_replay import _placeholder_backends, operator_config
from loadtests.results_file import write_results
from loadtests.sim.replay_fleet import ReplayFleet, replay_fleet
from loadtests.sim.replay_follow import Follow, following, let_go_at
from loadtests.sim.replay_import import from_bench_csv
from loadtests.sim.replay_trace import ReplayTrace, TraceFile

SPLIT_PP, P50_REL = 5.0, 0.15


def parse_follow(text: str) -> Follow:
    """``10s`` -> 10 seconds, ``12n`` -> 12 samples, ``0s`` -> not followed."""
    number, unit = text[:-1], text[-1:]
    if unit == "s":
        return Follow(seconds=float(number) or None)
    if unit == "n":
        return Follow(samples=int(number))
    raise argparse.ArgumentTypeError(f"--follow {text!r}: <seconds>s or <samples>n")


def replay_on(policy: str, span_s: float) -> ReplayFleet:
    """The fleet the recordings are replayed on, with the operator config they ran with."""
    with tempfile.TemporaryDirectory() as tmp:
        config_path = Path(tmp) / "gateway.yaml"
        config_path.write_text(yaml.safe_dump(operator_config(_placeholder_backends(), policy)))
        fleet = replay_fleet(FLEET, config_path, None, span_s)
    assert not isinstance(fleet, str), fleet
    return fleet


def one_replay(
    fleet: ReplayFleet, recorded: TraceFile, policy: str, follow: Follow, seed: int
) -> dict[str, Any]:
    """The split and TTFT p50 of one seeded replay against the recording, from where it let go."""
    seeded = fleet.scenario.model_copy(update={"seed": seed})
    trace = ReplayTrace(recorded, seeded.regions, fleet.gateway_region)
    simulation = following(seeded, trace, policy, follow)
    run = simulation.run()
    since = let_go_at(simulation)
    start = recorded.lines[0].t_s
    keep = [i for i, line in enumerate(recorded.lines) if line.t_s - start >= since]
    theirs = [recorded.lines[i].recorded for i in keep]
    names = seeded.backend_names()
    mine = [run.backends[b].name for b in run.results.backend[keep].tolist() if b >= 0]
    routed = [r.backend for r in theirs if r is not None and r.backend]
    split = 100 * max(
        abs(mine.count(n) / max(len(mine), 1) - routed.count(n) / max(len(routed), 1))
        for n in names
    )
    ttfts = [r.ttft_ms for r in theirs if r is not None and r.ttft_ms is not None]
    ours = run.results.ttft_ms[keep]
    ours = ours[~np.isnan(ours)]
    ratio = (
        float(np.percentile(ours, 50) / np.percentile(ttfts, 50))
        if len(ours) and ttfts
        else float("nan")
    )
    return {"from_s": since, "requests": len(keep), "split_pp": split, "p50_ratio": ratio}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtests.bench_replay_seeds", description=__doc__
    )
    parser.add_argument("csv", type=Path, nargs="+", help="kept bench_replay requests.csv files")
    parser.add_argument("--policy", default="predicted_ttft", help="the recordings' policy")
    parser.add_argument("--seeds", type=int, default=5, help="simulator seeds per replay")
    parser.add_argument("--follow", type=parse_follow, action="append", help="10s, 12n, 0s")
    parser.add_argument("--out", type=Path, default=Path("loadtests/results"))
    args = parser.parse_args(argv)
    follows: list[Follow] = args.follow or [Follow(seconds=10.0), Follow(seconds=15.0)]
    recordings = [from_bench_csv(path, WORKLOAD) for path in args.csv]
    span = max(r.lines[-1].t_s - r.lines[0].t_s for r in recordings)
    fleet = replay_on(args.policy, span)
    doc: dict[str, Any] = {"policy": args.policy, "seeds": args.seeds, "recordings": [
        str(p) for p in args.csv], "follows": []}  # fmt: skip
    print(f"{'follow':<24} {'met both':>9} {'split ok':>9} {'p50 ok':>7} "
          f"{'split p50/p90/max pp':>21} {'p50 ratio min..max':>19}")  # fmt: skip
    for follow in follows:
        rows = [
            {"recording": k, "seed": seed, **one_replay(fleet, rec, args.policy, follow, seed)}
            for k, rec in enumerate(recordings)
            for seed in range(args.seeds)
        ]
        split = np.asarray([r["split_pp"] for r in rows])
        ratio = np.asarray([r["p50_ratio"] for r in rows])
        split_ok, p50_ok = split <= SPLIT_PP, np.abs(ratio - 1.0) <= P50_REL
        n = len(rows)
        print(
            f"{follow.label():<24} {int((split_ok & p50_ok).sum()):>4}/{n:<4} "
            f"{int(split_ok.sum()):>4}/{n:<4} {int(p50_ok.sum()):>3}/{n:<3} "
            f"{np.percentile(split, 50):>7.1f}/{np.percentile(split, 90):.1f}/{split.max():.1f} "
            f"{ratio.min():>11.2f}..{ratio.max():.2f}"
        )
        per_recording = [
            f"{k + 1}:{int((split_ok & p50_ok)[k * args.seeds : (k + 1) * args.seeds].sum())}"
            for k in range(len(recordings))
        ]
        print(f"{'':<24} met per recording (of {args.seeds}): {' '.join(per_recording)}")
        doc["follows"].append({"follow": follow.label(), "replays": rows})
    write_results(args.out, f"bench_replay_seeds-{args.policy}", orjson.loads(orjson.dumps(doc)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
