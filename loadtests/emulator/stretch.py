"""Decode-only stretches: a run of identical engine steps kept as one count (the simulator's
hot loop).

When every running sequence decodes in a step, with no prefill chunk and no admission, the
next step is the same step again (same batch, same duration) until something changes: a
sequence finishes, a pending one becomes eligible, one is cancelled, or the engine's params are
swapped. The simulator's engine (no per-token events) then skips the per-sequence work of
those steps: the tokens each sequence got are counted once per step for the whole batch and
written to the sequences only when someone reads them (:meth:`Stretch.settle`) or the stretch
ends. Step boundaries, events and every query answer stay exactly those of step-by-step
decoding (``tests/sim/test_engine_equivalence.py`` drives both). Sequences with a slow drip
or an injected death never enter one (their steps are not all alike).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from loadtests.emulator.config import EngineParams

if TYPE_CHECKING:  # the engine's own sequence record; imported for types only (no cycle)
    from loadtests.emulator.engine import _Sequence


@dataclass(slots=True)
class Stretch:
    params: EngineParams  # the params its steps were timed with: a swap ends it
    decode: tuple[int, ...]  # every running sequence, in admission order
    duration: float  # of each step (params and batch fixed)
    room: int  # steps left before the first sequence's last token (that step runs normally)
    steps: int = 0  # steps finished and not yet written to the sequences

    @classmethod
    def after(
        cls,
        params: EngineParams,
        running: Mapping[int, _Sequence],
        decode: list[int],
        duration: float,
    ) -> Stretch | None:
        """A stretch starting with the step just begun (``decode``, nothing prefilled nor
        admitted), or None when its steps would not all be alike: a sequence still
        prefilling or throttled, or one that finishes within two steps."""
        if len(decode) != len(running):
            return None
        room = min(seq.request.max_tokens - seq.generated for seq in running.values())
        if room < 2:
            return None
        return cls(params, tuple(decode), duration, room)

    def may_continue(self, params: EngineParams, next_eligible: float, start: float) -> bool:
        """Whether the step beginning at ``start`` is one more of the same: nobody finishes in
        it, the params are those the stretch was timed with and no pending sequence is
        released (``next_eligible``: the earliest pending one's time, inf if none)."""
        return self.steps + 1 < self.room and params is self.params and next_eligible > start

    def settle(self, running: Mapping[int, _Sequence]) -> None:
        """Write the tokens of the finished steps to the sequences (each got one a step).
        Their ``not_before`` stays the end of an earlier step: with no drip that is all a step
        end sets it to, and no later step starts before it."""
        steps = self.steps
        if not steps:
            return
        for seq in running.values():
            seq.generated += steps
        self.room -= steps
        self.steps = 0
