"""The base of every section of the operator file: unknown keys are errors, values are frozen."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictSection(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ConfigError(Exception):
    """A configuration problem an operator can fix; the message says where and what."""
