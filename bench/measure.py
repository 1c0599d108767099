"""Running one command and measuring it: wall time and peak RSS (os.wait4), plus the statistics over runs.

Peak RSS is the kernel's ru_maxrss for the waited-for child, which on Linux is the largest resident
set of that process or of any descendant it waited for (so a lockbuild step that runs uv reports the
larger of the two, never their sum).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path


class StepFailed(RuntimeError):
    pass


@dataclass(frozen=True)
class Run:
    argv: tuple[str, ...]
    seconds: float
    max_rss_kb: int
    stdout: str
    stderr: str


def run(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    stdin: str | None = None,
) -> Run:
    """Run ``argv`` to its end; StepFailed (with the output's tail) unless it exits 0."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.TemporaryFile() as inp:
        if stdin is not None:
            inp.write(stdin.encode())
            inp.seek(0)
        started = time.perf_counter()
        proc = subprocess.Popen(list(argv), stdin=inp, stdout=out, stderr=err, env=dict(env) if env else None, cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if proc.returncode != 0:
        tail = "\n".join((stdout + stderr).strip().splitlines()[-25:])
        raise StepFailed(f"{' '.join(argv)[:300]} exited {proc.returncode}:\n{tail}")
    return Run(tuple(argv), seconds, int(usage.ru_maxrss), stdout, stderr)


def shell(script: str, *, env: Mapping[str, str] | None = None, cwd: Path | None = None) -> Run:
    return run(["bash", "-o", "pipefail", "-ec", script], env=env, cwd=cwd)


@dataclass
class Figure:
    """Repeated measurements of one variant of one phase."""

    phase: str
    variant: str
    seconds: list[float] = field(default_factory=list)
    rss_kb: list[int] = field(default_factory=list)
    bytes: int = 0  # what it moved (for throughput)
    note: str = ""

    def add(self, seconds: float, rss_kb: int = 0) -> None:
        self.seconds.append(seconds)
        self.rss_kb.append(rss_kb)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def peak_rss_mb(self) -> float:
        return max(self.rss_kb, default=0) / 1024

    def to_json(self) -> dict[str, object]:
        return {
            "phase": self.phase, "variant": self.variant, "seconds": [round(s, 4) for s in self.seconds],
            "median_s": round(self.median, 4), "min_s": round(min(self.seconds), 4), "max_s": round(max(self.seconds), 4),
            "peak_rss_mb": round(self.peak_rss_mb, 1), "rss_mb": [round(k / 1024, 1) for k in self.rss_kb],
            "bytes": self.bytes, "note": self.note,
        }  # fmt: skip


@dataclass(frozen=True)
class Ratio:
    """``numerator`` / ``denominator``, run by run (the i-th runs of both were made back to back)."""

    name: str
    values: tuple[float, ...]
    target: str
    met: bool | None

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "values": [round(v, 3) for v in self.values], "median": round(self.median, 3),
                "min": round(min(self.values), 3), "max": round(max(self.values), 3), "target": self.target,
                "met": self.met}  # fmt: skip


def pairwise(a: Figure, b: Figure | Sequence[Figure]) -> tuple[float, ...]:
    """a[i] / b[i] for each run i; with several ``b``, each run's fastest of them (the strictest floor)."""
    floors = [b] if isinstance(b, Figure) else list(b)
    n = min(len(a.seconds), *(len(f.seconds) for f in floors))
    return tuple(a.seconds[i] / min(f.seconds[i] for f in floors) for i in range(n))
