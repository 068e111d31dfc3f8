"""Gateways that chain across regions: hop headers and loop checks, per-hop timing, trace
context, and the summary each gateway publishes for the gateways that forward to it.

- :mod:`gateway.chain.hop`: ``enter_hop`` (loop / max-hops check, forward headers, exclusions)
- :mod:`gateway.chain.trace`: W3C ``traceparent`` child spans
- :mod:`gateway.chain.hop_timing`: ``net``/``hop`` timing entries, merging the downstream
  end-of-stream line, and ``breakdown`` / ``parts_sum_ms`` for readers of the header
- :mod:`gateway.chain.summary`: ``GET /v1/meridian/summary`` (``add_chain_routes``)
- :mod:`gateway.chain.poller`: background polling of gateway-kind backends' summaries

Nothing is imported here: ``gateway.config`` and ``gateway.signals.hub`` import submodules,
and the summary endpoint imports the relay, so a package-level import would be circular.
"""
