"""Recorded traffic into ``meridian-trace`` (``loadtests.sim.replay_trace``), from:

- ``meridian bench``'s ``requests.csv`` (the recorded TTFT is the gateway's own ``ttft``
  Server-Timing entry when the row has one, as the simulator measures it). It holds no prompt, so prefix hashes come from the
  workload file the run used (``--workload``): its planner regenerates each request's system
  prompt and user turn from the seed, exactly as the run sent them, and they are hashed as the
  gateway hashes them (``routing.profile``). Later turns of a multi-turn session resend the
  replies the server gave, which the CSV does not keep; they are hashed with empty replies, so
  such a turn shares its system prompt and first question but not the history after them.
  Without ``--workload`` requests carry no hashes (no prefix is shared in the replay).
- Meridian's request log (``meridian.request`` lines in the JSON log format,
  ``gateway/observability``): arrival = the line's ``time`` less its ``e2e_ms``; tenant,
  origin, prompt/completion/cached tokens and the route as recorded; prefix hashes when the
  gateway wrote them (``logging.prefix_hashes: true``: ``prefix_hashes`` in hex, as in the
  trace format, and ``prefix_block_tokens``), else none (the replay then shares no prefix).
"""

from __future__ import annotations

import csv
import dataclasses
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from gateway.timing import parse
from loadtests.bench.plan import Planner, request_body
from loadtests.bench.workload import WorkloadError, load_workload
from loadtests.sim.replay_trace import Recorded, TraceFile, TraceFormatError, TraceLine, read_trace
from routing.prefix import DEFAULT_BLOCK_TOKENS
from routing.profile import profile_from_chat

REQUEST_LOGGER = "meridian.request"


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None


def _int(text: str | None) -> int | None:
    value = _float(text)
    return None if value is None else int(value)


def _gateway_ttft_ms(row: dict[str, str]) -> float | None:
    """The gateway's own ``ttft`` Server-Timing entry (arrival at the gateway -> first token
    there: the simulator's definition), else the client's TTFT."""
    for entry in parse(row.get("server_timing") or ""):
        if entry.name == "ttft" and entry.dur_ms is not None:
            return entry.dur_ms
    return _float(row.get("ttft_ms"))


def _hashes(
    planner: Planner | None, row: dict[str, str]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(the gateway's chain, salted by tenant; the engine's, unsalted: the emulator hashes
    every prompt as tenant ``default``, loadtests/emulator/streaming.py)."""
    session, turn = _int(row.get("session")), _int(row.get("turn"))
    if planner is None or session is None or turn is None:
        return (), ()
    plan = planner.session(session)
    if plan.api != "chat" or turn >= len(plan.turns):
        return (), ()
    body = request_body(plan, turn, [""] * turn, user_field=False)
    gateway = profile_from_chat(body, plan.tenant, block_tokens=DEFAULT_BLOCK_TOKENS)
    engine = profile_from_chat(body, "default", block_tokens=DEFAULT_BLOCK_TOKENS)
    return gateway.prefix_hashes, engine.prefix_hashes


def from_bench_csv(path: Path, workload: Path | None = None) -> TraceFile:
    """Every request of a ``meridian bench`` run that completed (errors are not replayed)."""
    planner = None
    if workload is not None:
        try:
            planner = Planner(load_workload(workload))
        except WorkloadError as exc:
            raise TraceFormatError(str(exc)) from None
    try:
        with path.open(newline="") as handle:
            rows = list(csv.DictReader(handle))
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot read: {exc.strerror}") from None
    lines = []
    for number, row in enumerate(rows, start=2):
        sent, prompt = _float(row.get("sent_s")), _int(row.get("prompt_tokens"))
        output = _int(row.get("completion_tokens"))
        if sent is None or prompt is None or output is None:
            raise TraceFormatError(
                f"{path}:{number}: needs sent_s, prompt_tokens, completion_tokens"
            )
        if row.get("error") or output < 1:
            continue
        recorded = Recorded(
            row.get("backend") or None, _gateway_ttft_ms(row), _float(row.get("e2e_ms")),
            _int(row.get("cached_tokens")), _int(row.get("status")),
        )  # fmt: skip
        gateway, engine = _hashes(planner, row)
        lines.append(
            TraceLine(
                t_s=sent, prompt_tokens=prompt, output_tokens=output,
                origin=row.get("origin") or None, tenant=row.get("tenant") or "default",
                prefix_hashes=gateway, recorded=recorded,
                engine_prefix_hashes=() if engine == gateway else engine,
            )
        )  # fmt: skip
    return TraceFile(tuple(sorted(lines, key=lambda line: line.t_s)), source=f"bench:{path.name}")


def _log_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        rows = path.read_bytes().splitlines()
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot read: {exc.strerror}") from None
    for number, row in enumerate(rows, start=1):
        try:
            raw = orjson.loads(row)
        except orjson.JSONDecodeError:
            continue  # other log lines (text format, tracebacks) are not requests
        if isinstance(raw, dict) and raw.get("logger") == REQUEST_LOGGER:
            yield number, raw


def _arrival_s(raw: dict[str, Any]) -> float | None:
    stamp, e2e = raw.get("time"), raw.get("e2e_ms")
    if not isinstance(stamp, str) or not isinstance(e2e, int | float):
        return None
    try:
        end = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
    return end - e2e / 1000.0


def from_request_log(path: Path) -> TraceFile:
    """Every request line with a route and output (requests that failed before their first
    token did no work upstream to replay)."""
    lines = []
    block_tokens = DEFAULT_BLOCK_TOKENS
    for number, raw in _log_lines(path):
        at, route = _arrival_s(raw), raw.get("route")
        output = raw.get("completion_tokens")
        if at is None or not isinstance(route, dict) or not isinstance(output, int) or output < 1:
            continue
        hashes = raw.get("prefix_hashes") or []
        try:
            chain = tuple(int(h, 16) for h in hashes)
        except (TypeError, ValueError):
            raise TraceFormatError(f"{path}:{number}: 'prefix_hashes' must be hex") from None
        if chain and isinstance(raw.get("prefix_block_tokens"), int):
            block_tokens = raw["prefix_block_tokens"]
        prompt = raw.get("prompt_tokens")
        recorded = Recorded(
            route.get("backend"), raw.get("ttft_ms"), raw.get("e2e_ms"),
            raw.get("cached_tokens"), raw.get("status"),
        )  # fmt: skip
        lines.append(
            TraceLine(
                t_s=at, prompt_tokens=prompt if isinstance(prompt, int) else 0,
                output_tokens=output, origin=raw.get("origin"),
                tenant=raw.get("tenant") or "default", prefix_hashes=chain, recorded=recorded,
            )
        )  # fmt: skip
    if not lines:
        raise TraceFormatError(f"{path}: no '{REQUEST_LOGGER}' lines with a route (JSON format)")
    lines.sort(key=lambda line: line.t_s)
    start = lines[0].t_s
    shifted = tuple(dataclasses.replace(line, t_s=line.t_s - start) for line in lines)
    return TraceFile(shifted, block_tokens, source=f"request-log:{path.name}")


def load_any(path: Path, workload: Path | None = None) -> TraceFile:
    """A trace file, a bench ``requests.csv`` or a request log, told apart by their content."""
    if path.suffix == ".csv":
        return from_bench_csv(path, workload)
    try:
        first = path.open("rb").readline()
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot read: {exc.strerror}") from None
    if b'"meridian-trace"' in first:
        return read_trace(path)
    return from_request_log(path)
