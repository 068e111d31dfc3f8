"""The lean door: the streaming endpoints' usual requests read and answered on the gateway's
own HTTP/1.1 connections, without aiohttp's web server in the way.

aiohttp's server costs a request about half a millisecond before the handler runs (its request
object, the handler task, three middlewares, the response writer); a byte relay in Python
without it adds what nginx adds (``loadtests/python_relay.py``, ``docs/results/profile-c1.md``).
So the public listener's connections start here (:class:`~gateway.lean_door.site.LeanSite`):

- :mod:`~gateway.lean_door.head` parses a head with llhttp and decides: a ``POST`` to a route of
  :mod:`~gateway.lean_door.routes` over HTTP/1.1 with a ``Content-Length`` body is served here;
  anything else goes to aiohttp;
- :mod:`~gateway.lean_door.connection` runs the door's runner
  (:func:`gateway.doors.sse_door.run`) for it, with the door's timeouts, caps and auth gate,
  and hands any other connection to aiohttp's server with the bytes read so far;
- :mod:`~gateway.lean_door.request` and :mod:`~gateway.lean_door.sse` are the runner's request
  and SSE response on such a connection; :mod:`~gateway.lean_door.response` writes heads.

``door.lean: false`` in the operator file turns it off; a TLS listener never uses it.
"""
