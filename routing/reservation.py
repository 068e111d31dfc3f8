"""A router's in-flight count on one backend, as a value its caller holds.

``decide`` counts its first choice as in flight (anti-herding: the very next decision sees the
load this one adds) and ``reserve`` counts another candidate. Rather than remember which
backend it must later ``release`` or ``observe``, the caller gets a :class:`Reservation` from
:func:`decide` or :func:`reserve` and settles *that*, once: :meth:`Reservation.settle` with an
:class:`~routing.types.Observation` (learn from the outcome) or :meth:`Reservation.release`
(no outcome worth learning from). Both are idempotent and only the first call of either
counts, so a handle passed through several exit paths cannot release twice, and a caller that
holds the value cannot forget which backend it was for.
"""

from __future__ import annotations

from routing.types import Decision, FleetSnapshot, Observation, PolicyRouter, RequestProfile


class Reservation:
    """One open in-flight count on ``backend`` in ``router``; settled at most once."""

    __slots__ = ("_open", "_router", "backend")

    def __init__(self, router: PolicyRouter, backend: str) -> None:
        self._router = router
        self.backend = backend
        self._open = True

    @property
    def held(self) -> bool:
        """Whether the count is still open (neither settled nor released)."""
        return self._open

    def release(self) -> None:
        """Give the count back without an outcome (the request never reached the backend, or
        ended in a way that says nothing about it)."""
        if self._open:
            self._open = False
            self._router.release(self.backend)

    def settle(self, observation: Observation) -> None:
        """Give the count back with what happened (``observation.backend`` is this one's)."""
        if self._open:
            self._open = False
            self._router.observe(observation)


def decide(
    router: PolicyRouter, profile: RequestProfile, fleet: FleetSnapshot, now: float
) -> tuple[Decision, Reservation | None]:
    """``router.decide`` and the reservation it took for its first choice (None: no choice)."""
    decision = router.decide(profile, fleet, now)
    chosen = decision.chosen
    return decision, Reservation(router, chosen.backend) if chosen is not None else None


def reserve(router: PolicyRouter, backend: str, now: float) -> Reservation:
    """Count ``backend`` as in flight at ``now`` (a candidate after the first choice)."""
    router.reserve(backend, now)
    return Reservation(router, backend)
