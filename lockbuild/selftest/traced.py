"""What the tracer saw (:mod:`lockbuild.selftest.tracelog` reads it): one attempt, the log of a run, and
whether a host is loopback. Pure."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, field

from lockbuild.selftest.line import Note


@dataclass
class Traced:
    """One attempt strace saw: ``call`` (the system call), ``family``, and for Internet addresses
    ``host``/``port``; for a look-up, ``name`` is the name its bytes asked for (None: they could not be read)."""

    call: str
    family: str
    host: str
    port: int | None
    pid: int
    name: str | None = None
    frames: tuple[str, ...] = ()
    lookup: bool = False
    why: str = ""  # set for an attempt to UNREAD: which bound of the reader it met


@dataclass
class Log:
    attempts: list[Traced] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    canary: bool = False  # the inner run's first marker was seen: the tracer followed into the sandbox
    lines: int = 0
    overflow: bool = False  # more distinct attempts than the limit: the rest were not judged (an UNREAD)
    seccomp: list[tuple[str, int]] = field(default_factory=list)  # (call, pid): a filter installed in the sandbox


def is_local(host: str) -> bool:
    """A loopback address, or a name for one."""
    if host.lower().rstrip(".") in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def note_for(notes: Sequence[Note], events: Sequence[str], host: str | None, port: int | None) -> Note | None:
    """The watch note that goes with an attempt: the latest of the same process, of one of ``events``,
    naming the same host (and port, where there is one). None rather than a guess."""
    for n in reversed(notes):
        same = n.host == host if host is None or n.host is None else n.host.lower().rstrip(".") == host.lower()
        if n.event in events and same and (port is None or n.port == port):
            return n
    return None
