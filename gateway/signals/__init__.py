"""Live signals: active probes, engine metrics, client geography, outlier ejection.

Every piece runs in the background and exposes a synchronous, non-blocking read API; the
request path only ever reads what these loops last wrote. ``SignalHub`` owns them all and
assembles the ``routing.types.FleetSnapshot`` that decisions are taken on.
"""
