"""Issue 14's goals, judged from one scenario's simulator runs (every policy, same trace).

Each goal is a row: what it asks, the scenario, what was measured, whether it is met, and the
command that measures it. ``loadtests/bench_issue14.py`` runs the scenarios and prints them.

- **return**: after a path recovers, traffic is back (>= 50% of its pre-event share, as
  ``loadtests/sim/path_events.py`` counts it) within ``RETURN_S``.
- **leave**: off a degraded path (<= 10% of its share left) within two probe intervals, in
  every variant, the one with fast probes included.
- **error**: predicted_ttft's median |predicted - actual| / actual <= 10%, and >= 90% of the
  actual TTFTs at or below the predicted p90.
- **s3 vs round robin**: scenario 3's TTFT p99 <= round robin's.
- **s1 vs oracle**: scenario 1's TTFT p99 <= 1.3x the oracle's.
- **e2e**: e2e p50 and p99 no worse than the best baseline's (each its own best), while the
  TTFT p99 stays below every baseline's; goodput under the joint objective the best of all
  baselines. Not baselines (``BASELINES_EXCLUDED``): the oracle (it knows what no gateway can;
  its goodput is shown beside) and ``slo_cost``, Meridian's own policy (predicted_ttft's
  predictor plus a cost objective, falling back to exactly predicted_ttft's choice): the
  lead's decision in session 7. Both stay in every table.
- **exploration**: <= 2% of the routed requests, and no explored request with a first-token
  deadline past it (the explorer never takes a request whose deadline is tight; a late one is
  counted whatever made it late). Beside it, for every explored request, deadline or not: how
  many passed the joint objective's TTFT, against the share of all requests that did.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from loadtests.sim.path_events import PathReaction
from loadtests.sim.summary import Summary, is_baseline

OURS = "predicted_ttft"
RETURN_S = 10.0
ERROR_MAX, BELOW_P90_MIN = 0.10, 0.90
ORACLE_MAX = 1.3
EXPLORE_MAX = 0.02
SIM = "meridian sim loadtests/scenarios/{file} --no-plots"


@dataclass(frozen=True, slots=True)
class GoalRow:
    goal: str
    scenario: str
    measured: str
    met: bool | None  # None: nothing to judge here (no such event, no such policy)
    command: str

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class ExploredDeadlines:
    """What became of the requests sent to re-measure a backend."""

    explored: int
    with_deadline: int  # ...of them carrying a first-token deadline
    late: int  # ...and past it (the goal: none)
    past_objective: int  # explored past the joint objective's TTFT, deadline or not
    past_objective_share: float  # ...beside the share of all served requests past it


def _row(goal: str, file: str, measured: str, met: bool | None, command: str = "") -> GoalRow:
    return GoalRow(goal, file, measured, met, command or SIM.format(file=file))


def path_rows(
    file: str, reactions: Sequence[PathReaction], probe_interval_s: float
) -> list[GoalRow]:
    rows: list[GoalRow] = []
    for r in reactions:
        probes = "probes see it" if r.probes_see else "probes fast"
        what = f"{r.backend} +{r.extra_ms:.0f} ms at {r.start_s:.0f} s, {probes}"
        bound = 2.0 * probe_interval_s
        left = "never" if r.leave_s is None else f"{r.leave_s:.1f} s"
        rows.append(
            _row(
                f"leave within 2 probe intervals ({bound:.0f} s)", file, f"{what}: {left}",
                r.leave_s is not None and r.leave_s <= bound,
            )
        )  # fmt: skip
        if r.end_s is not None:
            back = "never" if r.return_s is None else f"{r.return_s:.1f} s"
            rows.append(
                _row(
                    f"return within {RETURN_S:.0f} s of recovery", file, f"{what}: {back}",
                    r.return_s is not None and r.return_s <= RETURN_S,
                )
            )  # fmt: skip
    return rows


def acceptance_rows(output: str, command: str) -> list[GoalRow]:
    """The leave / return rows of the real-process acceptance test, from the tables it prints
    (``== near: ..., probes see it`` then ``left after (s)``, ``probe interval (s)``, ``back
    after recovery (s)``); none when it printed none (it failed before, or was not run)."""
    rows: list[GoalRow] = []
    for block in output.split("== ")[1:]:
        title, _, body = block.partition("\n")
        values: dict[str, float] = {}
        for line in body.splitlines():
            *name, value = line.split() or [""]
            try:
                values[" ".join(name)] = float(value)
            except ValueError:
                continue
        left, interval = values.get("left after (s)"), values.get("probe interval (s)")
        back = values.get("back after recovery (s)")
        if left is None or interval is None or back is None:
            continue
        where = "acceptance (real processes)"
        rows.append(
            GoalRow(
                f"leave within 2 probe intervals ({2 * interval:.0f} s)", where,
                f"{title.strip()}: {left:.2f} s", left <= 2 * interval, command,
            )
        )  # fmt: skip
        rows.append(
            GoalRow(
                f"return within {RETURN_S:.0f} s of recovery", where,
                f"{title.strip()}: {back:.2f} s", back <= RETURN_S, command,
            )
        )  # fmt: skip
    return rows


def _ours(summaries: Sequence[Summary]) -> Summary | None:
    return next((s for s in summaries if s.policy == OURS), None)


def error_row(file: str, summaries: Sequence[Summary]) -> GoalRow | None:
    ours = _ours(summaries)
    if ours is None or ours.calibration_median_rel_error is None:
        return None
    error, below = ours.calibration_median_rel_error, ours.calibration_below_p90 or 0.0
    return _row(
        "median |error| <= 10%, >= 90% below p90", file,
        f"{100 * error:.1f}%, {100 * below:.1f}% below p90",
        error <= ERROR_MAX and below >= BELOW_P90_MIN,
    )  # fmt: skip


def _by(summaries: Sequence[Summary]) -> dict[str, Summary]:
    return {s.policy: s for s in summaries}


def versus_rows(file: str, number: str, summaries: Sequence[Summary]) -> list[GoalRow]:
    """Scenario 3's p99 against round robin's, scenario 1's against the oracle's."""
    by, rows = _by(summaries), []
    ours = by.get(OURS)
    rr, oracle = by.get("round_robin"), by.get("oracle")
    if number == "3" and ours and rr:
        rows.append(
            _row(
                "s3 TTFT p99 <= round robin's", file,
                f"{ours.ttft_p99_ms:.0f} vs {rr.ttft_p99_ms:.0f} ms",
                ours.ttft_p99_ms <= rr.ttft_p99_ms,
            )
        )  # fmt: skip
    if number == "1" and ours and oracle:
        ratio = ours.ttft_p99_ms / oracle.ttft_p99_ms
        rows.append(
            _row(
                "s1 TTFT p99 <= 1.3x the oracle's", file,
                f"{ours.ttft_p99_ms:.0f} / {oracle.ttft_p99_ms:.0f} ms = {ratio:.2f}x",
                ratio <= ORACLE_MAX,
            )
        )  # fmt: skip
    return rows


def e2e_row(file: str, summaries: Sequence[Summary]) -> GoalRow | None:
    ours = _ours(summaries)
    baselines = [s for s in summaries if is_baseline(s.policy)]
    if ours is None or not baselines:
        return None
    p50 = min(baselines, key=lambda s: s.e2e_p50_ms)
    p99 = min(baselines, key=lambda s: s.e2e_p99_ms)
    ttft = min(baselines, key=lambda s: s.ttft_p99_ms)
    good = max(baselines, key=lambda s: s.goodput)
    oracle = _by(summaries).get("oracle")
    beside = "" if oracle is None else f" (oracle {100 * oracle.goodput:.1f}%)"
    measured = (
        f"e2e p50 {ours.e2e_p50_ms:.0f} vs {p50.e2e_p50_ms:.0f} ({p50.policy}), "
        f"p99 {ours.e2e_p99_ms:.0f} vs {p99.e2e_p99_ms:.0f} ({p99.policy}); "
        f"TTFT p99 {ours.ttft_p99_ms:.0f} vs {ttft.ttft_p99_ms:.0f} ({ttft.policy}); "
        f"goodput {100 * ours.goodput:.1f}% vs {100 * good.goodput:.1f}% ({good.policy}){beside}"
    )
    met = (
        ours.e2e_p50_ms <= p50.e2e_p50_ms
        and ours.e2e_p99_ms <= p99.e2e_p99_ms
        and ours.ttft_p99_ms < ttft.ttft_p99_ms
        and ours.goodput >= good.goodput
    )
    return _row("e2e p50/p99 <= best baseline's, TTFT p99 lead, best goodput", file, measured, met)


def exploration_row(
    file: str, summaries: Sequence[Summary], deadlines: ExploredDeadlines | None
) -> GoalRow | None:
    ours = _ours(summaries)
    if ours is None:
        return None
    measured = f"{100 * ours.exploration_share:.2f}% of requests"
    met = ours.exploration_share <= EXPLORE_MAX
    if deadlines is not None:
        measured += (
            f"; {deadlines.late} of {deadlines.with_deadline} explored with a deadline past it; "
            f"{deadlines.past_objective} of {deadlines.explored} explored past the objective's "
            f"TTFT (all requests: {100 * deadlines.past_objective_share:.1f}%)"
        )
        met = met and deadlines.late == 0
    return _row("exploration <= 2%, none past its deadline", file, measured, met)


def table(rows: Sequence[GoalRow]) -> str:
    """One line per goal row, then the commands (one per scenario file)."""
    width = max((len(r.goal) for r in rows), default=4)
    mark = {True: "met", False: "MISSED", None: "-"}
    lines = [f"{'goal':{width}s}  {'scenario':36s} {'':6s} measured"]
    lines += [
        f"{r.goal:{width}s}  {r.scenario[:36]:36s} {mark[r.met]:6s} {r.measured}" for r in rows
    ]
    commands = dict.fromkeys(r.command for r in rows)
    return "\n".join([*lines, "", "commands:", *(f"  {c}" for c in commands)])


def over_seeds(runs: list[tuple[str, list[GoalRow]]]) -> list[GoalRow]:
    """One row per (goal, scenario file) across its seeds: met only where every judgement on
    every seed met it (the e2e goal sits at parity, and one seed's "met" is noise). A goal can
    be judged more than once a seed (scenario 5 degrades two paths)."""
    grouped: dict[tuple[str, str], list[GoalRow]] = {}
    seeds: dict[str, int] = {}
    for file, rows in runs:
        seeds[file] = seeds.get(file, 0) + 1
        for row in rows:
            grouped.setdefault((row.goal, file), []).append(row)
    verdicts: list[GoalRow] = []
    for (goal, file), found in grouped.items():
        judged = [row.met for row in found if row.met is not None]
        met = all(judged) if judged else None
        measured = f"met {sum(judged)} of {len(judged)} times over {seeds[file]} seeds"
        verdicts.append(GoalRow(goal, file, measured, met, found[0].command))
    return verdicts
