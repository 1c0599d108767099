"""Text for a person's terminal: every non-printable character escaped, credentials in URLs masked.

Text from outside (an index answer, a recipe, a manifest) could fake a line or hide what follows on a
terminal. ``for_terminal`` is the one function the CLI and the progress reporter pass every human-readable
line through; ``--json`` output is escaped by the JSON encoder and masked by ``mask_data``."""

from __future__ import annotations

import re
from collections.abc import Iterable
from contextlib import suppress
from typing import Any

# scheme://userinfo@ : the userinfo part of a URL (RFC 3986), wherever it appears in a text.
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#\s]*@")  # up to the LAST @ of the authority
MASK = "***@"


def mask_credentials(text: str) -> str:
    """``text`` with the userinfo of every URL in it replaced by ``***``."""
    return _USERINFO.sub(lambda m: m[1] + MASK, text)


HIDDEN = "<hidden>"


def _forms(secret: str) -> set[str]:
    """The ways ``secret`` may appear in an error's text: as it is, trimmed, escaped as Python's repr
    writes a str or bytes (an HTTP library quoting a header it refused), and percent-encoded."""
    from urllib.parse import quote

    forms = {secret, secret.strip(), repr(secret)[1:-1], quote(secret, safe="")}
    with suppress(UnicodeEncodeError):
        forms.add(repr(secret.encode("utf-8", "surrogateescape"))[2:-1])
    return {f for f in forms if f}


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every form of every secret in ``secrets`` replaced by ``<hidden>``: the one function
    every transport failure's text passes through before it is shown (the builder's clients, the
    registry's connection, and the CLI's last look at an error)."""
    forms: set[str] = set()
    for secret in secrets:
        if secret:
            forms |= _forms(secret)
    for form in sorted(forms, key=len, reverse=True):
        text = text.replace(form, HIDDEN)
    return text


def _escape(ch: str) -> str:
    n = ord(ch)
    if n < 0x100:
        return f"\\x{n:02x}"
    if n < 0x10000:
        return f"\\u{n:04x}"
    return f"\\U{n:08x}"


def escape(text: str, *, keep_newlines: bool = True) -> str:
    """Every character a terminal would not print as itself, written as a ``\\x..``/``\\u....`` escape.

    Kept as they are: printable characters, space, and (unless ``keep_newlines`` is false) line feeds
    and tabs. Escaped: C0/C1 controls (ESC, CR, BEL, backspace...), DEL, format characters such as
    bidirectional overrides, line/paragraph separators, unassigned and private-use code points.
    """
    kept = "\n\t" if keep_newlines else ""
    return "".join(ch if ch.isprintable() or ch == " " or ch in kept else _escape(ch) for ch in text)


def one_line(text: str) -> str:
    """``text`` as one line: every line feed and tab escaped too. For a line built around a string from
    outside (a file name, a reason that quotes one), so that a name holding a line feed cannot fake a
    line of its own; :func:`for_terminal` still runs over the whole text."""
    return escape(text, keep_newlines=False)


def for_terminal(text: str) -> str:
    """What the CLI prints for ``text``: credentials masked, non-printable characters escaped."""
    return escape(mask_credentials(text))


def mask_data(value: Any) -> Any:
    """A JSON-ready value with the credentials of every URL in every string masked."""
    if isinstance(value, str):
        return mask_credentials(value)
    if isinstance(value, dict):
        return {k: mask_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [mask_data(v) for v in value]
    return value


def show(text: str, limit: int = 60) -> str:
    """A short, quoted rendering of untrusted text for an error message."""
    if len(text) > limit:
        text = text[:limit] + "..."
    return repr(text)


def closest(word: str, known: tuple[str, ...]) -> str | None:
    """The known key a misspelt ``word`` most likely meant ("did you mean ...?"): a close match, or one
    with the same letters in another order; None when nothing is near."""
    import difflib

    lowered = word.lower()
    close = difflib.get_close_matches(lowered, known, n=1) or [k for k in known if sorted(k) == sorted(lowered)]
    return close[0] if close else None
