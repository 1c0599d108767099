"""The self-test's tracer: ``strace -f`` run *outside* the sandbox, and its log read as it arrives.

:func:`command` is the ``prefix`` of the bubblewrap command; :class:`Reader` reads the log through a FIFO
outside the sandbox and hands each line to :class:`lockbuild.selftest.tracelog.Parser`, which says what
the calls are (why the engine cannot touch the log: :mod:`lockbuild.selftest.tracelog`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import re
import subprocess
import threading
from pathlib import Path

from lockbuild.selftest.traced import Log, Traced
from lockbuild.selftest.tracelog import CALLS, HEAD, LINE_BOUND, UNREAD, Parser

STRING_BYTES = 1024  # strace -s: a marker (960), and a DNS question (at most 12 + 255 + 4 bytes, 2 more on TCP)
COVERS = (
    "socket, socketpair, connect, bind, sendto, sendmsg, sendmmsg, write/writev/pwritev/pwritev2, sendfile "
    "and splice to port 53, io_uring_setup, clone with CLONE_UNTRACED, seccomp and prctl(PR_SET_SECCOMP) of "
    "every process in the sandbox (strace -f, outside it)"
)


def command(tracer: str, out: Path) -> list[str]:
    """The prefix that traces bwrap and every process in the sandbox into ``out`` (outside it)."""
    return [
        tracer,
        "-f",
        *(["--seccomp-bpf"] if seccomp_bpf(tracer) else []),
        "-qq",
        "-yy",
        "-xx",
        "-s",
        str(STRING_BYTES),
        "-e",
        f"trace={','.join(CALLS)}",
        "-e",
        "signal=none",
        "-o",
        str(out),
        "--",
    ]


def describe(tracer: str) -> str:
    """What the tracer covers on this machine, for the report: the calls, strace's version, its filter."""
    version = "strace"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run([tracer, "-V"], capture_output=True, text=True, timeout=30, check=False).stdout
        m = re.search(r"version (\S+)", out)
        version = f"strace {m[1]}" if m else version
    mode = "--seccomp-bpf: only these calls stop a process" if seccomp_bpf(tracer) else "every call stops a process"
    return f"{COVERS}; {version}, {mode}"


@functools.cache
def seccomp_bpf(tracer: str) -> bool:
    """Whether this strace can stop only at the traced calls (``--seccomp-bpf``, strace 5.3+): a filter the
    kernel applies to every traced process, which it cannot remove; the other calls then cost nothing."""
    try:
        proc = subprocess.run(
            [tracer, "-f", "--seccomp-bpf", "-qq", "-e", "trace=connect", "-o", "/dev/null", "--", "true"],
            capture_output=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0 and b"seccomp" not in proc.stderr


def unusable(tracer: str) -> str | None:
    """Why strace cannot trace a child here (ptrace forbidden by a seccomp profile or Yama), or None."""
    try:
        proc = subprocess.run(
            [tracer, "-f", "-qq", "-o", "/dev/null", "--", "true"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)[:200]
    if proc.returncode == 0:
        return None
    return (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1][:200]


class Reader:
    """strace's log through a FIFO in the work directory's ``evidence/`` (outside the sandbox), parsed as it
    arrives: nothing of it is ever on a disk the engine could fill, so no line can be lost to ENOSPC, and
    no log can grow too large to read. strace blocks while the reader catches up. A line is handed to the
    parser only whole: one over :data:`LINE_BOUND`, or one the log ends inside, is :meth:`Parser.cut`."""

    def __init__(self, fifo: Path, tracer: str, limit: int | None = None) -> None:
        self.fifo, self.tracer = fifo, tracer
        self.parser = Parser(limit)
        self.opened = False
        self.error: str | None = None
        self._thread = threading.Thread(target=self._run, name="lockbuild-strace-reader", daemon=True)

    def start(self) -> None:
        os.mkfifo(self.fifo, 0o600)  # in the private 0700 evidence directory this run made
        self._thread.start()

    def _run(self) -> None:
        try:
            with open(self.fifo, "rb") as f:  # a FIFO this run made in its own 0700 directory
                self.opened = True
                pending, skipping = bytearray(), False  # skipping: the rest of a line already cut
                too_long = f"a line of the tracer's log over {LINE_BOUND >> 20} MiB, not read"
                while chunk := f.read(1 << 16):
                    *lines, rest = chunk.split(b"\n")
                    for raw in lines:
                        if not skipping:
                            pending += raw
                            if len(pending) > LINE_BOUND:  # a sendmmsg of many large messages
                                self._cut(pending, too_long)
                            else:
                                self.parser.line(pending.decode("utf-8", "replace"))
                        pending, skipping = bytearray(), False
                    if not skipping:
                        pending += rest
                        if len(pending) > LINE_BOUND:  # never read in pieces: its end is skipped
                            self._cut(pending, too_long)
                            pending, skipping = bytearray(), True
                if pending:
                    self._cut(pending, "the tracer's log ended inside a line")
        except OSError as exc:
            self.error = f"cannot read the tracer's log: {exc.strerror or exc}"

    def _cut(self, line: bytearray, why: str) -> None:
        self.parser.cut(line[:HEAD].decode("utf-8", "replace"), why)

    def finish(self, timeout: float = 60.0) -> Log:
        """Wait for the end of the log (strace has exited); a reader strace never opened is released."""
        if not self.opened:
            with contextlib.suppress(OSError), open(self.fifo, "wb"):  # unblocks our own reader
                pass
        self._thread.join(timeout)
        if self._thread.is_alive():  # what was not read may hold any attempt: it fails the verdict
            log = self.parser.log
            why = f"the tracer's log was not read to its end within {timeout:.0f} s"
            return dataclasses.replace(
                log, attempts=[*log.attempts, Traced("-", "?", UNREAD, None, 0, why=why)], notes=[*log.notes]
            )
        return self.parser.finish()
