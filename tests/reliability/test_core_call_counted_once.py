"""The seam object both doors stand on (gateway/lifecycle/call.py::CoreCall) counts every
request once in ``meridian_requests_total``, whichever way it ends before the door renders it:
left as its open finished, refused, or cancelled before its first token; and every counter
goes back to zero (the rig of test_counters_return_to_zero)."""

from __future__ import annotations

import json
import time

import grpc
import pytest

from gateway.errors import ApiError
from gateway.grpc.client import inference_stub
from gateway.grpc.mount import GRPC_SERVER
from gateway.inbound import Endpoint
from gateway.lifecycle.call import CoreCall
from gateway.lifecycle.core import Arrival
from tests.grpc.grpc_support import chat
from tests.reliability.zero_rig import (
    Rig,
    body_for,
    http_wait,
    no_invalid_transition,
    requests_counted,
    rig_fixture,  # noqa: F401 (the ``rig`` fixture)
)
from tests.servers import arrivals, leave_once_admitted, settle


async def test_a_call_left_as_its_open_finished_is_released_and_counted_once(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """The HTTP door's keepalive open: the client leaves in the instant the open finished, so
    the door never renders the call. Its ``finally: call.close()`` ends it like every other
    request (it used to call ``Relay.finish`` itself, and ``meridian_requests_total`` never
    counted it): released, not learned from, counted once as cancelled."""
    body = json.dumps(body_for("slow", tokens=500)).encode()
    arrival = Arrival("http", Endpoint.CHAT, body, "left-at-open", "default", time.perf_counter())
    call = CoreCall(rig.relay, arrival)
    before = requests_counted(rig, "m-slow", "cancelled")
    await call.open()
    assert call.started and rig.counters()["active"] == 1
    assert requests_counted(rig, "m-slow", "cancelled") == before  # not counted while it is open
    call.close()
    call.close()  # once, however often the door's paths close it
    assert requests_counted(rig, "m-slow", "cancelled") == before + 1
    await rig.back_to_zero()
    no_invalid_transition(caplog)


async def test_a_refused_call_is_counted_once_and_closes_to_nothing(rig: Rig) -> None:
    body = json.dumps(body_for("refused")).encode()
    call = CoreCall(
        rig.relay, Arrival("http", Endpoint.CHAT, body, "r", "default", time.perf_counter())
    )
    before = requests_counted(rig, "m-refused", "503")
    with pytest.raises(ApiError) as refused:
        await call.open()
    assert refused.value.status == 503 and not call.started
    call.close()  # nothing to end: the relay core released it all
    assert requests_counted(rig, "m-refused", "503") == before + 1
    await rig.back_to_zero()


async def test_a_client_that_leaves_before_its_first_token_is_counted_once_on_both_doors(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """Cancelled while awaiting the first token: released by the relay core, and counted once
    in meridian_requests_total as cancelled, the same on both doors (it was not counted)."""

    def cancelled(protocol: str) -> float:
        return requests_counted(rig, "m-stall", "cancelled", protocol)

    http, grpc_before = cancelled("http"), cancelled("grpc")
    url = rig.gateway.url
    await leave_once_admitted(rig.emulators["stall"], [http_wait(url, body_for("stall"))])
    await rig.back_to_zero()
    await settle(lambda: cancelled("http") == http + 1)
    target = rig.gateway.app[GRPC_SERVER].target
    async with grpc.aio.insecure_channel(target) as channel:
        arrived = arrivals(rig.emulators["stall"])  # the HTTP one may still be held there
        call = inference_stub(channel).ChatCompletion(chat(model="m-stall", max_tokens=4))
        await settle(lambda: arrived() == 1)
        call.cancel()
        await rig.back_to_zero()
    await settle(lambda: cancelled("grpc") == grpc_before + 1)
    assert cancelled("http") == http + 1  # once, not again
    no_invalid_transition(caplog)
