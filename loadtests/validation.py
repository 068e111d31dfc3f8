"""Validation errors of the YAML files under loadtests/ (fleets, scenarios), said the way an
operator wrote the file: ``fleet.yaml: backends[1] (eu-1).engine.max_num_seqs: ...``."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from pydantic import ValidationError


def key_path(loc: tuple[int | str, ...], raw: Any) -> str:
    """Where an error is, with list items named by their ``name`` key when they have one."""
    parts: list[str] = []
    node = raw
    for item in loc:
        if isinstance(item, int):
            child = node[item] if isinstance(node, list) and item < len(node) else None
            name = child.get("name") if isinstance(child, Mapping) else None
            parts.append(f"[{item}]" + (f" ({name})" if isinstance(name, str) else ""))
            node = child
        else:
            parts.append(f".{item}" if parts else str(item))
            node = node.get(item) if isinstance(node, Mapping) else None
    return "".join(parts) or "(top level)"


def problems(exc: ValidationError, source: str, raw: Any, union_tags: Collection[str] = ()) -> str:
    """One line per error. ``union_tags``: discriminator names pydantic adds to locations,
    which the operator never wrote."""
    lines = []
    for error in exc.errors():
        loc = tuple(p for p in error["loc"] if p not in union_tags)
        message = str(error["msg"]).removeprefix("Value error, ")
        # Whole-file checks already name their key at the start of the message.
        lines.append(
            f"{source}: {key_path(loc, raw)}: {message}" if loc else f"{source}: {message}"
        )
    return "\n".join(lines)
