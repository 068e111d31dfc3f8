"""Issue 16: the first-token bookkeeping (learning, TTFT and overhead metrics) waits until the
door's first write is out, and still runs exactly once when the request ends before the loop
gets to it.

``CoreCall.open`` returns as ``Relay.open`` does, without yielding to the loop, so the
scheduled bookkeeping is still pending right after it: that is the moment the door writes its
first bytes. ``close`` (``Relay.finish``) must then run it before it builds what routing learns
from the request, and the scheduled run finds nothing left to do.
"""

from __future__ import annotations

import asyncio
import json
import time

from gateway.inbound import Endpoint
from gateway.lifecycle.call import CoreCall
from gateway.lifecycle.core import Arrival
from gateway.state_keys import RELAY
from tests.gateway.support import MODEL, config_for
from tests.reliability.support import metric_value

OVERHEAD = "meridian_gateway_overhead_seconds_count"


def _arrival(request_id: str) -> Arrival:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    payload = json.dumps({**body, "max_tokens": 50}).encode()
    return Arrival("http", Endpoint.CHAT, payload, request_id, "default", time.perf_counter())


async def test_bookkeeping_waits_for_the_first_write_and_runs_once(emulator, gateway) -> None:
    backend = await emulator("b1")
    running = await gateway(config_for({"b1": backend.url}))
    relay = running.app[RELAY]

    call = CoreCall(relay, _arrival("ends-before-the-loop-turns"))
    opened = await call.open()
    assert opened.after_first_byte and not opened.first_token_observed  # not yet: writing
    assert metric_value(running, OVERHEAD) == 0.0
    call.close()  # the request ends here: finish runs what is left, first
    assert not opened.after_first_byte and opened.first_token_observed
    assert metric_value(running, OVERHEAD) == 1.0
    await asyncio.sleep(0)  # one loop turn: the scheduled run finds nothing left
    assert metric_value(running, OVERHEAD) == 1.0

    call = CoreCall(relay, _arrival("streams-on"))
    opened = await call.open()
    assert opened.after_first_byte
    await asyncio.sleep(0)  # the loop's next turn, while the stream goes on: done then
    assert not opened.after_first_byte and opened.first_token_observed
    assert metric_value(running, OVERHEAD) == 2.0
    call.close()
    assert metric_value(running, OVERHEAD) == 2.0
