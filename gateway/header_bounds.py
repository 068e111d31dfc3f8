"""A request header the operator may allow, carrying a bounded number of milliseconds."""

from __future__ import annotations

import math
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gateway.errors import bad_request


class HeaderBounds(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    allow: bool = Field(default=False, description="honour the header (off: it is ignored)")
    min_ms: Annotated[float, Field(gt=0)] = Field(default=50.0, description="lowest it may ask")
    max_ms: Annotated[float, Field(gt=0)] = Field(
        default=600_000.0, description="highest it may ask"
    )

    @model_validator(mode="after")
    def _ordered(self) -> HeaderBounds:
        if self.min_ms > self.max_ms:
            raise ValueError(f"min_ms ({self.min_ms:g}) is above max_ms ({self.max_ms:g})")
        return self

    def milliseconds(self, raw: str, header: str, code: str) -> float:
        """The header's value; a 400 ``ApiError`` with ``code`` when it is not a number of
        milliseconds within the bounds."""
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not (self.min_ms <= value <= self.max_ms):  # NaN fails too
            raise bad_request(
                f"{header} must be a number of milliseconds between "
                f"{self.min_ms:g} and {self.max_ms:g}",
                param=header,
                code=code,
            )
        return value
