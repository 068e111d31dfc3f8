"""Doors beyond chat and completions, each its own small package on the shared relay core.

A door turns its wire format into an :class:`~gateway.inbound.InboundRequest` and the relay's
events back into its wire format; routing, attempts, retries, timing and outcome accounting
are the core's (gateway/relay.py). :mod:`gateway.doors.grammar` tells the core how each
upstream wire format's stream starts, carries tokens and ends. Adding a door touches its own
module, one line in :mod:`gateway.doors.routes`, and its endpoint in gateway/inbound.py.
"""
