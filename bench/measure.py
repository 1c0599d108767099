"""Running one command and measuring it: wall time, CPU time (os.wait4), peak RSS, how busy the rest of
the machine was meanwhile, and the statistics over runs.

Peak RSS: Linux's ru_maxrss of a child starts at its parent's high-water mark (exec records the mm it
replaces), so the benchmark's own size would leak into every figure. Each command therefore runs under
``/usr/bin/time -f %M``, a 2 MB parent, whose report is the largest resident set of the command or of any
descendant it waited for (a lockbuild step that runs uv reports the larger of the two, never their sum).
A lockbuild process can also report its own peak (RUSAGE_SELF) into $BENCH_SELF_RSS (see bench/lbrun.py).
"""

from __future__ import annotations

import contextlib
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
TIME = "/usr/bin/time"  # GNU time: the small parent that measures the command's peak RSS
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
    self_rss_kb: int = 0  # the lockbuild process's own peak, when it reported one


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
    with contextlib.ExitStack() as stack:
        out, err, inp = (stack.enter_context(tempfile.TemporaryFile()) for _ in range(3))
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-rss-")))
        rss_file, self_file = scratch / "rss", scratch / "self"
        env = {**(env if env is not None else os.environ), "BENCH_SELF_RSS": str(self_file)}
        if stdin is not None:
            inp.write(stdin.encode())
            inp.seek(0)
        wrapped = [TIME, "-f", "%M", "-o", str(rss_file), *argv] if Path(TIME).exists() else list(argv)
        b0, s0 = busy_seconds(), _self_cpu()
        started = time.perf_counter()
        proc = subprocess.Popen(wrapped, stdin=inp, stdout=out, stderr=err, env=env, cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - started
        cpu = usage.ru_utime + usage.ru_stime
        others = max(0.0, busy_seconds() - b0 - cpu - (_self_cpu() - s0))
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
        rss = _last_int(rss_file, default=int(usage.ru_maxrss))
        own = _last_int(self_file, default=0)
    if proc.returncode != 0:
        tail = "\n".join((stdout + stderr).strip().splitlines()[-25:])
        raise StepFailed(f"{' '.join(argv)[:300]} exited {proc.returncode}:\n{tail}")
    return Run(tuple(argv), seconds, rss, stdout, stderr, cpu, others, own)


def _last_int(path: Path, *, default: int) -> int:
    try:
        lines = path.read_text().split()
    except OSError:
        return default
    return int(lines[-1]) if lines and lines[-1].isdigit() else default


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
    self_rss_kb: list[int] = field(default_factory=list)  # the lockbuild process alone (0: not reported)
    bytes: int = 0  # what it moved (for throughput)

    def add(
        self, seconds: float, rss_kb: int = 0, cpu_s: float = 0.0, contention: float = 0.0, self_rss_kb: int = 0
    ) -> None:
        self.seconds.append(seconds)
        self.rss_kb.append(rss_kb)
        self.cpu_s.append(cpu_s)
        self.contention.append(contention)
        self.self_rss_kb.append(self_rss_kb)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def peak_rss_mb(self) -> float:
        return max(self.rss_kb, default=0) / 1024

    @property
    def self_rss_mb(self) -> float:
        return max(self.self_rss_kb, default=0) / 1024

    def to_json(self) -> dict[str, object]:
        return {
            "phase": self.phase,
            "variant": self.variant,
            "seconds": [round(s, 4) for s in self.seconds],
            "median_s": round(self.median, 4),
            "min_s": round(min(self.seconds), 4),
            "max_s": round(max(self.seconds), 4),
            "peak_rss_mb": round(self.peak_rss_mb, 1),
            "rss_mb": [round(k / 1024, 1) for k in self.rss_kb],
            "self_rss_mb": [round(k / 1024, 1) for k in self.self_rss_kb],
            "cpu_s": [round(c, 3) for c in self.cpu_s],
            "others_busy_cpus": [round(c, 2) for c in self.contention],
            "bytes": self.bytes,
        }


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
        return {
            "name": self.name,
            "values": [round(v, 3) for v in self.values],
            "median": round(self.median, 3),
            "min": round(min(self.values), 3),
            "max": round(max(self.values), 3),
            "target": self.target,
            "met": self.met,
        }


def pairwise(a: Figure, b: Figure | Sequence[Figure]) -> tuple[float, ...]:
    """a[i] / b[i] for each run i; with several ``b``, each run's fastest of them (the strictest floor)."""
    floors = [b] if isinstance(b, Figure) else list(b)
    n = min(len(a.seconds), *(len(f.seconds) for f in floors))
    return tuple(a.seconds[i] / min(f.seconds[i] for f in floors) for i in range(n))
