"""The gRPC overhead benchmark's table: each side's numbers and the gRPC / HTTP door ratios
(``loadtests/bench_grpc_overhead.py`` measures; this formats and compares)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from loadtests.bench.stats import percentile
from loadtests.results_file import fmt


@dataclass(frozen=True)
class Side:
    requests: int
    errors: int
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    gateway_cpu_us: float | None = None  # the gateway's CPU per request (None: direct)
    client_cpu_us: float | None = None  # this load generator's CPU per request
    # The gateway's context switches per request, every thread: grpc.aio hands each operation's
    # completion from its poller thread to the event loop, so this counts the thread hops.
    gateway_switches: float | None = None
    # Each round's own TTFT p50: the sides of one round ran back to back, so a ratio taken
    # within a round is spared the machine's swings between rounds.
    round_ttft_p50_ms: tuple[float | None, ...] = ()


def side_from(ttfts: list[float], errors: int) -> Side:
    """Percentiles by the load generator's one method (loadtests.bench.stats), so this table
    reads like the HTTP overhead benchmark's."""
    ms = [t * 1000.0 for t in ttfts]
    return Side(len(ms), errors, percentile(ms, 50), percentile(ms, 99))


def added_ms(
    level: dict[str, Side], side: str, field: str, direct: str = "direct_http"
) -> float | None:
    base, other = getattr(level[direct], field), getattr(level[side], field)
    return None if base is None or other is None else other - base


def _ratio(top: float | None, bottom: float | None) -> float | None:
    return None if top is None or not bottom else top / bottom


RoundRatios = dict[str, list[float | None]]  # per gateway: each round's added TTFT p50 ratio


def door_ratios(
    level: dict[str, Side],
) -> tuple[dict[str, dict[str, float | None]], RoundRatios]:
    """Per gateway: its gRPC door over its HTTP door, in added TTFT p50/p99 (both over
    direct_http, and each over its own protocol's direct side: ``same_protocol``) and in
    CPU per request; and the added TTFT p50 ratio of each round, with their median."""
    out: dict[str, dict[str, float | None]] = {}
    rounds: RoundRatios = {}
    for side in level:
        if not side.endswith("_grpc") or side.startswith("direct_"):
            continue
        name = side.removesuffix("_grpc")
        # The same-protocol baseline: the bare door of the same engine (gateway_h2: h2's).
        direct_grpc = (
            "direct_grpc_h2"
            if name.endswith("_h2") and "direct_grpc_h2" in level
            else "direct_grpc"
        )
        grpc_side, http_side = level[side], level[f"{name}_http"]
        ratios: dict[str, float | None] = {}
        for pct in ("p50", "p99"):
            field = f"ttft_{pct}_ms"
            over_http = added_ms(level, f"{name}_http", field)
            ratios[f"added_ttft_{pct}"] = _ratio(added_ms(level, side, field), over_http)
            same = added_ms(level, side, field, direct_grpc)
            ratios[f"added_ttft_{pct}_same_protocol"] = _ratio(same, over_http)
        ratios["gateway_cpu"] = _ratio(grpc_side.gateway_cpu_us, http_side.gateway_cpu_us)
        out[name] = ratios
        by_round = [
            _ratio(_minus(g, d), _minus(h, d))
            for g, h, d in zip(
                grpc_side.round_ttft_p50_ms,
                http_side.round_ttft_p50_ms,
                level["direct_http"].round_ttft_p50_ms,
                strict=True,
            )
        ]
        known = [r for r in by_round if r is not None]
        ratios["added_ttft_p50_round_median"] = statistics.median(known) if known else None
        rounds[name] = by_round
    return out, rounds


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def format_table(levels: dict[int, dict[str, Side]]) -> str:
    header = (
        f"{'conc':>5} {'side':>16} {'reqs':>6} {'err':>4} {'TTFT p50':>9} {'TTFT p99':>9} "
        f"{'+p50':>7} {'+p99':>7} {'p50 ratio':>9} {'gw cpu/req':>10} {'gw cs/req':>9} "
        f"{'client cpu/req':>14}"
    )
    lines = [header, "-" * len(header)]
    for concurrency, level in levels.items():
        base = level["direct_http"].ttft_p50_ms
        for side, s in level.items():
            ratio = None if not base or s.ttft_p50_ms is None else s.ttft_p50_ms / base
            lines.append(
                f"{concurrency:>5} {side:>16} {s.requests:>6} {s.errors:>4} "
                f"{fmt(s.ttft_p50_ms):>9} {fmt(s.ttft_p99_ms):>9} "
                f"{fmt(added_ms(level, side, 'ttft_p50_ms')):>7} "
                f"{fmt(added_ms(level, side, 'ttft_p99_ms')):>7} {fmt(ratio, 3):>9} "
                f"{fmt(s.gateway_cpu_us, 0):>10} {fmt(s.gateway_switches, 1):>9} "
                f"{fmt(s.client_cpu_us, 0):>14}"
            )
        ratios_by_gateway, by_round = door_ratios(level)
        for name, ratios in ratios_by_gateway.items():
            lines.append(
                f"{concurrency:>5} {name + ' grpc/http':>16}  added TTFT p50 "
                f"{fmt(ratios['added_ttft_p50'], 2)}x, p99 {fmt(ratios['added_ttft_p99'], 2)}x "
                f"(over direct_grpc: p50 {fmt(ratios['added_ttft_p50_same_protocol'], 2)}x, "
                f"p99 {fmt(ratios['added_ttft_p99_same_protocol'], 2)}x), "
                f"gateway CPU/request {fmt(ratios['gateway_cpu'], 2)}x"
            )
            each = ", ".join(fmt(r, 2) for r in by_round[name])
            lines.append(
                f"{'':>5} {'':>16}  added TTFT p50 ratio by round: {each} "
                f"(median {fmt(ratios['added_ttft_p50_round_median'], 2)}x)"
            )
    lines.append(
        "(ms; '+' = added TTFT vs direct_http; ratio = side p50 / direct_http p50; cpu in us: "
        "the gateway's process tree (direct_grpc: the bare gRPC door's, loadtests/grpc_direct) "
        "and this load generator, per request; cs = the gateway's context switches, all its "
        "threads, per request)"
    )
    return "\n".join(lines)
