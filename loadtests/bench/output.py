"""Writing a run down: the terminal table, ``report.json``, ``requests.csv`` (a row a request)."""

from __future__ import annotations

import csv
from collections.abc import Iterable
from pathlib import Path

import orjson

from loadtests.bench.records import BenchResult, RequestRecord
from loadtests.bench.report import BenchReport, GroupSummary
from loadtests.bench.stats import Distribution, percentile

REPORT_FILE = "report.json"
REQUESTS_FILE = "requests.csv"

CSV_COLUMNS = (  # noqa: SIM905 (one header line reads better than 25 quoted names)
    "index session turn component origin tenant scheduled_s sent_s ttft_ms e2e_ms itl_p50_ms "
    "itl_p99_ms prompt_tokens completion_tokens cached_tokens usage_reported max_tokens status "
    "error error_detail route backend server_timing final_comment itl_gaps_ms"
).split()


def _ms(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _row(label: str, dist: Distribution) -> str:
    cells = (dist.mean, dist.p50, dist.p90, dist.p99, dist.max)
    return f"  {label:<10}{dist.count:>8}" + "".join(f"{_ms(v):>10}" for v in cells)


def _group_lines(title: str, groups: dict[str, GroupSummary]) -> list[str]:
    head = f"  {title:<22}{'reqs':>6}{'err':>5}{'ttft p50':>10}{'ttft p99':>10}"
    head += f"{'itl p50':>9}{'itl p99':>9}{'e2e p99':>10}{'good%':>7}"
    lines = [head]
    for name, group in groups.items():
        lines.append(
            f"  {name[:22]:<22}{group.requests:>6}{group.errors:>5}"
            f"{_ms(group.ttft_ms.p50):>10}{_ms(group.ttft_ms.p99):>10}"
            f"{_ms(group.itl_ms.p50):>9}{_ms(group.itl_ms.p99):>9}{_ms(group.e2e_ms.p99):>10}"
            f"{group.goodput_fraction * 100:>7.1f}"
        )
    return lines


def format_table(report: BenchReport) -> str:
    errors = ", ".join(f"{k}={v}" for k, v in report.errors.items()) or "none"
    slo_parts = []
    if report.goodput.slo_ttft_ms is not None:
        slo_parts.append(f"TTFT <= {report.goodput.slo_ttft_ms:g} ms")
    if report.goodput.slo_itl_p99_ms is not None:
        slo_parts.append(f"ITL p99 <= {report.goodput.slo_itl_p99_ms:g} ms")
    lines = [
        f"meridian bench: {report.workload} ({report.mode} loop) against {report.url}",
        f"  duration {report.duration_s:.2f} s   requests {report.requests}   ok {report.ok}"
        f"   errors: {errors}",
        f"  throughput {report.request_per_s:.2f} req/s   output {report.output_tokens_per_s:.1f}"
        f" tok/s   input {report.input_tokens_per_s:.1f} tok/s   cached prompt tokens "
        f"{report.cached_tokens}/{report.prompt_tokens}",
        f"  goodput ({' and '.join(slo_parts) or 'no SLO set'}): {report.goodput.good} requests"
        f" ({report.goodput.fraction * 100:.1f}%), {report.goodput.per_s:.2f} req/s",
        "",
        f"  {'ms':<10}{'count':>8}{'mean':>10}{'p50':>10}{'p90':>10}{'p99':>10}{'max':>10}",
        _row("TTFT", report.ttft_ms),
        _row("ITL", report.itl_ms),
        _row("TPOT", report.tpot_ms),
        _row("E2E", report.e2e_ms),
        _row("send lag", report.send_lag_ms),
        _row("loop lag", report.loop_lag_ms),
        "",
        *_group_lines("by origin", report.by_origin),
        "",
        *_group_lines("by backend", report.by_backend),
    ]
    if len(report.by_component) > 1:
        lines += ["", *_group_lines("by workload component", report.by_component)]
    if len(report.by_tenant) > 1:
        lines += ["", *_group_lines("by tenant", report.by_tenant)]
    return "\n".join(lines)


def write_report_json(report: BenchReport, path: Path) -> None:
    path.write_bytes(orjson.dumps(report.to_dict(), option=orjson.OPT_INDENT_2))


def _csv_row(record: RequestRecord) -> list[object]:
    gaps_ms = [gap * 1000.0 for gap in record.itl_gaps_s]
    return [
        record.index,
        record.session,
        record.turn,
        record.component,
        record.origin,
        record.tenant,
        f"{record.scheduled_s:.6f}",
        f"{record.sent_s:.6f}",
        _ms(None if record.ttft_s is None else record.ttft_s * 1000.0, 3),
        _ms(None if record.e2e_s is None else record.e2e_s * 1000.0, 3),
        _ms(percentile(gaps_ms, 50.0), 3),
        _ms(percentile(gaps_ms, 99.0), 3),
        record.prompt_tokens,
        record.completion_tokens,
        record.cached_tokens,
        record.usage_reported,
        record.max_tokens,
        record.status,
        record.error_label or "",
        record.error_detail,
        record.route or "",
        record.backend or "",
        record.server_timing or "",
        record.final_comment or "",
        " ".join(f"{gap:.3f}" for gap in gaps_ms),
    ]


def write_requests_csv(records: Iterable[RequestRecord], path: Path) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(CSV_COLUMNS)
        writer.writerows(_csv_row(record) for record in records)


def write_outputs(result: BenchResult, report: BenchReport, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    report_path, csv_path = out_dir / REPORT_FILE, out_dir / REQUESTS_FILE
    write_report_json(report, report_path)
    write_requests_csv(result.records, csv_path)
    return [report_path, csv_path]
