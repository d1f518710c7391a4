"""Alertmanager webhook payload (version 4) and review API shapes; unknown fields are tolerated."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

# Label and annotation values are bounded so one payload cannot blow up the database.
MAX_VALUE_CHARS = 4096


class WebhookAlert(BaseModel):
    """One alert of a notification (camelCase: Alertmanager's field names)."""

    model_config = ConfigDict(extra="ignore")

    status: Literal["firing", "resolved"]
    labels: dict[str, str]
    annotations: dict[str, str] = Field(default_factory=dict)
    startsAt: datetime
    endsAt: datetime | None = None
    fingerprint: str = ""


class WebhookPayload(BaseModel):
    model_config = ConfigDict(extra="ignore")

    version: str
    status: Literal["firing", "resolved"]
    receiver: str = ""
    groupKey: str = ""
    alerts: list[WebhookAlert]


ReviewState = Literal["open", "acknowledged", "closed"]


class ReviewPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    state: ReviewState | None = None
    note: str | None = Field(None, max_length=MAX_VALUE_CHARS)

    @field_validator("note")
    @classmethod
    def _storable(cls, note: str | None) -> str | None:
        problem = text_problem(note) if note is not None else None
        if problem:
            raise ValueError(f"the note {problem}")
        return note


class Rejection(BaseModel):
    index: int
    reason: str
    detail: str


class WebhookResult(BaseModel):
    accepted: int
    opened: int
    reopened: int
    cleared: int
    rejected: list[Rejection]


def text_problem(text: str) -> str | None:
    """Why a database cannot hold *text* (PostgreSQL refuses NUL; a lone surrogate has no UTF-8), else None."""
    if "\x00" in text:
        return "contains a NUL character"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid Unicode (a lone surrogate)"
    return None


def review_reason(labels: dict[str, str]) -> str:
    """The review key's reason: the alert's `reason` label, else its alert name (generic review)."""
    return labels.get("reason") or labels.get("alertname", "unknown")


def to_float(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if out == out else None
