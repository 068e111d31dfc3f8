"""Which gateways see an engine's step end, and when (``routing.step_clock``'s feed).

Every running sequence gets a token each step, so a gateway with an answer streaming from an
engine sees each of its steps end, a one-way trip later; a gateway with none there sees
nothing. The simulator decodes without per-token events, so at each step end of an engine it
hands the step's end (as each such gateway will see it) to that gateway's router's clock.
That is ~7 ticks a request, so each backend keeps the gateways streaming from it now, each
with its clock's feed for that backend and the path's one-way time: a step end walks those
alone, with no lookup (the one-way times are read again when a path changes, ``repath``).
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
        self._streams = [[0] * len(clocks) for _ in names]  # answers streaming, per gateway
        # Per backend, the gateways (with a clock) streaming from it: their feed, one-way time.
        self._live: list[dict[int, tuple[Callable[[float], None], float]]] = [{} for _ in names]
        self._handed = [float("-inf")] * len(names)  # the step end last handed in

    def ended(self, backend: int, end: float) -> None:
        """``backend``'s latest step ended at ``end``: every gateway streaming from it sees
        that (call before the step's own first tokens and ends are counted)."""
        if end <= self._handed[backend]:
            return
        self._handed[backend] = end
        for feed, one_way in self._live[backend].values():
            feed(end + one_way)

    def streaming(self, gateway: int, backend: int, more: int) -> None:
        """An answer from ``backend`` to ``gateway`` began (+1) or ended (-1)."""
        streams = self._streams[backend]
        streams[gateway] += more
        clock = self._clocks[gateway]
        live = self._live[backend]
        if not streams[gateway]:
            live.pop(gateway, None)
        elif clock is not None and gateway not in live:
            feed = clock.feed(self._names[backend])
            live[gateway] = (feed, self._one_way_s(gateway, backend))

    def repath(self, backend: int) -> None:
        """``backend``'s paths changed (a ``path_delay`` event): read its one-way times again."""
        live = self._live[backend]
        for gateway, (feed, _) in live.items():
            live[gateway] = (feed, self._one_way_s(gateway, backend))
