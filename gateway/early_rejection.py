"""Refuse a request whose first token cannot come in time, before any upstream work.

A request's *deadline* (seconds from its arrival by which the first token must be out; the
smallest of those that apply):

- its gRPC deadline, when ``grpc_deadline`` is on (the default);
- the ``X-Meridian-Deadline-Ms`` header, when the operator allows it (bounded; else a 400);
- its objective class's ``ttft_ms`` when that class says ``reject_if_unmeetable: true``.

Right after routing decides (``Relay.open``, once admitted; nothing has been sent upstream),
if even the best ranked candidate's predicted TTFT at ``quantile`` exceeds the time left
(``routing.deadline``, counted from arrival: the admission queue's wait included), the request
is refused: HTTP 503 with ``Retry-After`` (the
predicted queue drain) and an OpenAI-shaped error, code ``deadline_unmeetable``; on gRPC
``UNAVAILABLE`` (503's mapping: stock clients retry it, elsewhere or later) with the same
``retry-after`` and code in the trailers. The relay releases the router's reservation and the
admission slots.
Counted in ``meridian_early_rejections_total{class}``.
"""

from __future__ import annotations

import time
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from gateway.errors import ApiError
from gateway.header_bounds import HeaderBounds
from routing.deadline import P90, unmeetable
from routing.types import Decision, RequestProfile

DEADLINE_HEADER = "X-Meridian-Deadline-Ms"
CODE = "deadline_unmeetable"


class EarlyRejectionConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    quantile: Annotated[float, Field(ge=0.5, le=0.999)] = Field(
        default=P90,
        description="refuse when even the best candidate's predicted TTFT at this quantile "
        "exceeds the time left",
    )
    grpc_deadline: bool = Field(
        default=True, description="a gRPC call's deadline is a deadline for its first token"
    )
    header: HeaderBounds = Field(
        default=HeaderBounds(), description=f"the {DEADLINE_HEADER} request header"
    )


def deadline_s(
    config: EarlyRejectionConfig,
    header: str | None,
    grpc_timeout_s: float | None,
    class_deadline_s: float | None,
) -> float | None:
    """The request's first-token deadline (seconds from arrival), None if it has none."""
    found = [class_deadline_s]
    if header is not None and config.header.allow:
        found.append(config.header.milliseconds(header, DEADLINE_HEADER, "invalid_deadline") / 1e3)
    if config.grpc_deadline:
        found.append(grpc_timeout_s)
    present = [value for value in found if value is not None]
    return min(present) if present else None


def refusal(
    decision: Decision, profile: RequestProfile, config: EarlyRejectionConfig, elapsed_s: float
) -> ApiError | None:
    """The error to refuse with, or None to go ahead."""
    if profile.deadline_s is None:
        return None
    left_ms = (profile.deadline_s - elapsed_s) * 1000.0
    why = unmeetable(decision, left_ms, config.quantile)
    if why is None:
        return None
    percent = f"p{config.quantile * 100:g}"
    message = (
        f"the first token cannot arrive within this request's deadline: {why.budget_ms:.0f} ms "
        f"left, and the fastest backend for model '{profile.model}' is predicted to take "
        f"{why.predicted_ms:.0f} ms ({percent})"
    )
    if why.queue_helps:
        message += f"; its queue is predicted to drain enough in {why.retry_after_s:.0f} s"
    else:
        message += "; even with no queue it would not be in time: retry elsewhere"
    return ApiError(503, message, "service_unavailable", CODE, None, why.retry_after_s)


def refuse_if_unmeetable(
    decision: Decision,
    profile: RequestProfile,
    config: EarlyRejectionConfig,
    received_at: float,
) -> ApiError | None:
    """The relay's hook between deciding and relaying: the refusal, or None. The relay holds
    the decision's reservation and releases it with the refusal."""
    return refusal(decision, profile, config, time.perf_counter() - received_at)
