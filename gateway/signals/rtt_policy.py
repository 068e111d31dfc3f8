"""What routing takes as a backend's round trip: the probe's, unless configuration knows better.

A probe measures the path its request takes. When that is not the path real requests take
(a health endpoint answered by a load balancer or an edge in front of a hosted model, a
``/health`` that skips the slow hop), the probe's RTT is wrong for routing: issue 14 saw
probes measure ~1 ms for backends 80 and 215 ms away. Per backend, configuration can:

- ``offset_ms``: add a fixed hop the probes do not cross (the probe's RTT + this);
- ``probes: health_only``: keep probing for health, but route on the configured region RTT
  (+ ``offset_ms``) instead of the probe's;
- ``pin_ms``: route on this RTT, whatever the probes or the region table say.

Whatever the RTT, routing's learner still follows the requests: a persistent disagreement
between the RTT it was given and what requests pay is learned as the backend's offset.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from routing.types import BackendState

# A learned offset this large (ms, or share of the RTT) means requests and the RTT disagree.
DISAGREE_MS, DISAGREE_REL = 20.0, 0.25


class RttPolicy(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    probes: Literal["rtt", "health_only"] = Field(
        default="rtt",
        description="'rtt': route on the probe's round trip; 'health_only': probe for health "
        "only (its path is not the requests'), route on the region's configured rtt_ms",
    )
    offset_ms: Annotated[float, Field(ge=0)] = Field(
        default=0.0, description="added to the RTT routing uses: a hop the probes do not cross"
    )
    pin_ms: Annotated[float, Field(ge=0)] | None = Field(
        default=None, description="route on this RTT (ms) whatever probes and regions say"
    )

    @property
    def source(self) -> str:
        """Where the RTT routing uses comes from, for explain."""
        if self.pin_ms is not None:
            return "pinned by configuration"
        where = "probe" if self.probes == "rtt" else "region rtt_ms (probes are health-only)"
        return where + (f" + {self.offset_ms:g} ms configured offset" if self.offset_ms else "")


def routed_rtt(
    state: BackendState, policy: RttPolicy, region_rtt_ms: float | None, now: float
) -> BackendState:
    """``state`` with the RTT routing should use under ``policy``."""
    if policy.pin_ms is not None:
        return dataclasses.replace(state, rtt_ms=policy.pin_ms, rtt_as_of=now)
    if policy.probes == "health_only":
        rtt = None if region_rtt_ms is None else region_rtt_ms + policy.offset_ms
        return dataclasses.replace(state, rtt_ms=rtt, rtt_as_of=None if rtt is None else now)
    if policy.offset_ms and state.rtt_ms is not None:
        return dataclasses.replace(state, rtt_ms=state.rtt_ms + policy.offset_ms)
    return state


def believed(terms_ms: Mapping[str, float], state: BackendState | None) -> str:
    """Which signal a candidate's prediction follows for its round trip, and why (explain)."""
    rtt, offset = terms_ms.get("rtt", 0.0), terms_ms.get("bias", 0.0)
    given = "configuration (no probe RTT)" if state is None or state.rtt_ms is None else "probes"
    if abs(offset) >= max(DISAGREE_MS, DISAGREE_REL * rtt):
        return (
            f"requests: they pay {offset:+.0f} ms beyond the {rtt:.0f} ms RTT from {given}, "
            "so the prediction follows them (learned offset)"
        )
    return f"{given}: RTT {rtt:.0f} ms, and requests agree (learned offset {offset:+.0f} ms)"
