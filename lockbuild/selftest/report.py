"""The self-test's report: what ran, what each step gave, every network attempt, and the verdict. Pure."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from lockbuild.selftest.line import INET_FAMILIES, UNREADABLE_NAME, Note
from lockbuild.selftest.traced import Traced, is_local
from lockbuild.selftest.tracelog import LOOKUP_EVENTS

Status = Literal["passed", "failed", "skipped", "not run"]
Verdict = Literal["refused", "allowed", "local"]
UNREADABLE = UNREADABLE_NAME  # a look-up whose bytes the tracer could not read as one question


@dataclass(frozen=True)
class Step:
    name: str  # install, verify, gpu-probe, smoke, gpu-smoke
    status: Status
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "detail": self.detail}


@dataclass(frozen=True)
class Attempt:
    source: Literal["watch-hook", "strace"]  # strace: the tracer saw it; watch-hook: a look-up Python noted
    event: str  # the system call (strace), or socket.getaddrinfo, ... (watch hook)
    host: str  # an address, the name a look-up asked for, or a socket family (AF_PACKET, io_uring)
    port: int | str | None
    frames: tuple[str, ...]  # the Python frames that made it, innermost first (where the watch hook ran)
    pid: int
    verdict: Verdict
    family: str = ""
    lookup: bool = False  # a name look-up (a query to port 53, or a look-up Python noted)
    address: str = ""  # where a look-up went (127.0.0.1:53)
    why: str = ""  # an attempt to "an unreadable destination": the bound of the tracer's reader it met

    @property
    def frame(self) -> str | None:
        return self.frames[0] if self.frames else None

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "event": self.event,
            "host": self.host,
            "port": self.port,
            "family": self.family,
            "lookup": self.lookup,
            "address": self.address,
            "frame": self.frame,
            "frames": list(self.frames),
            "pid": self.pid,
            "verdict": self.verdict,
            "why": self.why,
        }

    def line(self) -> str:
        where = f" from {self.frame}" if self.frame else ""
        if self.why:
            what = f"{self.host} ({self.why})"
        elif self.lookup:
            what = f"name look-up of {self.host}" + (f" (to {self.address})" if self.address else "")
        elif self.family and self.family not in INET_FAMILIES:
            what = f"socket family {self.host}"
        else:
            what = f"{self.host}:{self.port if self.port is not None else '-'}"
        return f"{self.verdict:<7} {what} ({self.event}, {self.family or '-'}, {self.source}, pid {self.pid}){where}"


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return True


def judge(notes: Sequence[Note], traced: Sequence[Traced], allow: Sequence[str]) -> list[Attempt]:
    """Every attempt with its verdict: ``local`` (loopback; reported, never counted), ``allowed`` (the host is
    in the bundle's allow-network), else ``refused``.

    By rule: a socket of a family other than AF_UNIX, AF_NETLINK, AF_INET and AF_INET6, and io_uring, are
    refused whatever they did; an Internet address is judged by its host; a name look-up (anything sent to
    port 53, even on loopback) is judged by the name its bytes asked for, and by where it went: allowed only
    when both the name and the address (unless loopback) are allowed; "an unreadable name" is refused. A
    look-up the watch hook noted (a name, not an address) is an attempt too, unless the tracer saw it."""
    allowed = {h.lower() for h in allow}
    attempts: list[Attempt] = []
    for t in traced:
        v: Verdict
        if t.why:  # a bound of the tracer's reader: what it could not read may have gone anywhere
            attempts.append(Attempt("strace", t.call, t.host, None, t.frames, t.pid, "refused", why=t.why))
        elif t.family == "io_uring" or t.family not in INET_FAMILIES:
            attempts.append(Attempt("strace", t.call, t.family, None, t.frames, t.pid, "refused", t.family))
        elif t.lookup:
            name = t.name or UNREADABLE
            named = t.name is not None and (t.name.lower().rstrip(".") in allowed or is_local(t.name))
            v = "allowed" if named and (is_local(t.host) or t.host.lower() in allowed) else "refused"
            attempts.append(
                Attempt("strace", t.call, name, None, t.frames, t.pid, v, t.family, True, f"{t.host}:{t.port}")
            )
        else:
            v = "local" if is_local(t.host) else "allowed" if t.host.lower() in allowed else "refused"
            attempts.append(Attempt("strace", t.call, t.host, t.port, t.frames, t.pid, v, t.family))
    unique: dict[tuple[Any, ...], Attempt] = {}
    for a in attempts:  # a resolver asks twice (A, AAAA) and retries: one line per distinct attempt
        unique.setdefault((a.event, a.host, a.port, a.pid, a.verdict, a.family, a.address, a.frame, a.why), a)
    attempts = list(unique.values())
    traced_names = {a.host.lower() for a in attempts if a.lookup}
    for n in notes:
        if n.event not in LOOKUP_EVENTS or not n.host or _is_address(n.host) or is_local(n.host):
            continue
        if n.host.lower() in traced_names:
            continue
        v = "allowed" if n.host.lower().rstrip(".") in allowed else "refused"
        attempts.append(Attempt("watch-hook", n.event, n.host, n.port, n.frames, n.pid, v, "", True))
    return attempts


@dataclass(frozen=True)
class Report:
    bundle: str
    engine: str
    build: str
    namespace: str  # the command that made the network namespace
    tracer: str  # "strace" or why native attempts are not traced
    steps: tuple[Step, ...]
    attempts: tuple[Attempt, ...]
    allow_network: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    problems: tuple[str, ...] = field(default=())
    unchecked: str | None = None  # why the tracer did not judge the run: the verdict is then "not checked"
    first_use: tuple[str, ...] = ()  # first-use downloads the bundle does not carry (firstuse.py): no GPU runs them

    @property
    def refused(self) -> list[Attempt]:
        return [a for a in self.attempts if a.verdict == "refused"]

    @property
    def failed(self) -> bool:
        installed = any(s.name == "install" and s.status == "passed" for s in self.steps)
        return (
            not installed or bool(self.refused) or any(s.status == "failed" for s in self.steps) or bool(self.problems)
        )

    @property
    def verdict(self) -> Literal["passed", "failed", "not checked"]:
        return "failed" if self.failed else "not checked" if self.unchecked else "passed"

    @property
    def passed(self) -> bool:
        return self.verdict == "passed"

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "verdict": self.verdict,
            "unchecked": self.unchecked,
            "bundle": self.bundle,
            "engine": self.engine,
            "build": self.build,
            "namespace": self.namespace,
            "tracer": self.tracer,
            "steps": [s.to_json() for s in self.steps],
            "attempts": [a.to_json() for a in self.attempts],
            "refused": len(self.refused),
            "allow_network": list(self.allow_network),
            "env": dict(self.env),
            "problems": list(self.problems),
            "first_use": list(self.first_use),
        }

    def text(self) -> str:
        lines = [
            f"self-test of {self.bundle} ({self.engine} {self.build}) in the sandbox ({self.namespace}); "
            f"traced: {self.tracer}"
        ]
        if self.env:
            lines.append("runtime env: " + " ".join(f"{k}={v}" for k, v in self.env))
        for s in self.steps:
            lines.append(f"  {s.name:<10} {s.status}" + (f": {s.detail}" if s.detail else ""))
        if self.attempts:
            lines.append(
                f"network attempts ({len(self.refused)} refused; allowed hosts: "
                f"{', '.join(self.allow_network) or 'none'}):"
            )
            for a in self.attempts:
                lines.append(f"  {a.line()}")
        else:
            lines.append("network attempts: none")
        lines += [f"problem: {p}" for p in self.problems]
        if self.verdict == "not checked":
            lines.append(
                f"NOT CHECKED: no tracer judged this run ({self.unchecked}); install strace, and allow "
                "ptrace, to get a verdict"
            )
        else:
            lines.append("PASSED: the bundle ran with no network" if self.passed else "FAILED")
        lines += [f"not exercised without a GPU: {u}" for u in self.first_use]
        return "\n".join(lines)
