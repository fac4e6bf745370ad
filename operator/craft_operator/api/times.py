"""Times as Kubernetes writes them (RFC 3339, UTC)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def utc(moment: datetime) -> datetime:
    """``moment`` with a time zone: one written without (by hand, by another tool) is UTC,
    as every time Kubernetes writes is."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def parse_time(text: Any) -> datetime | None:
    """A time as Kubernetes writes it (``None`` if it is none); without a zone: UTC."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return utc(datetime.fromisoformat(text.replace("Z", "+00:00")))
    except ValueError:
        return None
