"""The self-test's report: what ran, what each step gave, every network attempt, and the verdict. Pure."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from lockbuild.selftest.audit import Seen
from lockbuild.selftest.trace import Traced

Status = Literal["passed", "failed", "skipped", "not run"]
DNS_PORT = 53


@dataclass(frozen=True)
class Step:
    name: str  # install, verify, gpu-probe, smoke
    status: Status
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "detail": self.detail}


@dataclass(frozen=True)
class Attempt:
    source: Literal["audit-hook", "strace"]
    event: str  # socket.connect, socket.getaddrinfo, ..., or the system call
    host: str
    port: int | str | None
    frames: tuple[str, ...]  # the Python frames that made it, innermost first (audit hook only)
    pid: int
    verdict: Literal["refused", "allowed", "local"]

    @property
    def frame(self) -> str | None:
        return self.frames[0] if self.frames else None

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "event": self.event, "host": self.host, "port": self.port,
                "frame": self.frame, "frames": list(self.frames), "pid": self.pid, "verdict": self.verdict}  # fmt: skip

    def line(self) -> str:
        where = f" from {self.frame}" if self.frame else ""
        return f"{self.verdict:<7} {self.host}:{self.port if self.port is not None else '-'} ({self.event}, " \
               f"{self.source}, pid {self.pid}){where}"  # fmt: skip


def is_local(host: str) -> bool:
    if host.lower() in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def judge(seen: Sequence[Seen], traced: Sequence[Traced], allow: Sequence[str]) -> list[Attempt]:
    """Every attempt with its verdict: ``local`` (loopback; reported, never counted), ``allowed`` (the host is
    in the bundle's allow-network), else ``refused``. A name-server query strace sees (port 53) carries no host
    name; it counts as allowed only when every name the Python code looked up is allowed."""
    allowed = {h.lower() for h in allow}
    attempts: list[Attempt] = []
    for s in seen:
        v: Literal["refused", "allowed", "local"] = (
            "local" if is_local(s.host) else "allowed" if s.host.lower() in allowed else "refused"
        )
        attempts.append(Attempt("audit-hook", s.event, s.host, s.port, s.frames, s.pid, v))
    lookups = [a for a in attempts if a.event == "socket.getaddrinfo" and a.verdict != "local"]
    lookups_allowed = bool(lookups) and all(a.verdict == "allowed" for a in lookups)
    for t in traced:
        if is_local(t.host):
            v = "local"
        elif t.host.lower() in allowed or (t.port == DNS_PORT and lookups_allowed):
            v = "allowed"
        else:
            v = "refused"
        attempts.append(Attempt("strace", t.call, t.host, t.port, (), t.pid, v))
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

    @property
    def refused(self) -> list[Attempt]:
        return [a for a in self.attempts if a.verdict == "refused"]

    @property
    def passed(self) -> bool:
        installed = any(s.name == "install" and s.status == "passed" for s in self.steps)
        return installed and not self.refused and not any(s.status == "failed" for s in self.steps) \
            and not self.problems  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
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
        }

    def text(self) -> str:
        lines = [f"self-test of {self.bundle} ({self.engine} {self.build}) in a new network namespace "
                 f"({self.namespace}); native calls traced: {self.tracer}"]  # fmt: skip
        if self.env:
            lines.append("runtime env: " + " ".join(f"{k}={v}" for k, v in self.env))
        for s in self.steps:
            lines.append(f"  {s.name:<10} {s.status}" + (f": {s.detail}" if s.detail else ""))
        if self.attempts:
            lines.append(f"network attempts ({len(self.refused)} refused; allowed hosts: "
                         f"{', '.join(self.allow_network) or 'none'}):")  # fmt: skip
            for a in self.attempts:
                lines.append(f"  {a.line()}")
        else:
            lines.append("network attempts: none")
        lines += [f"problem: {p}" for p in self.problems]
        lines.append("PASSED: the bundle ran with no network" if self.passed else "FAILED")
        return "\n".join(lines)
