"""What every HTTP client of lockbuild asks for, accepts and may put in a header (pure rules, no I/O).

Every request asks for raw bodies (``RAW_BODY``), and another ``Content-Encoding`` is refused before its
body is read (``encoding_problem``). A header credential is visible ASCII without spaces, never CR or LF
(``credential_problem``, ``header_token``), checked where read; the message names the variable, never the value."""

from __future__ import annotations

from collections.abc import Mapping

RAW_BODY = {"Accept-Encoding": "identity"}  # the body as stored: no gzip, deflate, br or zstd
ENCODING_TIP = (
    "The server (or a proxy on the way) compressed its answer although lockbuild asked for it as stored "
    "(Accept-Encoding: identity); such an answer is refused unread. Point lockbuild at a server that honours "
    "it, or ask whoever runs the proxy to stop recoding answers."
)


def encoding_problem(headers: Mapping[str, str]) -> str | None:
    """Why an answer with these headers is refused (a ``Content-Encoding`` other than identity), or None."""
    value = headers.get("content-encoding")
    if value is None:
        value = headers.get("Content-Encoding")
    if value is None or value.strip().lower() in ("", "identity"):
        return None
    return (
        f"it answered with Content-Encoding {value.strip()[:40]!r}, where the body was asked for as stored "
        "(identity); refused unread"
    )


def _flaws(value: str, *, as_is: bool) -> list[str]:
    found: list[str] = []
    if "\r" in value:
        found.append("a carriage return (CR)")
    if "\n" in value:
        found.append("a line feed (LF)")
    if as_is:
        if any(c in " \t" for c in value):
            found.append("a space or tab")
        if any(ord(c) < 0x20 and c not in "\r\n\t" for c in value) or "\x7f" in value:
            found.append("a control character")
        if not value.isascii():
            found.append("a character that is not ASCII")
    return found


def header_token(value: str) -> bool:
    """Whether ``value`` may go into a header as it is: one or more visible ASCII characters, no space."""
    return bool(value) and all("\x21" <= c <= "\x7e" for c in value)


def credential_problem(name: str, value: str, *, as_is: bool) -> str | None:
    """Why the credential ``name`` cannot be used, or None; the value itself is never part of the answer.

    ``as_is``: the value is sent as it is in a header (a bearer token), so it must be visible ASCII with no
    space; otherwise (a password sent encoded, a passphrase) only a CR or LF is refused."""
    flaws = _flaws(value, as_is=as_is)
    if not flaws or (as_is and header_token(value)):
        return None
    where = " at its end" if value and value[-1] in "\r\n \t" and len(flaws) == 1 else ""
    expected = (
        "a token of visible ASCII characters without spaces (it is sent as it is in an HTTP header)"
        if as_is
        else "a credential without line breaks"
    )
    found = " and ".join(flaws)
    return f"{name}: expected {expected}, found one with {found}{where}; refused before any request (not shown)."


def credential_tip(name: str) -> str:
    return (
        f"Set {name} again without the line break or space: a token file saved with Windows line ends ends in "
        f"CR LF (strip it, e.g. {name}=$(tr -d '\\r\\n' < FILE)); nothing was sent anywhere."
    )
