"""Workload files: what traffic to send, validated before a single request leaves.

A workload is a weighted mix of request shapes (chat with shared system prompts, multi-turn
sessions, long-form generation), an arrival process (open loop at a rate, or closed loop at a
concurrency), bounds, and who sends it (origin-region populations and tenants). Errors name the
file and the key, and say what was expected.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class IntRange(_Strict):
    """Uniform integers in [min, max]; a bare integer in YAML means exactly that value."""

    min: int = Field(ge=0)
    max: int = Field(ge=0)

    @model_validator(mode="before")
    @classmethod
    def _from_scalar(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return {"min": value, "max": value}
        if isinstance(value, list) and len(value) == 2:
            return {"min": value[0], "max": value[1]}
        return value

    @model_validator(mode="after")
    def _ordered(self) -> IntRange:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must not exceed max ({self.max})")
        return self


class SharedPrefix(_Strict):
    """``groups`` distinct system prompts of ``tokens`` tokens each; requests pick one uniformly."""

    groups: int = Field(ge=1)
    tokens: int = Field(ge=1)


class _Component(_Strict):
    name: str = ""
    weight: float = Field(default=1.0, gt=0)
    api: Literal["chat", "completions"] = "chat"
    model: str | None = None  # overrides the workload's model
    system_prompt: SharedPrefix | None = None
    max_tokens: IntRange = IntRange(min=128, max=128)
    extra_body: dict[str, Any] = Field(default_factory=dict)  # e.g. {"ignore_eos": true}


class ChatComponent(_Component):
    kind: Literal["chat"]
    user_tokens: IntRange = IntRange(min=64, max=256)


class LongFormComponent(_Component):
    """Few prompt tokens, many output tokens: an ITL-bound request."""

    kind: Literal["long_form"]
    user_tokens: IntRange = IntRange(min=32, max=128)
    max_tokens: IntRange = IntRange(min=1024, max=2048)


class SessionComponent(_Component):
    """A conversation: each turn resends the history (user turns plus the replies received)."""

    kind: Literal["session"]
    turns: IntRange = IntRange(min=3, max=6)
    user_tokens: IntRange = IntRange(min=32, max=128)
    think_time_s: float = Field(default=0.0, ge=0)  # pause between a reply and the next turn


Component = Annotated[
    ChatComponent | LongFormComponent | SessionComponent, Field(discriminator="kind")
]


class Tenant(_Strict):
    name: str = Field(min_length=1)
    weight: float = Field(default=1.0, gt=0)


class Population(_Strict):
    """Clients in one origin region; ``addresses`` feed ``X-Forwarded-For`` when enabled."""

    origin: str = Field(min_length=1)
    weight: float = Field(default=1.0, gt=0)
    addresses: list[str] = Field(default_factory=list)
    tenants: list[Tenant] | None = None  # overrides the workload's tenants for this region


class Identity(_Strict):
    """How origin and tenant reach the server; set a header name to null to leave it out."""

    origin_header: str | None = "X-Meridian-Origin"
    forwarded_for: bool = True  # send a population address as X-Forwarded-For when it has any
    tenant_header: str | None = "X-Meridian-Tenant"
    tenant_in_user_field: bool = True  # the OpenAI ``user`` request field


class Arrival(_Strict):
    mode: Literal["open", "closed"] = "closed"
    rate: float | None = Field(default=None, gt=0)  # sessions per second (open loop, Poisson)
    concurrency: int | None = Field(default=None, ge=1)  # sessions in flight (closed loop)
    # Closed loop: users start evenly spread over this many seconds, so a thousand of them do
    # not open a thousand connections in the same millisecond (a SYN storm, not a workload).
    ramp_up_s: float = Field(default=0.0, ge=0)

    @model_validator(mode="after")
    def _has_parameter(self) -> Arrival:
        if self.mode == "open" and self.rate is None:
            raise ValueError("open-loop arrival needs 'rate' (sessions per second)")
        if self.mode == "closed" and self.concurrency is None:
            raise ValueError("closed-loop arrival needs 'concurrency'")
        if self.mode == "open" and self.ramp_up_s > 0:
            raise ValueError("'ramp_up_s' applies to closed loop only (open loop has a rate)")
        return self


class Limits(_Strict):
    requests: int | None = Field(default=None, ge=1)
    duration_s: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _bounded(self) -> Limits:
        if self.requests is None and self.duration_s is None:
            raise ValueError("set 'requests' and/or 'duration_s' so the run stops by itself")
        return self


class Workload(_Strict):
    name: str = "workload"
    seed: int = 0
    model: str = "default"
    arrival: Arrival
    limits: Limits
    request_timeout_s: float = Field(default=300.0, gt=0)
    mix: list[Component] = Field(min_length=1)
    populations: list[Population] = Field(default_factory=lambda: [Population(origin="local")])
    tenants: list[Tenant] = Field(default_factory=lambda: [Tenant(name="default")])
    identity: Identity = Identity()

    @model_validator(mode="after")
    def _non_empty(self) -> Workload:
        if not self.populations:
            raise ValueError("'populations' must list at least one origin region")
        if not self.tenants:
            raise ValueError("'tenants' must list at least one tenant")
        return self


class WorkloadError(Exception):
    """A workload that cannot run; the message names the file, the key and what was expected."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: " + "; ".join(problems))


def parse_workload(data: Any, source: str = "<workload>") -> Workload:
    try:
        return Workload.model_validate(data)
    except ValidationError as error:
        problems = [
            f"{'.'.join(str(p) for p in issue['loc']) or '(top level)'}: {issue['msg']}"
            for issue in error.errors()
        ]
        raise WorkloadError(source, problems) from None


def load_workload(path: str | Path) -> Workload:
    source = str(path)
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise WorkloadError(source, [f"cannot read file: {error.strerror}"]) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise WorkloadError(source, [f"not valid YAML: {error}"]) from None
    return parse_workload(data, source)


def with_overrides(workload: Workload, **changes: Any) -> Workload:
    """A copy with command-line overrides applied (``None`` = keep), validated like the file.

    Keys: ``mode``, ``rate``, ``concurrency``, ``ramp_up_s`` (arrival), ``requests``,
    ``duration_s`` (limits), ``seed``, ``model``, ``request_timeout_s``.
    """
    data = workload.model_dump()
    sections = dict.fromkeys(("mode", "rate", "concurrency", "ramp_up_s"), "arrival")
    sections |= {"requests": "limits", "duration_s": "limits"}
    for key, value in changes.items():
        if value is None:
            continue
        section = sections.get(key)
        if section is None:
            data[key] = value
        else:
            data[section][key] = value
    return parse_workload(data, "command-line overrides")
