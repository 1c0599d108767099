"""Native network attempts: the smoke command under ``strace -f``, and reading strace's lines. Pure parsing."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

_CALL = re.compile(
    r"^(?P<pid>\d+)\s+(?P<call>connect|sendto|sendmsg)\(\d+,.*?sa_family=AF_INET6?, sin6?_port=htons\((?P<port>\d+)\)"
    r".*?(?:inet_addr\(\"(?P<v4>[0-9.]+)\"\)|inet_pton\(AF_INET6, \"(?P<v6>[0-9A-Fa-f:.]+)\")"
)


@dataclass(frozen=True)
class Traced:
    call: str
    host: str
    port: int
    pid: int


def strace() -> str | None:
    return shutil.which("strace")


def wrap(tracer: str, out: Path, argv: list[str]) -> list[str]:
    """``argv`` under strace: every thread and child, only the calls that reach for an address."""
    return [tracer, "-f", "-qq", "-e", "trace=connect,sendto,sendmsg", "-e", "signal=none", "-o", str(out), "--",
            *argv]  # fmt: skip


def unusable(tracer: str) -> str | None:
    """Why strace cannot trace a child here (ptrace forbidden by a seccomp profile or Yama), or None."""
    try:
        proc = subprocess.run([tracer, "-f", "-qq", "-o", "/dev/null", "--", "true"], capture_output=True, text=True,
                              timeout=60, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)[:200]
    if proc.returncode == 0:
        return None
    return (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1][:200]


def parse(text: str, limit: int = 10_000) -> list[Traced]:
    out: list[Traced] = []
    for line in text.splitlines()[: limit * 10]:
        m = _CALL.match(line)
        if m:
            out.append(Traced(m["call"], m["v4"] or m["v6"], int(m["port"]), int(m["pid"])))
            if len(out) >= limit:
                break
    return out
