"""The admin listener: introspection and operations on their own socket, loopback by default.

One aiohttp application serves two listeners. Routes marked admin-only (:func:`admin_only`)
answer only on the admin listener — ``/v1/meridian/state``, ``/metrics`` (unless
``admin.public_metrics``), the details of ``/readyz`` — and the admin listener answers nothing
but those, ``/healthz`` and ``/readyz``. Which listener a request came in on is decided by the
socket it arrived on, never by anything the client sends.

Mounting a page on the admin listener (e.g. the status page)::

    app.router.add_get("/status", status_page)          # register as usual, in build_app
    admin_only(app, "/status")                           # the path and everything under it

The admin URL of a running gateway is ``RunningGateway.admin_url``.
"""

from gateway.admin.listener import (
    ADMIN,
    AdminListener,
    admin_gate,
    admin_only,
    install_admin,
    on_admin_listener,
)

__all__ = [
    "ADMIN",
    "AdminListener",
    "admin_gate",
    "admin_only",
    "install_admin",
    "on_admin_listener",
]
