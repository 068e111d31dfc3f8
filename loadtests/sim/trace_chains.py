"""How a ``meridian-trace`` file spells a prefix-hash chain (``loadtests/sim/replay_trace.py``).

Version 1 writes every hash of every chain: a request whose 1024-token system prompt is
shared with a hundred others repeats its 64 hashes a hundred times. Version 2 writes a chain's
shared part as one back-reference: a first element ``"^<hex>"`` stands for the chain of an
earlier line (in file order, either chain field) up to and including that hash, and the hex
hashes after it continue it. A block hash covers every block before it (``routing.prefix``), so
one hash names its whole prefix. Version 1 files have no references and read as before.
"""

from __future__ import annotations

from collections.abc import Sequence

REF = "^"


class ChainWriter:
    """Spells chains in file order, each as the longest earlier prefix it shares plus the rest."""

    def __init__(self) -> None:
        self._seen: set[int] = set()

    def spell(self, chain: Sequence[int]) -> list[str]:
        shared = next((i for i in range(len(chain) - 1, -1, -1) if chain[i] in self._seen), -1)
        self._seen.update(chain)
        rest = [f"{h:016x}" for h in chain[shared + 1 :]]
        return ([f"{REF}{chain[shared]:016x}"] if shared >= 0 else []) + rest


class ChainReader:
    """Reads chains in file order; a reference must name a hash of an earlier line's chain."""

    def __init__(self) -> None:
        self._seen: dict[int, tuple[tuple[int, ...], int]] = {}  # hash -> (chain, its index)

    def read(self, spelled: Sequence[object], key: str, where: str) -> tuple[int, ...]:
        """The chain ``spelled`` stands for; ``ValueError`` naming ``where`` and ``key``."""
        hashes: list[int] = []
        for position, item in enumerate(spelled):
            if not isinstance(item, str):
                raise ValueError(f"{where}: '{key}' must be hex strings")
            if item.startswith(REF):
                found = self._seen.get(_hex(item[1:], key, where)) if position == 0 else None
                if found is None:
                    raise ValueError(
                        f"{where}: '{key}' refers to a hash no earlier line holds "
                        "(a reference comes first and names an earlier chain's hash)"
                    )
                chain, index = found
                hashes.extend(chain[: index + 1])
            else:
                hashes.append(_hex(item, key, where))
        chain = tuple(hashes)
        for index, h in enumerate(chain):
            self._seen.setdefault(h, (chain, index))
        return chain


def _hex(text: str, key: str, where: str) -> int:
    try:
        return int(text, 16)
    except ValueError:
        raise ValueError(f"{where}: '{key}' must be hex strings") from None
