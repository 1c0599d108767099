"""Times as lockbuild writes and reads them: RFC 3339 in UTC, e.g. 2025-10-05T01:40:00Z."""

from __future__ import annotations

import datetime as dt


def iso(t: dt.datetime) -> str:
    """``t`` in UTC, to the second, with a Z."""
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> dt.datetime | None:
    """An RFC 3339 / ISO 8601 time (a trailing Z allowed); None when it is not one. An aware result is
    in UTC (None when UTC cannot hold it); a time without a zone comes back naive, for the caller to
    refuse or interpret."""
    try:
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        return parsed.astimezone(dt.UTC) if parsed.tzinfo is not None else parsed
    except (ValueError, OverflowError):  # OverflowError: e.g. 0001-01-01T00:00:00+00:01 has no UTC time
        return None
