"""Gateway events — config reload, ejection and readmission, shared state degraded and back,
drain — as one structured log line each: ``event`` names what happened, the fields say to what.
"""

from __future__ import annotations

import logging
from typing import Any

from gateway.observability.log_format import FIELDS_ATTR

_events = logging.getLogger("meridian.event")


def gateway_event(event: str, message: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log ``message`` with ``event`` and ``fields`` attached (see log_format.FIELDS_ATTR)."""
    if _events.isEnabledFor(level):
        _events.log(level, message, extra={FIELDS_ATTR: {"event": event, **fields}})
