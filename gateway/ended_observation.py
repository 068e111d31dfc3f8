"""What routing learns from a request once it has ended (the relay's ``finish``)."""

from __future__ import annotations

import time

from gateway.inbound import InboundRequest
from gateway.opened_stream import OpenedStream
from gateway.signals.outlier import FailureKind
from routing.types import Observation


def observation_of(
    inbound: InboundRequest, opened: OpenedStream, failure: FailureKind | None
) -> Observation:
    """What routing learns from a request that ended with ``failure`` (None: it succeeded)."""
    stats = opened.exchange.stats
    mean_itl = sum(stats.gaps_ms) / len(stats.gaps_ms) if stats.gaps_ms else None
    return Observation(
        backend=opened.route.backend,
        at=time.monotonic(),
        ok=failure is None,
        prompt_tokens=inbound.profile.prompt_tokens,
        cached_tokens=opened.exchange.cached_tokens(),
        # One choice's length: routing learns times (a slot held for ITL x tokens), and n
        # choices decode side by side (the spend counts them all: gateway/objectives.py).
        output_tokens=-(-opened.exchange.output_tokens() // inbound.choices),
        ttft_ms=opened.upstream_ttfb_ms if inbound.stream else None,
        itl_ms=mean_itl,
        predicted_ttft_ms=opened.route.predicted_ttft_ms,
        predicted_terms_ms=opened.predicted_terms_ms,
        prefix_hashes=inbound.profile.prefix_hashes,
        tenant=inbound.tenant,
        error_kind=None if failure is None else failure.value,
        first_token_observed=opened.first_token_observed,
    )
