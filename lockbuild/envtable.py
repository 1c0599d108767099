"""``[engine.env]``: the engine's runtime settings (e.g. ``HF_HUB_OFFLINE = "1"``). Pure rules, shared by the
recipe (builder) and the signed manifest's [install] table (node), so both refuse the same things.

A name is an upper-case shell identifier (``^[A-Z_][A-Z0-9_]*$``, whole name); a value is plain printable
text (no newline, NUL, escape or other control/format character). Names that steer the dynamic loader, the
interpreter, the shell's search path or lockbuild itself are refused: a runtime setting says how the engine
behaves, never what code runs.
"""

from __future__ import annotations

import re
import unicodedata

NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,127}")
MAX_VALUE = 4096
MAX_ENTRIES = 64
RESERVED = frozenset({"PATH", "HOME", "SHELL", "IFS", "ENV", "BASH_ENV", "VIRTUAL_ENV", "TMPDIR", "PS4"})
RESERVED_PREFIXES = ("LD_", "PYTHON", "LOCKBUILD_", "DYLD_", "BASH_FUNC")


def problem(name: object, value: object) -> str | None:
    """Why ``name = value`` is not a valid runtime setting, or None."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        return f"expected a name like HF_HUB_OFFLINE (A-Z, 0-9, _; not starting with a digit), found {str(name)[:60]!r}"
    if name in RESERVED or name.startswith(RESERVED_PREFIXES):
        return f"{name} steers the loader, the interpreter or the shell, not the engine; it may not be set here"
    if not isinstance(value, str):
        return f"expected a string value (quote numbers: {name} = \"1\"), found {type(value).__name__}"
    if len(value) > MAX_VALUE:
        return f"expected a value of at most {MAX_VALUE} characters, found {len(value)}"
    if any(unicodedata.category(c) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp") for c in value):
        return f"the value of {name} holds a control character (newline, NUL, escape ...); expected plain text"
    return None


HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252}[A-Za-z0-9])?|[0-9A-Fa-f:.]{2,45}")
MAX_SMOKE_WORDS = 64


def host_problem(value: object) -> str | None:
    """Why ``value`` is not a host name or IP address for ``allow-network``, or None."""
    if not isinstance(value, str) or not HOST.fullmatch(value):
        return f"expected a host name or IP address (no scheme, port or path), found {str(value)[:60]!r}"
    return None


def word_problem(value: object) -> str | None:
    """Why ``value`` is not a word of a command (``smoke``), or None."""
    if not isinstance(value, str) or not 0 < len(value) <= MAX_VALUE:
        return "expected non-empty strings of at most 4096 characters"
    if any(unicodedata.category(c) in ("Cc", "Cf", "Cs", "Co", "Cn") for c in value):
        return f"{value[:60]!r} holds a control character"
    return None
