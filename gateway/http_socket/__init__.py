"""The HTTP door's socket layer: what happens before (and around) a request reaches a handler.

- :mod:`gateway.http_socket.protocol` — the aiohttp server, runner and per-connection handler the
  gateway listens with: malformed requests get an OpenAI-shaped 400 that reflects nothing back
  and one log line without a traceback.
- :mod:`gateway.http_socket.expect` — ``Expect: 100-continue`` answered with 413 when the announced
  body is over the limit, before the client sends it.
"""
