"""Which gateways see an engine's step end, and when (``routing.step_clock``'s feed).

Every running sequence gets a token each step, so a gateway with an answer streaming from an
engine sees each of its steps end, a one-way trip later; a gateway with none there sees
nothing. The simulator decodes without per-token events, so at each step end of an engine it
hands the step's end (as each such gateway will see it) to that gateway's router's clock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from routing.step_clock import StepClock


class StepTicks:
    def __init__(
        self,
        clocks: Sequence[StepClock | None],
        names: Sequence[str],
        one_way_s: Callable[[int, int], float],
    ) -> None:
        self._clocks = list(clocks)
        self.active = any(clock is not None for clock in clocks)
        self._names = list(names)
        self._one_way_s = one_way_s  # (gateway, backend) -> the path's one-way time now
        self._streams = [[0] * len(names) for _ in clocks]  # answers streaming, per backend
        self._handed = [float("-inf")] * len(names)  # the step end last handed in

    def ended(self, backend: int, end: float) -> None:
        """``backend``'s latest step ended at ``end``: every gateway streaming from it sees
        that (call before the step's own first tokens and ends are counted)."""
        if end <= self._handed[backend]:
            return
        self._handed[backend] = end
        name = self._names[backend]
        for gateway, clock in enumerate(self._clocks):
            if clock is not None and self._streams[gateway][backend]:
                clock.seen(name, end + self._one_way_s(gateway, backend))

    def streaming(self, gateway: int, backend: int, more: int) -> None:
        """An answer from ``backend`` to ``gateway`` began (+1) or ended (-1)."""
        self._streams[gateway][backend] += more
