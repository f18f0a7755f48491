"""Reading times out of Kubernetes objects: RFC 3339 timestamps, conditions, events."""

from __future__ import annotations

from datetime import datetime
from typing import Any


def parse_time(value: str | None) -> datetime | None:
    """An RFC 3339 timestamp as the API server writes it ('2026-11-29T17:02:03Z', optional fraction)."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def seconds_between(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return (end - start).total_seconds()


def phase(obj: dict[str, Any]) -> str | None:
    """status.phase, or None for an object the controller has not reported on yet."""
    return (obj.get("status") or {}).get("phase")


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """The status condition of type `kind`, or None."""
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return c
    return None


def condition_time(obj: dict[str, Any], kind: str, status: str = "True") -> datetime | None:
    """When condition `kind` last became `status` (its lastTransitionTime), or None if it is not."""
    c = condition(obj, kind)
    if c is None or c.get("status") != status:
        return None
    return parse_time(c.get("lastTransitionTime"))


def event_time(event: dict[str, Any]) -> datetime | None:
    """An Event's time: core/v1 Events fill lastTimestamp or eventTime (newer reporters) or neither."""
    return parse_time(event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp")) or parse_time(
        (event.get("metadata") or {}).get("creationTimestamp")
    )

