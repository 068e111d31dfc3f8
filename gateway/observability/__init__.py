"""Observability: what Meridian tells an operator (docs/observability.md).

One observer per gateway (:class:`~gateway.observability.observer.RequestObserver`) reports
each request once — its request-log line (``request_log``, ``record``), its metric updates
(``metrics_update``, ``request_metrics``, ``labels``) and its span tree (``spans``,
``tracing``) — from the relay core's seams. Beside it: gateway events (``events``), log formats
and the writer thread (``log_format``), per-model fleet gauges (``fleet_status``), live stream
buffers (``stream_buffers``), and the status page (``status``, ``status_page``, ``live_stats``).

Hooks, and the files a new signal touches:
- ``gateway/relay.py`` — :class:`~gateway.observability.record.RequestRecord` filled at the
  core's seams; the observer told at entry (``enter``), first token (``opened``), an open
  that failed (``open_failed``) and the end (``finished``).
- doors (``gateway/lifecycle/core.py`` for every door) — only requests refused
  before the core saw them (``observer.rejected``), the error kind of a broken stream, and the
  ``traceresponse`` header.
- ``gateway/app.py`` — the fleet-status collector and the status routes.
- ``gateway/commands/serve.py`` — :func:`~gateway.observability.log_format.install`.
- event sources (reload, outlier ejection, shared-state health, drain) —
  :func:`~gateway.observability.events.gateway_event`.
"""
