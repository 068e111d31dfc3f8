"""What every benchmark in loadtests/ does at the end: write its JSON next to the others, and
format table cells the same way."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson


def write_results(out_dir: str | Path, stem: str, payload: Any) -> Path:
    """``<out_dir>/<stem>-<timestamp>.json``, indented; prints and returns the path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_bytes(orjson.dumps(payload, option=orjson.OPT_INDENT_2))
    print(f"wrote {path}")
    return path


def fmt(value: float | None, digits: int = 2) -> str:
    """A table cell: ``-`` for a missing value."""
    return "-" if value is None else f"{value:.{digits}f}"
