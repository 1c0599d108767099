"""A child's output, read as it comes: what a node tool prints for lockbuild to parse (bounded), and what an
engine's command prints (its tail kept), through one reading loop.

:func:`run_bounded` reads at most ``limit`` bytes (a hostile ``nvidia-smi``, a sparse marker): past the
bound or the deadline, the child and all it started are killed, and the result says which."""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

PIPE_READ = 64 << 10  # one read of a child's pipe (os.read returns what is there, up to this)


@dataclass(frozen=True)
class Captured:
    returncode: int | None  # None: it was killed (over the bound or past the deadline)
    stdout: bytes  # at most the bound
    over: bool = False  # it printed more than the bound
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.over and not self.timed_out


def run_bounded(argv: Sequence[str], *, limit: int, timeout: float, env: Mapping[str, str] | None = None) -> Captured:
    """Run ``argv`` (stdin and stderr closed to it), keeping at most ``limit`` bytes of its stdout.

    Raises OSError when it cannot start (FileNotFoundError: no such program)."""
    kept: list[bytes] = []
    size = 0

    def take(data: bytes) -> bool:
        nonlocal size
        size += len(data)
        kept.append(data[: len(data) - max(size - limit, 0)])
        return size <= limit

    code, over, timed_out = _run_reading(argv, take, timeout=timeout, env=env, stderr=subprocess.DEVNULL)
    return Captured(code, b"".join(kept), over, timed_out)


@dataclass(frozen=True)
class Finished:
    returncode: int | None  # None: killed past the deadline
    tail: bytes  # the last ``keep`` bytes of its stdout and stderr, interleaved as it wrote them
    dropped: int  # how many bytes came before the tail and were not kept


def run_keeping_tail(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    timeout: float,
    keep: int,
    cwd: str | os.PathLike[str] | None = None,
) -> Finished:
    """Run ``argv`` to its end (stdin closed, stdout and stderr one pipe), reading all it prints and keeping
    only the last ``keep`` bytes: a command that prints without end costs its reader no memory. Past the
    deadline, the child and everything it started are killed (``returncode`` None).

    Raises OSError when it cannot start."""
    tail = bytearray()
    dropped = 0

    def take(data: bytes) -> bool:
        nonlocal dropped
        tail.extend(data)
        if len(tail) > keep:
            dropped += len(tail) - keep
            del tail[: len(tail) - keep]
        return True

    code, _, _ = _run_reading(argv, take, timeout=timeout, env=env, stderr=subprocess.STDOUT, cwd=cwd)
    return Finished(code, bytes(tail), dropped)


def _run_reading(
    argv: Sequence[str],
    take: Callable[[bytes], bool],
    *,
    timeout: float,
    env: Mapping[str, str] | None,
    stderr: int,
    cwd: str | os.PathLike[str] | None = None,
) -> tuple[int | None, bool, bool]:
    """The one loop that reads a child's pipe as it comes, in its own session: each read is given to
    ``take`` (False: enough, stop). Returns (exit code or None when killed, stopped by ``take``, timed
    out); a child stopped or past the deadline is killed with everything it started."""
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=stderr,
        env=None if env is None else dict(env),
        cwd=cwd,
        start_new_session=True,
    )
    deadline = time.monotonic() + timeout
    over = timed_out = False
    out = proc.stdout
    if out is None:  # never: stdout is a pipe
        _kill(proc)
        raise OSError(f"no pipe from {argv[0]}")
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(out, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    timed_out = True
                    break
                data = os.read(out.fileno(), PIPE_READ)
                if not data:
                    break
                if not take(data):
                    over = True
                    break
        if not (over or timed_out):
            try:
                proc.wait(max(deadline - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:  # it closed its output but runs on
                timed_out = True
    finally:
        out.close()
        if over or timed_out or proc.returncode is None:
            _kill(proc)
    return (None if over or timed_out else proc.returncode), over, timed_out


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """The child's whole process group (it was started in its own session), then the child reaped."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    proc.wait()
