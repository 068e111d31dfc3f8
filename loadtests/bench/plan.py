"""From a workload and a seed to concrete sessions and arrival times, with no I/O.

Session ``i`` is derived from ``(seed, i)`` alone, so the same workload sends the same prompts
in the same order whatever the timing, the mode or the server. A single-turn request is a
session of one turn. Later turns of a session resend the history including the replies the
server actually returned (as a chat client does), so a session's context grows turn by turn.
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from loadtests.bench.prompts import TextSource
from loadtests.bench.workload import (
    Component,
    IntRange,
    Population,
    SessionComponent,
    Tenant,
    Workload,
)

T = TypeVar("T")


@dataclass(frozen=True)
class TurnPlan:
    user_text: str
    max_tokens: int


@dataclass(frozen=True)
class SessionPlan:
    session: int
    component: str
    api: str
    model: str
    system_text: str | None
    turns: tuple[TurnPlan, ...]
    think_time_s: float
    origin: str
    address: str | None
    tenant: str
    extra_body: dict[str, Any] = field(default_factory=dict)


class _Weighted(Generic[T]):
    """Picks among items by weight with one uniform draw (deterministic given the rng)."""

    def __init__(self, items: Sequence[T], weights: Sequence[float]) -> None:
        self._items = list(items)
        self._cumulative = list(itertools.accumulate(weights))

    def pick(self, rng: random.Random) -> T:
        point = rng.random() * self._cumulative[-1]
        index = bisect.bisect_right(self._cumulative, point)
        return self._items[min(index, len(self._items) - 1)]


def _draw(rng: random.Random, spec: IntRange) -> int:
    return spec.min if spec.min == spec.max else rng.randint(spec.min, spec.max)


def component_name(component: Component, position: int) -> str:
    return component.name or f"{component.kind}{position}"


class Planner:
    def __init__(self, workload: Workload) -> None:
        self._workload = workload
        self._text = TextSource(workload.seed)
        named = [(component_name(c, i), c) for i, c in enumerate(workload.mix)]
        self._components = _Weighted(named, [c.weight for c in workload.mix])
        self._populations = _Weighted(
            workload.populations, [p.weight for p in workload.populations]
        )
        self._system_cache: dict[tuple[str, int], str] = {}

    def session(self, index: int) -> SessionPlan:
        seed = self._workload.seed
        rng = random.Random(f"session:{seed}:{index}")
        name, component = self._components.pick(rng)
        population = self._populations.pick(rng)
        tenant = self._tenant(rng, population)
        address = rng.choice(population.addresses) if population.addresses else None
        system_text = None
        if component.system_prompt is not None:
            group = rng.randrange(component.system_prompt.groups)
            system_text = self._system_text(name, group, component.system_prompt.tokens)
        turn_count = _draw(rng, component.turns) if isinstance(component, SessionComponent) else 1
        turns = tuple(
            TurnPlan(
                self._text.text(rng, _draw(rng, component.user_tokens), f"s{index}t{turn}"),
                _draw(rng, component.max_tokens),
            )
            for turn in range(turn_count)
        )
        return SessionPlan(
            session=index,
            component=name,
            api=component.api,
            model=component.model or self._workload.model,
            system_text=system_text,
            turns=turns,
            think_time_s=getattr(component, "think_time_s", 0.0),
            origin=population.origin,
            address=address,
            tenant=tenant,
            extra_body=dict(component.extra_body),
        )

    def _tenant(self, rng: random.Random, population: Population) -> str:
        tenants: list[Tenant] = population.tenants or self._workload.tenants
        if len(tenants) == 1:
            return tenants[0].name
        return _Weighted([t.name for t in tenants], [t.weight for t in tenants]).pick(rng)

    def _system_text(self, component: str, group: int, tokens: int) -> str:
        key = (component, group)
        if key not in self._system_cache:
            rng = random.Random(f"system:{self._workload.seed}:{component}:{group}")
            self._system_cache[key] = self._text.text(rng, tokens, f"system {component}-{group}")
        return self._system_cache[key]


def poisson_arrivals(rate: float, seed: int) -> Iterator[float]:
    """Offsets in seconds of a Poisson process at ``rate`` per second (exponential gaps)."""
    rng = random.Random(f"arrivals:{seed}")
    now = 0.0
    while True:
        now += rng.expovariate(rate)
        yield now


def chat_messages(plan: SessionPlan, turn: int, replies: Sequence[str]) -> list[dict[str, str]]:
    """The conversation as sent for ``turn``: system, then each earlier exchange, then the ask."""
    messages: list[dict[str, str]] = []
    if plan.system_text is not None:
        messages.append({"role": "system", "content": plan.system_text})
    for earlier, reply in zip(plan.turns[:turn], replies, strict=True):
        messages.append({"role": "user", "content": earlier.user_text})
        messages.append({"role": "assistant", "content": reply})
    messages.append({"role": "user", "content": plan.turns[turn].user_text})
    return messages


def request_body(
    plan: SessionPlan, turn: int, replies: Sequence[str], user_field: bool
) -> dict[str, Any]:
    """The OpenAI request body, streamed, asking for usage in the final chunk."""
    body: dict[str, Any] = dict(plan.extra_body)
    messages = chat_messages(plan, turn, replies)
    if plan.api == "chat":
        body["messages"] = messages
    else:
        body["prompt"] = "\n".join(f"{m['role']}: {m['content']}" for m in messages)
    body.update(
        model=plan.model,
        max_tokens=plan.turns[turn].max_tokens,
        stream=True,
        stream_options={"include_usage": True},
    )
    if user_field:
        body["user"] = plan.tenant
    return body
