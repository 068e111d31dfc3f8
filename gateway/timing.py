"""Per-hop timing: the W3C ``Server-Timing`` header and the end-of-stream summary.

Each hop writes its own entries (``gw``, ``route``, ``upstream_connect``, ``upstream_ttfb``,
``ttft``) and keeps whatever the next hop sent, renamed ``<backend>.<name>`` so a chain of
gateways reads as one header: ``gw;dur=0.4, ..., eu-gw.gw;dur=0.3, eu-gw.eu-1.queue;dur=30``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.token_events import choice_index

_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")


@dataclass(frozen=True, slots=True)
class TimingEntry:
    name: str
    dur_ms: float | None = None
    desc: str | None = None

    def render(self) -> str:
        return render((self,))


def render(entries: Iterable[TimingEntry]) -> str:
    # One comprehension and no call per entry: the header is built between the first token in
    # and the first byte out, where each Python call costs a few us on a cold core.
    return ", ".join(
        [
            e.name
            + ("" if e.dur_ms is None else f";dur={e.dur_ms:.3f}".rstrip("0").rstrip("."))
            + (
                ""
                if e.desc is None
                else ';desc="' + e.desc.replace("\\", "\\\\").replace('"', '\\"') + '"'
            )
            for e in entries
        ]
    )


def _split_outside_quotes(text: str, sep: str) -> list[str]:
    if '"' not in text:  # no quoted string, so no separator to skip: an engine's usual header
        return text.split(sep)
    return _split_walking(text, sep)


def _split_walking(text: str, sep: str) -> list[str]:
    """Split at every ``sep`` outside a quoted string, a character at a time."""
    parts: list[str] = []
    current: list[str] = []
    quoted = escaped = False
    for ch in text:
        if escaped:
            escaped = False
        elif ch == "\\" and quoted:
            escaped = True
        elif ch == '"':
            quoted = not quoted
        elif ch == sep and not quoted:
            parts.append("".join(current))
            current = []
            continue
        current.append(ch)
    parts.append("".join(current))
    return parts


def parse(header: str) -> list[TimingEntry]:
    """Parse a Server-Timing header leniently: malformed entries are skipped, never fatal."""
    entries: list[TimingEntry] = []
    for item in _split_outside_quotes(header, ","):
        params = [p.strip() for p in _split_outside_quotes(item, ";")]
        name = params[0] if params else ""
        if not _TOKEN.match(name):
            continue
        dur: float | None = None
        desc: str | None = None
        for param in params[1:]:
            key, _, value = param.partition("=")
            key = key.strip().lower()
            value = value.strip()
            if key == "dur":
                try:
                    dur = float(value)
                except ValueError:
                    continue
            elif key == "desc":
                if len(value) >= 2 and value[0] == value[-1] == '"':
                    value = value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
                desc = value
        entries.append(TimingEntry(name, dur, desc))
    return entries


def insert_after(entries: list[TimingEntry], name: str, entry: TimingEntry) -> None:
    """Put ``entry`` right after the entry called ``name`` (at the end when there is none):
    entries are placed by name, never by position."""
    for index, existing in enumerate(entries):
        if existing.name == name:
            entries.insert(index + 1, entry)
            return
    entries.append(entry)


def hop_prefix(hop: str) -> str:
    """The name a next hop's entries are filed under (``<prefix>.<entry>``): the backend's own
    name when it is a header token."""
    return hop if _TOKEN.match(hop) else re.sub(r"[^A-Za-z0-9._-]", "_", hop)


def label_hop(entries: Sequence[TimingEntry], hop: str) -> list[TimingEntry]:
    if not entries:
        return []
    prefix = hop_prefix(hop)
    return [TimingEntry(f"{prefix}.{e.name}", e.dur_ms, e.desc) for e in entries]


@dataclass(slots=True)
class StreamStats:
    """What a relayed stream looked like from the gateway, for the end-of-stream summary."""

    started_at: float
    first_token_at: float | None = None
    last_token_at: float | None = None
    gaps_ms: list[float] = field(default_factory=list)
    output_events: int = 0
    # A request for ``n`` > 1 choices: each choice's last token time. An engine decodes the
    # choices side by side, so one step sends a token of each at once; a gap is between two
    # tokens of one choice, or the stream's ITL would be mostly ~0 ms gaps (and routing would
    # learn a decode n times faster than the backend's). None: one choice (the usual stream).
    choice_last_at: dict[int, float] | None = None

    @classmethod
    def for_choices(cls, started_at: float, choices: int) -> StreamStats:
        return cls(started_at, choice_last_at={} if choices > 1 else None)

    def on_token_event(
        self, now: float, counted: bool = True, chunk: Mapping[str, Any] | None = None
    ) -> None:
        """An event that ends the wait for the first token; ``counted`` when it carries one (a
        finish-only chunk starts the stream but is neither a token nor an ITL gap). ``chunk``:
        the event's parsed object, whose choice index ``choice_last_at`` is kept by."""
        if self.first_token_at is None:
            self.first_token_at = now
        if not counted:
            return
        by_choice = self.choice_last_at
        if by_choice is None:
            last = self.last_token_at
        else:
            choice = choice_index(chunk)
            last = by_choice.get(choice)
            by_choice[choice] = now
        if last is not None:
            self.gaps_ms.append((now - last) * 1000.0)
        self.last_token_at = now
        self.output_events += 1

    def itl_percentiles(self) -> tuple[float | None, float | None, float | None]:
        if not self.gaps_ms:
            return None, None, None
        ordered = sorted(self.gaps_ms)
        return _nearest_rank(ordered, 50), _nearest_rank(ordered, 99), ordered[-1]


def _nearest_rank(ordered: Sequence[float], pct: float) -> float:
    rank = max(1, -(-len(ordered) * pct // 100))
    return ordered[int(rank) - 1]
