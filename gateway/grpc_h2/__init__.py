"""The h2 gRPC engine: gRPC over HTTP/2 served on the gateway's own event loop, built on ``h2``.

grpc.aio completes every operation of a call (request, initial metadata, each message, the
status) through grpc's poller thread: a thread wake-up, a socketpair byte and an event-loop
wake-up each, ~70 µs per operation. This engine speaks the protocol in Python on the loop, so
one message is one ``h2.send_data`` and a coalesced ``transport.write``. It serves the same
servicers as grpc.aio (``gateway.grpc.server``, ``listen.grpc_engine: h2``).

Files: ``wire`` (framing, timeouts, status and metadata as headers; no I/O), ``context`` (the
grpc.aio ``ServicerContext`` subset the servicers use), ``call`` (one call's life), ``connection``
(the asyncio protocol over h2, with ``h2_parts``: h2 as it is used here), ``server`` (listening
socket and method table), ``limits``, ``flood`` (what a client may make it do unasked) and
``lifetime`` (a connection's age and idleness).
"""
