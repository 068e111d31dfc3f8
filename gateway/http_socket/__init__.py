"""The HTTP door's socket layer: what happens before (and around) a request reaches a handler.

On a plain-TCP public listener the lean door (:mod:`gateway.lean_door`) reads each connection
first and serves the streaming endpoints' plain requests itself, with the same policy (caps,
timeouts: :mod:`gateway.http_socket.policy`); any other connection it hands to the aiohttp
server below.

- :mod:`gateway.http_socket.protocol` — the aiohttp server, runner and per-connection handler the
  gateway listens with: malformed requests get an OpenAI-shaped 400 that reflects nothing back
  and one log line without a traceback.
- :mod:`gateway.http_socket.expect` — ``Expect: 100-continue`` answered with 413 when the announced
  body is over the limit, before the client sends it.
"""
