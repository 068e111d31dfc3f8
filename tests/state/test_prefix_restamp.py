"""A prompt noted twice within a second (at the decision, then once served) is sent once; a
chain whose shorter prefix was just noted is still sent whole; a second later it is sent
again, so expiry moves by at most that second."""

from __future__ import annotations

from gateway.state.memory import MemoryStore
from gateway.state.sync import SharedStateSync
from tests.state.conftest import fast_config


class _Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


async def _sent(sync: SharedStateSync) -> int:
    """Blocks the next flush would push (then pushed, so the next count starts at 0)."""
    pending = sync.health().pending_blocks
    await sync.flush_now()
    return pending


async def test_a_chain_noted_again_within_the_restamp_window_is_not_resent() -> None:
    clock = _Clock()
    store = MemoryStore(wall=clock)
    sync = SharedStateSync(store, fast_config("memory"), replica_id="r1", wall=clock)
    await sync.flush_now()  # the first success reconciles (re-sends what the view holds)
    chain = [11, 12, 13]
    sync.note_prefix("a1", chain)
    assert await _sent(sync) == 3
    clock.now += 0.5
    sync.note_prefix("a1", chain)  # the same prompt, served: already known 0.5 s ago
    assert await _sent(sync) == 0
    sync.note_prefix("a1", [*chain, 14])  # a longer chain: its deepest block is new
    assert await _sent(sync) == 4
    sync.note_prefix("b1", chain)  # another backend holds nothing yet
    assert await _sent(sync) == 3
    clock.now += 1.0
    sync.note_prefix("a1", chain)  # a second later: stamped again, expiry moves on
    assert await _sent(sync) == 3
    assert sync.snapshot().stamped_at("a1", 13) == clock.now
    await sync.stop()
