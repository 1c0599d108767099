"""Numbers in an HTTP answer, read strictly (pure): ASCII digits only, or not a number at all.

``str.isdigit`` is true of ``'²'`` and ``'٣'`` too, and ``int`` then fails or reads a Unicode digit:
an answer's ``Content-Length``, ``Retry-After`` or status is read here, by every client, and a value
that is not plain ASCII digits is read as absent (never an internal error).
"""

from __future__ import annotations

import email.utils

_ASCII_DIGITS = frozenset("0123456789")


def number(value: str | None, digits: int = 18) -> int | None:
    """``value`` (surrounding spaces dropped) as a number of at most ``digits`` ASCII digits, else None."""
    if value is None:
        return None
    text = value.strip(" \t")
    if not text or len(text) > digits or not set(text) <= _ASCII_DIGITS:
        return None
    return int(text)


def retry_after_seconds(value: str | None, wall: float) -> float | None:
    """A ``Retry-After`` header as seconds from now (a date in the past: 0), or None if absent or
    unreadable. Seconds are ASCII digits (a longer number than 12 digits is read as its first 12: far
    past any cap); a date is an HTTP date with its zone."""
    if value is None:
        return None
    text = value.strip(" \t")
    if text and set(text) <= _ASCII_DIGITS:
        return float(int(text[:12]))
    if not text.isascii():
        return None
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # an HTTP date is GMT; a date without a zone is read as such
        return None
    return max(0.0, when.timestamp() - wall)
