"""Observability: the request log, gateway events, log formats (metrics, traces and the status
page join as they land).

Hooks, and the files a new signal touches:
- ``gateway/relay.py`` — :class:`~gateway.observability.record.RequestRecord` filled at the
  core's seams; :class:`~gateway.observability.observer.RequestObserver` told once per request.
- doors (``gateway/http_api.py``, ``gateway/grpc/relay_backend.py``) — only requests refused
  before the core saw them (``observer.rejected``), and the error kind of a broken stream.
- ``gateway/commands/serve.py`` — :func:`~gateway.observability.log_format.install`.
- event sources (reload, outlier ejection, shared-state health, drain) —
  :func:`~gateway.observability.events.gateway_event`.
"""
