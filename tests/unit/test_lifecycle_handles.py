"""The lifecycle table drives a request's handle: after any sequence of events the real
counters (the relay state's active count, drain membership, admission slots) are exactly what
the request's state holds per the table, and the handle releases nothing the table did not."""

from __future__ import annotations

import asyncio
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.admission import Admission
from gateway.config import parse_config
from gateway.drain import DrainState
from gateway.lifecycle.handles import hold_request
from gateway.lifecycle.states import TERMINAL, Event, Resource, State
from gateway.relay_state import RelayState, build_state

_CONFIG = parse_config(
    {
        "backends": [{"name": "b", "region": "r", "url": "http://127.0.0.1:9/v1", "models": ["m"]}],
        "admission": {"models": {"m": {"max_concurrent": 1, "max_queue": 0}}},
    },
    "<handles-test>",
)


def _counts(state: RelayState, drain: DrainState, admission: Admission) -> set[Resource]:
    """What the real counters say the request holds."""
    held = set()
    if state.active:
        held.add(Resource.ACTIVE)
    if drain.in_flight:
        held.add(Resource.DRAIN_MEMBERSHIP)
    if admission.held():
        held.add(Resource.ADMISSION_TICKET)
    return held


_COUNTED = {Resource.ACTIVE, Resource.DRAIN_MEMBERSHIP, Resource.ADMISSION_TICKET}


async def _drive(events: list[Event]) -> None:
    state = build_state(_CONFIG)
    drain, admission = DrainState(), state.admission
    hold = hold_request(state, drain, asyncio.timeout_at(None), "rid")
    for event in events:
        if event is Event.ADMITTED and hold.lifecycle.state is State.ACCEPTED:
            await hold.admit(admission, "m", "t")  # the one way a ticket is taken
        else:
            hold.on(event)
        # The handle holds what the table says, and the counters agree with both.
        assert hold.holding == set(hold.lifecycle.holds)
        assert _counts(state, drain, admission) == hold.holding & _COUNTED
    hold.end()
    hold.end()  # once
    assert (state.active, drain.in_flight, admission.held()) == (0, 0, 0)
    await state.pool.close()


@settings(max_examples=60)
@given(st.lists(st.sampled_from(Event), max_size=16))
def test_the_table_drives_every_release(events: list[Event]) -> None:
    asyncio.run(_drive(events))


def test_a_request_ended_outside_the_table_is_released_anyway_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The backstop: an admitted request ended without a terminal event (an event its state
    refused) still gives everything back, and logs what the table left held."""
    caplog.set_level(logging.ERROR, logger="meridian.lifecycle")
    asyncio.run(_drive([Event.ADMITTED]))
    [record] = [r for r in caplog.records if r.name == "meridian.lifecycle"]
    assert "still holding" in record.getMessage() and "admission_ticket" in record.getMessage()


def test_a_terminal_event_releases_everything_before_end() -> None:
    async def run() -> None:
        state = build_state(_CONFIG)
        drain = DrainState()
        hold = hold_request(state, drain, asyncio.timeout_at(None), "rid")
        await hold.admit(state.admission, "m", "t")
        hold.on(Event.NO_BACKEND)
        assert hold.lifecycle.state in TERMINAL
        assert (state.active, drain.in_flight, state.admission.held()) == (0, 0, 0)
        await state.pool.close()

    asyncio.run(run())
