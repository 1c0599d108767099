"""Running one command and measuring it: wall time, CPU time and peak RSS (os.wait4), how busy the rest
of the machine was meanwhile, and the statistics over runs.

Peak RSS is the kernel's ru_maxrss for the waited-for child, which on Linux is the largest resident
set of that process or of any descendant it waited for (so a lockbuild step that runs uv reports the
larger of the two, never their sum).
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path


class StepFailed(RuntimeError):
    pass


_HZ = os.sysconf("SC_CLK_TCK")
CPUS = os.cpu_count() or 1


@dataclass(frozen=True)
class Run:
    argv: tuple[str, ...]
    seconds: float
    max_rss_kb: int
    stdout: str
    stderr: str
    cpu_s: float = 0.0  # user + system time of the command and the children it waited for
    others_cpu_s: float = 0.0  # CPU time the rest of the machine (not this command, not the bench) used meanwhile


def busy_seconds() -> float:
    """CPU seconds all CPUs have spent busy since boot (from /proc/stat; 0 where there is none), not counting
    the user time of niced processes: the scheduler gives them a CPU only when the benchmark leaves it idle."""
    try:
        with open("/proc/stat", "rb") as f:
            fields = f.readline().split()[1:]
    except OSError:
        return 0.0
    ticks = [int(x) for x in fields]
    idle = ticks[1] + ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # nice, idle, iowait
    return (sum(ticks[:8]) - idle) / _HZ


def _self_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def wait_quiet(*, max_wait: float, busy_below: float = 0.25, sample: float = 0.5) -> float:
    """Wait (at most ``max_wait`` s) until the other processes use less than ``busy_below`` of the CPUs
    over ``sample`` seconds; returns the busy fraction last seen."""
    deadline = time.monotonic() + max_wait
    while True:
        b0, s0 = busy_seconds(), _self_cpu()
        time.sleep(sample)
        frac = max(0.0, (busy_seconds() - b0) - (_self_cpu() - s0)) / (sample * CPUS)
        if frac < busy_below or time.monotonic() >= deadline:
            return frac


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
        b0, s0 = busy_seconds(), _self_cpu()
        started = time.perf_counter()
        proc = subprocess.Popen(list(argv), stdin=inp, stdout=out, stderr=err, env=dict(env) if env else None, cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - started
        cpu = usage.ru_utime + usage.ru_stime
        others = max(0.0, busy_seconds() - b0 - cpu - (_self_cpu() - s0))
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if proc.returncode != 0:
        tail = "\n".join((stdout + stderr).strip().splitlines()[-25:])
        raise StepFailed(f"{' '.join(argv)[:300]} exited {proc.returncode}:\n{tail}")
    return Run(tuple(argv), seconds, int(usage.ru_maxrss), stdout, stderr, cpu, others)


def shell(script: str, *, env: Mapping[str, str] | None = None, cwd: Path | None = None) -> Run:
    return run(["bash", "-o", "pipefail", "-ec", script], env=env, cwd=cwd)


@dataclass
class Figure:
    """Repeated measurements of one variant of one phase."""

    phase: str
    variant: str
    seconds: list[float] = field(default_factory=list)
    rss_kb: list[int] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)
    contention: list[float] = field(default_factory=list)  # others' CPU use during the run, in CPUs
    bytes: int = 0  # what it moved (for throughput)

    def add(self, seconds: float, rss_kb: int = 0, cpu_s: float = 0.0, contention: float = 0.0) -> None:
        self.seconds.append(seconds)
        self.rss_kb.append(rss_kb)
        self.cpu_s.append(cpu_s)
        self.contention.append(contention)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def peak_rss_mb(self) -> float:
        return max(self.rss_kb, default=0) / 1024

    def to_json(self) -> dict[str, object]:
        return {
            "phase": self.phase, "variant": self.variant, "seconds": [round(s, 4) for s in self.seconds],
            "median_s": round(self.median, 4),
            "min_s": round(min(self.seconds), 4), "max_s": round(max(self.seconds), 4),
            "peak_rss_mb": round(self.peak_rss_mb, 1), "rss_mb": [round(k / 1024, 1) for k in self.rss_kb],
            "cpu_s": [round(c, 3) for c in self.cpu_s], "others_busy_cpus": [round(c, 2) for c in self.contention],
            "bytes": self.bytes,
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
                "min": round(min(self.values), 3), "max": round(max(self.values), 3),
                "target": self.target, "met": self.met}  # fmt: skip


def pairwise(a: Figure, b: Figure | Sequence[Figure]) -> tuple[float, ...]:
    """a[i] / b[i] for each run i; with several ``b``, each run's fastest of them (the strictest floor)."""
    floors = [b] if isinstance(b, Figure) else list(b)
    n = min(len(a.seconds), *(len(f.seconds) for f in floors))
    return tuple(a.seconds[i] / min(f.seconds[i] for f in floors) for i in range(n))
