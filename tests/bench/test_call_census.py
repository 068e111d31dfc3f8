"""``loadtests.call_census`` on real processes: a gateway counted between its signals files
every streamed request's calls under the segments of its path, so the tool notices when the
functions that mark them (the lean door's read, the upstream ``send()``, the first write) are
renamed or moved."""

from __future__ import annotations

import json
from pathlib import Path

from loadtests.call_census import SEGMENTS, count_calls, summarize


async def test_every_request_is_counted_in_its_segments(tmp_path: Path) -> None:
    out = tmp_path / "census.json"
    await count_calls(8, None, out, warm_up=4)
    segments = summarize(json.loads(out.read_text()), 8, top=400)
    head, first, rest = (segments[name] for name in SEGMENTS.values())
    # The segments start and end where the gateway's own frames say: the lean door's read
    # opens the first, the first write to the client closes the second.
    assert any("lean_door/connection.py" in name for name, _ in head["top"])
    assert any("lean_door/sse.py" in name for name, _ in first["top"])
    assert any("routing/" in name for name, _ in head["top"])  # the decision is before the send
    # Each request's share is counted once per request, not once per run (8 requests).
    for segment in (head, first, rest):
        assert 20 < segment["python_calls_per_request"] < 5_000, segment
