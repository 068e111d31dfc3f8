"""The gateway's real router, wrapped for a test: every input it receives written down
(:class:`RecordingRouter`) or one decision made to fail (a subclass overriding ``decide``), and
:func:`wrap_router`, the ``prepare`` hook of ``start_gateway`` that puts the wrapper in place."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from aiohttp import web

from gateway.relay_state import build_state
from gateway.state_keys import RELAY
from routing.types import (
    Decision,
    FirstToken,
    FirstTokenObserver,
    FleetSnapshot,
    Observation,
    PolicyRouter,
    RequestProfile,
)

W = TypeVar("W", bound="DelegatingRouter")


class DelegatingRouter:
    """The real router behind every method; a test overrides the one it watches or breaks."""

    def __init__(self, inner: PolicyRouter) -> None:
        self.inner = inner
        self.name = inner.name

    def decide(self, profile: RequestProfile, fleet: FleetSnapshot, now: float) -> Decision:
        return self.inner.decide(profile, fleet, now)

    def explain(self, profile: RequestProfile, fleet: FleetSnapshot, now: float) -> Decision:
        return self.inner.explain(profile, fleet, now)

    def observe(self, observation: Observation) -> None:
        self.inner.observe(observation)

    def observe_first_token(self, first: FirstToken) -> None:
        if isinstance(self.inner, FirstTokenObserver):
            self.inner.observe_first_token(first)

    def reserve(self, backend: str, now: float) -> None:
        self.inner.reserve(backend, now)

    def release(self, backend: str) -> None:
        self.inner.release(backend)


class RecordingRouter(DelegatingRouter):
    """The real router, with every learning input it receives written down."""

    def __init__(self, inner: PolicyRouter) -> None:
        super().__init__(inner)
        self.observed: list[Observation] = []
        self.first_tokens: list[str] = []

    def observe(self, observation: Observation) -> None:
        self.observed.append(observation)
        super().observe(observation)

    def observe_first_token(self, first: FirstToken) -> None:
        self.first_tokens.append(first.backend)
        super().observe_first_token(first)


def wrap_router(
    wrap: Callable[[PolicyRouter], W], wrapped: list[W]
) -> Callable[[web.Application], None]:
    """A ``prepare`` hook for ``start_gateway``: the relay's router becomes ``wrap(router)``
    (a new relay state on the same fleet), appended to ``wrapped`` for the test to read."""

    def prepare(app: web.Application) -> None:
        relay = app[RELAY]
        router = wrap(relay.router)
        relay.swap(build_state(relay.config, router=router, previous=relay.state))
        wrapped.append(router)

    return prepare
