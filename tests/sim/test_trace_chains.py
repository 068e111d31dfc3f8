"""Version 2 of the trace format writes a shared chain prefix once (loadtests/sim/trace_chains.py)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from loadtests.sim.replay_trace import (
    TraceFile,
    TraceFormatError,
    TraceLine,
    read_trace,
    write_trace,
)

SYSTEM = (11, 12, 13, 14)  # a chain: each hash stands for every block before it too


def _lines() -> tuple[TraceLine, ...]:
    return (
        TraceLine(0.1, 80, 5, prefix_hashes=(*SYSTEM, 21), engine_prefix_hashes=(31, 32)),
        TraceLine(0.2, 80, 5, prefix_hashes=(*SYSTEM, 22, 23), engine_prefix_hashes=(31, 33)),
        TraceLine(0.3, 80, 5, prefix_hashes=SYSTEM[:2]),  # a shorter prefix of the same chain
        TraceLine(0.4, 80, 5, prefix_hashes=(41, 42)),  # nothing shared
        TraceLine(0.5, 80, 5),
    )


def test_a_shared_prefix_is_written_once_and_read_back_whole(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    write_trace(path, TraceFile(_lines(), source="test"))
    assert read_trace(path).lines == _lines()
    rows = [orjson.loads(row) for row in path.read_bytes().splitlines()]
    assert rows[0]["version"] == 2
    assert rows[2]["prefix_hashes"] == [f"^{14:016x}", f"{22:016x}", f"{23:016x}"]
    assert rows[2]["engine_prefix_hashes"] == [f"^{31:016x}", f"{33:016x}"]
    assert rows[3]["prefix_hashes"] == [f"^{12:016x}"]
    assert rows[4]["prefix_hashes"] == [f"{41:016x}", f"{42:016x}"]


def test_a_version_1_file_without_references_still_reads(tmp_path: Path) -> None:
    path = tmp_path / "v1.jsonl"
    line = {"t_s": 1, "prompt_tokens": 9, "output_tokens": 2, "prefix_hashes": ["0b", "0c"]}
    header = {"format": "meridian-trace", "version": 1}
    path.write_bytes(orjson.dumps(header) + b"\n" + orjson.dumps(line) + b"\n")
    assert read_trace(path).lines[0].prefix_hashes == (11, 12)


@pytest.mark.parametrize(
    "chain", [[f"^{99:016x}"], [f"{11:016x}", f"^{11:016x}"], [f"^{'zz'}"], "0b"]
)
def test_a_reference_to_nothing_earlier_names_the_file_and_line(
    tmp_path: Path, chain: object
) -> None:
    path = tmp_path / "bad.jsonl"
    first = {"t_s": 0, "prompt_tokens": 9, "output_tokens": 2, "prefix_hashes": ["0b"]}
    bad = {"t_s": 1, "prompt_tokens": 9, "output_tokens": 2, "prefix_hashes": chain}
    header = {"format": "meridian-trace", "version": 2}
    path.write_bytes(b"\n".join(orjson.dumps(x) for x in (header, first, bad)) + b"\n")
    with pytest.raises(TraceFormatError, match=rf"{path}:3: 'prefix_hashes'"):
        read_trace(path)
