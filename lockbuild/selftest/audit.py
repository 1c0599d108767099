"""The audit hook injected into every Python process of a self-test, and reading what it recorded.

The hook is a module placed in the test environment's site-packages with a ``.pth`` file that imports it,
so every interpreter of that environment (the verify command, the probe, the smoke command and anything
they start with the environment's Python) records each ``socket.connect``, ``socket.sendto``,
``socket.getaddrinfo``, ``socket.gethostbyname`` and ``socket.gethostbyaddr`` with the host, the port and
the Python frames that made it, as one JSON line appended to the report file named in the module. The
hook never raises and never blocks: the namespace does the blocking, the hook the telling.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

MODULE = "_lockbuild_selftest"

_TEMPLATE = '''\
"""Written by lockbuild test: records this process's network attempts (the self-test's audit hook)."""


def _install(path):
    import json
    import os
    import sys

    events = ("socket.connect", "socket.sendto", "socket.getaddrinfo", "socket.gethostbyname",
              "socket.gethostbyaddr")
    here = __file__

    def hook(event, args):
        if event not in events:
            return
        try:
            if event == "socket.getaddrinfo":
                host, port = args[0], args[1]
            elif event in ("socket.gethostbyname", "socket.gethostbyaddr"):
                host, port = args[0], None
            else:
                address = args[1]
                if not isinstance(address, tuple) or not address:
                    return  # AF_UNIX and other local families
                host, port = address[0], (address[1] if len(address) > 1 else None)
            if isinstance(host, bytes):
                host = host.decode("ascii", "replace")
            if not isinstance(host, str):
                return
            frames = []
            f = sys._getframe(1)
            while f is not None and len(frames) < 8:
                name = f.f_code.co_filename
                if name != here and not name.endswith("/socket.py"):
                    frames.append("%s:%d in %s" % (name, f.f_lineno, f.f_code.co_name))
                f = f.f_back
            line = json.dumps({"event": event, "host": host, "port": port if isinstance(port, int) else
                               (None if port is None else str(port)), "frames": frames, "pid": os.getpid()})
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, (line + "\\n").encode("utf-8", "replace"))
            finally:
                os.close(fd)
        except Exception:
            pass

    sys.addaudithook(hook)


_install(@PATH@)
'''


def module_text(report: Path) -> str:
    return _TEMPLATE.replace("@PATH@", repr(str(report)))


@dataclass(frozen=True)
class Seen:
    """One attempt the audit hook recorded."""

    event: str
    host: str
    port: int | str | None
    frames: tuple[str, ...]
    pid: int


def read_seen(report: Path, limit: int = 10_000) -> list[Seen]:
    """The recorded attempts; lines that are not what the hook writes are skipped (the file is the
    engine's to write to, so it is read as data, bounded)."""
    out: list[Seen] = []
    try:
        with report.open("rb") as f:
            raw = f.read(8 << 20)
    except FileNotFoundError:
        return out
    for line in raw.decode("utf-8", "replace").splitlines()[:limit]:
        try:
            d = json.loads(line)
            port = d.get("port")
            out.append(Seen(str(d["event"]), str(d["host"])[:255],
                            port if isinstance(port, int | None) else str(port)[:32],
                            tuple(str(x)[:500] for x in d.get("frames", [])[:8]), int(d.get("pid", 0))))  # fmt: skip
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
    return out
