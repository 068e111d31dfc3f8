"""Recorded traffic for ``meridian sim --replay``: the trace format, and a ``Trace`` over it.

**Format ``meridian-trace``, version 2** — JSON Lines, UTF-8. No prompt text, ever: a prompt
is its token count and its chain of prefix block hashes (``routing.prefix``: each hash covers
every block before it and is salted by tenant, so a hash says which requests share a prefix and
nothing about what it says). The first line is the header::

    {"format": "meridian-trace", "version": 2, "block_tokens": 16, "source": "bench:requests.csv"}

then one request per line, in any order (the reader sorts by ``t_s``; a chain's back-reference
names an earlier line in the file)::

    {"t_s": 0.132, "origin": "us-east", "tenant": "acme", "prompt_tokens": 1210,
     "prefix_hashes": ["9f0c...", ...], "output_tokens": 87, "latency_class": "interactive",
     "ttft_objective_ms": 500, "deadline_ms": null,
     "recorded": {"backend": "us-east-dedicated", "ttft_ms": 41.2, "e2e_ms": 1803.0,
                  "cached_tokens": 1024, "status": 200}}

- ``t_s`` (required): arrival, seconds from the trace's start.
- ``prompt_tokens``, ``output_tokens`` (required): what the request used; the replay asks each
  engine for exactly ``output_tokens``.
- ``prefix_hashes``: 16-hex-digit block hashes, ``block_tokens`` tokens each; missing or empty
  means the trace does not know (the replay then shares no prefix for that request). Version 2:
  the first element may be ``"^<hex>"``, the chain of an earlier line up to and including that
  hash, which the hashes after it continue (``loadtests/sim/trace_chains.py``; a shared system
  prompt is then written once, not once per request). Version 1 files have no references.
- ``engine_prefix_hashes``: optional, the same prompt's chain as a serving engine hashes it,
  with no tenant salt (an engine caches a system prompt once for every tenant that sends it,
  while the gateway's index keeps tenants apart); the replay's engines use it, its router
  ``prefix_hashes``. Missing or empty: the engines use ``prefix_hashes`` too (then two tenants
  with one system prompt share no cache in the replay, though they did live).
- ``origin``, ``tenant``, ``latency_class``, ``ttft_objective_ms``, ``deadline_ms``: optional
  (default: the gateway's region, ``default``, ``interactive``, none, none).
- ``recorded``: optional; what happened when it was recorded (compared with the replays).

Readers refuse another ``format`` or a newer ``version`` by name; unknown keys are ignored, so
later versions may add fields. Importers from ``meridian bench``'s ``requests.csv`` and
Meridian's request log are in ``loadtests.sim.replay_import``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from loadtests.sim.trace import Trace, TraceRequest
from loadtests.sim.trace_chains import ChainReader, ChainWriter
from routing.prefix import DEFAULT_BLOCK_TOKENS
from routing.types import LatencyClass

FORMAT = "meridian-trace"
VERSION = 2  # 2: chains may refer back to an earlier line's (trace_chains.py)
FIRST_ARRIVAL_S = 0.001


class TraceFormatError(ValueError):
    """A trace file that cannot be read; the message names the file and line."""


@dataclass(frozen=True, slots=True)
class Recorded:
    backend: str | None = None
    ttft_ms: float | None = None
    e2e_ms: float | None = None
    cached_tokens: int | None = None
    status: int | None = None


@dataclass(frozen=True, slots=True)
class TraceLine:
    t_s: float
    prompt_tokens: int
    output_tokens: int
    origin: str | None = None
    tenant: str = "default"
    prefix_hashes: tuple[int, ...] = ()
    latency_class: LatencyClass = LatencyClass.INTERACTIVE
    ttft_objective_ms: float | None = None
    deadline_ms: float | None = None
    recorded: Recorded | None = None
    engine_prefix_hashes: tuple[int, ...] = ()

    def as_json(self, chains: ChainWriter | None = None) -> dict[str, Any]:
        """The line as written; with ``chains`` (version 2), shared chain prefixes as
        back-references to earlier lines."""
        spell = chains.spell if chains is not None else _plain
        line: dict[str, Any] = {
            "t_s": round(self.t_s, 6),
            "origin": self.origin,
            "tenant": self.tenant,
            "prompt_tokens": self.prompt_tokens,
            "prefix_hashes": spell(self.prefix_hashes),
            "output_tokens": self.output_tokens,
            "latency_class": self.latency_class.value,
            "ttft_objective_ms": self.ttft_objective_ms,
            "deadline_ms": self.deadline_ms,
        }
        if self.engine_prefix_hashes:
            line["engine_prefix_hashes"] = spell(self.engine_prefix_hashes)
        if self.recorded is not None:
            r = self.recorded
            line["recorded"] = {
                "backend": r.backend, "ttft_ms": r.ttft_ms, "e2e_ms": r.e2e_ms,
                "cached_tokens": r.cached_tokens, "status": r.status,
            }  # fmt: skip
        return line


@dataclass(frozen=True, slots=True)
class TraceFile:
    lines: tuple[TraceLine, ...]  # by arrival
    block_tokens: int = DEFAULT_BLOCK_TOKENS
    source: str = ""


def _plain(chain: Sequence[int]) -> list[str]:
    return [f"{h:016x}" for h in chain]


def write_trace(path: Path, trace: TraceFile) -> None:
    """``trace`` as a version-2 file (lines in the order given)."""
    header = {"format": FORMAT, "version": VERSION, "block_tokens": trace.block_tokens}
    header["source"] = trace.source
    chains = ChainWriter()
    with path.open("wb") as out:
        out.write(orjson.dumps(header) + b"\n")
        for line in trace.lines:
            out.write(orjson.dumps(line.as_json(chains)) + b"\n")


def _number(raw: dict[str, Any], key: str, where: str, kind: type = float) -> Any:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TraceFormatError(f"{where}: '{key}' must be a number")
    return kind(value)


def _recorded(raw: Any, where: str) -> Recorded | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise TraceFormatError(f"{where}: 'recorded' must be an object")
    backend = raw.get("backend")
    return Recorded(
        backend if isinstance(backend, str) else None,
        _number(raw, "ttft_ms", where),
        _number(raw, "e2e_ms", where),
        _number(raw, "cached_tokens", where, int),
        _number(raw, "status", where, int),
    )


def parse_line(raw: Any, where: str, chains: ChainReader | None = None) -> TraceLine:
    """One request line; ``chains`` resolves back-references to earlier lines (read in file
    order)."""
    chains = chains or ChainReader()
    if not isinstance(raw, dict):
        raise TraceFormatError(f"{where}: a request line must be a JSON object")
    for key in ("t_s", "prompt_tokens", "output_tokens"):
        if raw.get(key) is None:
            raise TraceFormatError(f"{where}: '{key}' is required")
    chain = _chain(raw, "prefix_hashes", where, chains)
    try:
        latency = LatencyClass(raw.get("latency_class") or LatencyClass.INTERACTIVE.value)
    except ValueError:
        raise TraceFormatError(f"{where}: unknown 'latency_class'") from None
    origin, tenant = raw.get("origin"), raw.get("tenant")
    return TraceLine(
        t_s=_number(raw, "t_s", where),
        prompt_tokens=max(_number(raw, "prompt_tokens", where, int), 0),
        output_tokens=max(_number(raw, "output_tokens", where, int), 1),
        origin=origin if isinstance(origin, str) else None,
        tenant=tenant if isinstance(tenant, str) and tenant else "default",
        prefix_hashes=chain,
        latency_class=latency,
        ttft_objective_ms=_number(raw, "ttft_objective_ms", where),
        deadline_ms=_number(raw, "deadline_ms", where),
        recorded=_recorded(raw.get("recorded"), where),
        engine_prefix_hashes=_chain(raw, "engine_prefix_hashes", where, chains),
    )


def _chain(raw: dict[str, Any], key: str, where: str, chains: ChainReader) -> tuple[int, ...]:
    spelled = raw.get(key) or []
    if not isinstance(spelled, list):
        raise TraceFormatError(f"{where}: '{key}' must be hex strings")
    try:
        return chains.read(spelled, key, where)
    except ValueError as exc:
        raise TraceFormatError(str(exc)) from None


def read_trace(path: Path) -> TraceFile:
    try:
        rows = path.read_bytes().splitlines()
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot read: {exc.strerror}") from None
    if not rows:
        raise TraceFormatError(f"{path}: empty file")
    try:
        header = orjson.loads(rows[0])
    except orjson.JSONDecodeError:
        raise TraceFormatError(f"{path}:1: the header is not JSON") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise TraceFormatError(f"{path}:1: not a {FORMAT} file (header 'format')")
    version = header.get("version")
    if not isinstance(version, int) or version > VERSION or version < 1:
        raise TraceFormatError(f"{path}:1: version {version!r}; this reader knows 1..{VERSION}")
    lines = []
    chains = ChainReader()
    for number, row in enumerate(rows[1:], start=2):
        if not row.strip():
            continue
        try:
            raw = orjson.loads(row)
        except orjson.JSONDecodeError:
            raise TraceFormatError(f"{path}:{number}: not JSON") from None
        lines.append(parse_line(raw, f"{path}:{number}", chains))
    block = header.get("block_tokens", DEFAULT_BLOCK_TOKENS)
    return TraceFile(
        tuple(sorted(lines, key=lambda line: line.t_s)),
        block if isinstance(block, int) and block > 0 else DEFAULT_BLOCK_TOKENS,
        str(header.get("source", "")),
    )


class ReplayTrace(Trace):
    """A recorded trace as the simulation loop reads a ``Trace``: every request arriving at one
    gateway in ``gateway_region``, times from the first arrival. (``Trace.__init__`` draws a
    synthetic trace, so it is not called; every attribute the loop and summaries read is set.)"""

    def __init__(self, trace: TraceFile, regions: Sequence[str], gateway_region: str) -> None:
        self.file = trace
        self.block_tokens = trace.block_tokens
        self.regions: tuple[str, ...] = tuple(regions)
        self.gateways: tuple[str, ...] = (gateway_region,)
        self.background = ()
        # The first arrival comes just after the replay starts, once the gateway has taken its
        # first fleet snapshot (the recording gateway was running before the trace began).
        start = (trace.lines[0].t_s if trace.lines else 0.0) - FIRST_ARRIVAL_S
        self.arrivals = np.asarray([line.t_s - start for line in trace.lines], np.float64)
        home = self.regions.index(gateway_region)
        self.origins = np.asarray(
            [self._origin_index(line.origin, home) for line in trace.lines], np.int16
        )

        self.populations = np.zeros(len(trace.lines), np.int16)

    def _origin_index(self, origin: str | None, home: int) -> int:
        return self.regions.index(origin) if origin in self.regions else home

    def __len__(self) -> int:
        return len(self.file.lines)

    @property
    def span_s(self) -> float:
        return float(self.arrivals[-1]) if len(self.arrivals) else 0.0

    def requests(self) -> Iterator[TraceRequest]:
        for i, (line, at, origin) in enumerate(
            zip(self.file.lines, self.arrivals.tolist(), self.origins.tolist(), strict=True)
        ):
            yield TraceRequest(
                i, at, self.regions[origin], 0, "replay", line.tenant, line.prompt_tokens,
                line.prefix_hashes, (), line.output_tokens, line.latency_class,
                line.ttft_objective_ms, line.deadline_ms, line.engine_prefix_hashes,
            )  # fmt: skip
