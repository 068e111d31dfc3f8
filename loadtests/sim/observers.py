"""Which of the simulation's routers learn at the first token, asked once per router.

A runtime Protocol's ``isinstance`` walks its attributes: it was 0.9% of a run when it was
asked per first token. A router swapped into the list later is asked again.
"""

from __future__ import annotations

from routing.types import FirstTokenObserver, Router


class FirstTokenObservers:
    def __init__(self, routers: list[Router]) -> None:
        self._routers = routers  # the simulation's own list: a swapped-in router is seen here
        self._known: list[tuple[Router, FirstTokenObserver | None] | None] = [None] * len(routers)

    def of(self, gateway: int) -> FirstTokenObserver | None:
        router = self._routers[gateway]
        known = self._known[gateway]
        if known is None or known[0] is not router:
            observer = router if isinstance(router, FirstTokenObserver) else None
            known = self._known[gateway] = (router, observer)
        return known[1]
