"""Per-backend block indexes kept in last-seen order, so expiring and trimming them costs only
what is dropped (shared by the local view and the in-memory store; Redis does the same with
ZREMRANGEBYSCORE/ZREMRANGEBYRANK).

Order is insertion order of the dict: a block seen again moves to the end. Merging entries
from other replicas with older timestamps can leave the order slightly off; the index is
approximate by design (DESIGN.md section 4) and readers still check each block's age.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def merge_newer(
    into: dict[int, float],
    blocks: Mapping[int, float],
    accepted: dict[int, float] | None = None,
) -> None:
    """Merge ``hash -> seen_at`` entries, keeping the newest time per hash. Entries that were
    new or newer go into ``accepted`` too, when given."""
    for block, seen_at in blocks.items():
        old = into.get(block)
        if old is None:
            into[block] = seen_at
        elif seen_at > old:
            del into[block]
            into[block] = seen_at
        else:
            continue
        if accepted is not None:
            accepted[block] = seen_at


def touch(into: dict[int, float], blocks: Iterable[int], seen_at: float) -> None:
    for block in blocks:
        into.pop(block, None)
        into[block] = seen_at


def trim(blocks: dict[int, float], oldest_allowed: float, max_blocks: int) -> int:
    """Drop blocks from the old end while they are expired or over ``max_blocks``.
    Returns how many were dropped."""
    excess = len(blocks) - max_blocks
    doomed: list[int] = []
    for block, seen_at in blocks.items():
        if len(doomed) < excess or seen_at < oldest_allowed:
            doomed.append(block)
        else:
            break
    for block in doomed:
        del blocks[block]
    return len(doomed)
