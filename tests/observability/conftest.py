"""Real servers on loopback, and the gateway's log lines captured as they are written."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from gateway.observability.log_format import JsonFormatter
from tests.gateway.conftest import emulator, gateway
from tests.observability.support import CapturedLog


@pytest.fixture
def captured() -> Iterator[CapturedLog]:
    log = CapturedLog()
    handler = logging.StreamHandler(log.stream)
    handler.setFormatter(JsonFormatter())
    loggers = [logging.getLogger(name) for name in ("meridian.request", "meridian.event")]
    saved = [(lg.level, lg.propagate) for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.INFO)
    try:
        yield log
    finally:
        for lg, (level, propagate) in zip(loggers, saved, strict=True):
            lg.removeHandler(handler)
            lg.setLevel(level)
            lg.propagate = propagate


__all__ = ["captured", "emulator", "gateway"]  # the gateway tests' server fixtures, reused
