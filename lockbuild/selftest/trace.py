"""The self-test's authoritative record: ``strace -f`` run *outside* the sandbox, and reading its log. Pure parsing.

strace is the ``prefix`` of the bubblewrap command (:func:`lockbuild.sandbox.run`), so it traces bwrap and
everything started inside, and writes its log to a file in a directory the sandbox does not contain: the
engine can neither see, truncate, replace nor link it, and cannot stop strace (it is outside the engine's
PID namespace, and a traced process cannot detach itself or be traced by anything else).

What is traced, by rule rather than by a list of the calls that happen to carry addresses today:

- ``socket`` and ``socketpair``: a socket of any family but ``AF_UNIX``/``AF_NETLINK``/``AF_INET``/``AF_INET6``
  (``AF_PACKET``, ``AF_VSOCK``, ``AF_BLUETOOTH``, a number strace cannot name...) is an attempt by itself;
- ``connect``, ``bind``, ``sendto``, ``sendmsg``, ``sendmmsg``: every address they carry, whatever the
  family; an Internet address that is not loopback is an attempt, any family other than the local ones
  is too; a send with no address is judged by the address its socket connected to (sockets are known
  by inode, so a thread or child that inherited the descriptor counts as well);
- a name look-up: anything sent to port 53 (the sandbox has no ``/etc/resolv.conf``, so a resolver
  asks ``127.0.0.1:53``); the name asked is read from the query itself;
- ``io_uring_setup``: a ring can connect and send without any system call a tracer sees, so it is an
  attempt by itself;
- ``clone``/``clone3`` with ``CLONE_UNTRACED``: a child the tracer does not follow (which could then trace
  its own children and let their calls through strace's seccomp filter), an attempt by itself;
- ``removexattr`` on a path under :data:`MARKER`: the audit hook's notes (the Python frame of an attempt).
  They only add a frame or a name to what strace saw; they can never remove an attempt.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import os
import re
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

MARKER_CALL = "removexattr"  # the audit hook's note: a call no engine makes on a path that cannot exist
CALLS = ("socket", "socketpair", "connect", "bind", "sendto", "sendmsg", "sendmmsg", "io_uring_setup", "clone",
         "clone3", MARKER_CALL)
MARKER = "/.lockbuild-audit/"
CANARY = "canary"  # the marker the inner run makes first: proof that the tracer saw inside the sandbox
STRING_BYTES = 1024  # strace -s: enough for a marker and a DNS query
LOCAL_FAMILIES = frozenset({"AF_UNIX", "AF_LOCAL", "AF_NETLINK"})
INET_FAMILIES = frozenset({"AF_INET", "AF_INET6"})
DNS_PORT = 53
LIMIT = 10_000  # distinct attempts a report keeps; more makes the verdict "not checked"
COVERS = ("socket, socketpair, connect, bind, sendto, sendmsg, sendmmsg, io_uring_setup and clone with "
          "CLONE_UNTRACED of every process in the sandbox (strace -f, outside it)")

_LINE = re.compile(r"^(?P<pid>\d+)\s+(?P<call>[a-z_0-9]+)\((?P<args>.*)$")
_HEX = r'"(?P<{0}>(?:\\x[0-9a-f]{{2}})*)"'
_FAMILY = re.compile(r"sa_family=(?P<family>AF_[A-Z0-9_]+|0x[0-9a-f]+|\d+)")
_V4 = re.compile(r"sa_family=AF_INET, sin_port=htons\((?P<port>\d+)\), sin_addr=inet_addr\(" + _HEX.format("a") + r"\)")
_V6 = re.compile(r"sa_family=AF_INET6, sin6_port=htons\((?P<port>\d+)\).*?inet_pton\(AF_INET6, " + _HEX.format("a"))
_FD = re.compile(r"^\d+<(?P<kind>[A-Za-z0-9-]+):\[(?P<inode>\d+)")
_INET_KINDS = ("TCP", "UDP", "TCPv6", "UDPv6", "UDPLITE", "UDPLITEv6", "RAW", "RAWv6", "SCTP", "SCTPv6", "PING",
               "PINGv6", "MPTCP", "MPTCPv6")
_FIRST_ARG = re.compile(r"^(?P<family>[A-Z0-9_]+|0x[0-9a-f]+|\d+)[,\s]")
_STRING = re.compile(_HEX.format("s"))


@dataclass
class Traced:
    """One attempt strace saw: ``call`` (the system call), ``family``, and for Internet addresses
    ``host``/``port``; ``name`` is the name a look-up asked for (from the query, else the audit note)."""

    call: str
    family: str
    host: str
    port: int | None
    pid: int
    name: str | None = None
    frames: tuple[str, ...] = ()
    lookup: bool = False
    named_by_query: bool = False  # the name was read from the query itself (else from the engine's own note)


@dataclass(frozen=True)
class Note:
    """One note of the audit hook (the engine's own word: it adds a frame or a name, never hides anything)."""

    event: str
    host: str | None
    port: int | str | None
    frames: tuple[str, ...]
    pid: int


@dataclass
class Log:
    attempts: list[Traced] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    canary: bool = False  # the inner run's first marker was seen: the tracer followed into the sandbox
    lines: int = 0
    overflow: bool = False  # more distinct attempts than the limit: the rest were not judged


def command(tracer: str, out: Path) -> list[str]:
    """The prefix that traces bwrap and every process in the sandbox into ``out`` (outside it)."""
    return [tracer, "-f", *(["--seccomp-bpf"] if seccomp_bpf(tracer) else []), "-qq", "-yy", "-xx", "-s",
            str(STRING_BYTES), "-e", f"trace={','.join(CALLS)}", "-e", "signal=none", "-o", str(out), "--"]


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
        proc = subprocess.run([tracer, "-f", "--seccomp-bpf", "-qq", "-e", "trace=connect", "-o", "/dev/null", "--",
                               "true"], capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0 and b"seccomp" not in proc.stderr


def unusable(tracer: str) -> str | None:
    """Why strace cannot trace a child here (ptrace forbidden by a seccomp profile or Yama), or None."""
    try:
        proc = subprocess.run([tracer, "-f", "-qq", "-o", "/dev/null", "--", "true"], capture_output=True, text=True,
                              timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)[:200]
    if proc.returncode == 0:
        return None
    return (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1][:200]


def _unhex(s: str) -> bytes:
    return bytes.fromhex(s.replace("\\x", ""))


def _text(s: str) -> str:
    return _unhex(s).decode("utf-8", "replace")


def dns_name(query: bytes) -> str | None:
    """The name a DNS query asks for (the first question), or None if ``query`` is not one."""
    if len(query) < 13:
        return None
    labels: list[str] = []
    i = 12
    while i < len(query) and len(labels) < 128:
        n = query[i]
        if n == 0:
            return ".".join(labels) if labels else None
        if n > 63 or i + 1 + n > len(query):
            return None
        labels.append(query[i + 1 : i + 1 + n].decode("ascii", "replace"))
        i += 1 + n
    return None


def _note(pid: int, payload: str) -> Note | None:
    try:
        d = json.loads(base64.urlsafe_b64decode(payload.encode("ascii") + b"=="))
        port = d.get("port")
        host = d.get("host")
        return Note(str(d["event"])[:64], None if host is None else str(host)[:255],
                    port if isinstance(port, int | None) else str(port)[:32],
                    tuple(str(x)[:300] for x in d.get("frames", [])[:8]), pid)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _addresses(args: str) -> list[tuple[str, str, int | None]]:
    """Every socket address in a call's arguments: (family, host, port); host and port only for AF_INET/6."""
    out: list[tuple[str, str, int | None]] = []
    v4 = {m.start(): m for m in _V4.finditer(args)}
    v6 = {m.start(): m for m in _V6.finditer(args)}
    for m in _FAMILY.finditer(args):
        fam = m["family"]
        got = v4.get(m.start()) or v6.get(m.start())
        if got is not None:
            out.append((fam, _text(got["a"]), int(got["port"])))
        elif fam in INET_FAMILIES:
            out.append((fam, "?", None))  # an Internet address strace printed in a way not read here
        else:
            out.append((fam, "-", None))
    return out


def _frames_for(notes: Sequence[Note], host: str | None, port: int | None) -> Note | None:
    """The audit note that goes with an attempt: the latest of the same process naming the same address,
    else the latest naming any (a look-up's name for the resolver's query)."""
    for n in reversed(notes):
        if n.host == host and (n.port == port or port is None):
            return n
    return notes[-1] if notes else None


class Parser:
    """Reads strace's log line by line, as it arrives (:class:`Reader`). ``limit`` bounds the *distinct*
    attempts kept (the same call to the same address from the same process is kept once); past it,
    :attr:`Log.overflow` is set."""

    def __init__(self, limit: int | None = None) -> None:
        self.log = Log()
        self.limit = LIMIT if limit is None else limit
        self._kept: set[tuple[object, ...]] = set()
        self._peers: dict[str, tuple[str, str, int | None]] = {}  # socket inode -> the address it connected to
        self._recent: dict[int, list[Note]] = {}
        self._lookups: dict[str, Traced] = {}  # socket inode -> its look-up attempt (to name it from the query)

    def _add(self, t: Traced) -> None:
        key = (t.call, t.family, t.host, t.port, t.pid, t.frames)
        if key in self._kept:
            return
        if len(self._kept) >= self.limit:
            self.log.overflow = True
            return
        self._kept.add(key)
        self.log.attempts.append(t)

    def line(self, line: str) -> None:  # one rule per branch, in the order of the module's docstring
        log = self.log
        log.lines += 1
        m = _LINE.match(line)
        if m is None:
            return  # "<... resumed>" halves, exits, signals: the arguments were on the first half
        pid, call, args = int(m["pid"]), m["call"], m["args"]
        if call == MARKER_CALL:
            s = _STRING.match(args)
            path = _text(s["s"]) if s else ""
            if path.startswith(MARKER):
                note = _note(pid, path[len(MARKER) :])
                if note is not None and note.event == CANARY:
                    log.canary = True
                elif note is not None:
                    self._recent.setdefault(pid, []).append(note)
                    del self._recent[pid][:-16]
                    if len(log.notes) < self.limit:
                        log.notes.append(note)
            return
        notes = self._recent.get(pid, [])
        if call == "io_uring_setup":
            self._add(Traced(call, "io_uring", "-", None, pid))
            return
        if call in ("clone", "clone3"):
            if "CLONE_UNTRACED" in args:
                self._add(Traced(call, "CLONE_UNTRACED", "-", None, pid))
            return
        if call in ("socket", "socketpair"):
            first = _FIRST_ARG.match(args)
            fam = first["family"] if first else "?"
            if fam not in LOCAL_FAMILIES and fam not in INET_FAMILIES:
                note = _frames_for(notes, None, None)
                self._add(Traced(call, fam, "-", None, pid, frames=note.frames if note else ()))
            return
        fd = _FD.match(args)
        inode = fd["inode"] if fd else None
        addrs = _addresses(args)
        if call == "bind":
            addrs = [a for a in addrs if a[0] not in INET_FAMILIES]  # binding is no attempt on an Internet socket
        if not addrs and inode in self._peers and call != "connect":
            addrs = [self._peers[inode]]
            if addrs[0][2] != DNS_PORT:
                return  # a send on a connected socket: its connect was the attempt
        if not addrs and call == "connect" and fd is not None and fd["kind"] in _INET_KINDS:
            addrs = [("AF_INET6" if fd["kind"].endswith("v6") else "AF_INET", "?", None)]  # an address not read
        for fam, host, port in addrs:
            if fam in LOCAL_FAMILIES or fam == "AF_UNSPEC":
                continue
            if call == "connect" and inode is not None:
                self._peers[inode] = (fam, host, port)
            lookup = fam in INET_FAMILIES and port == DNS_PORT
            query = None
            if lookup and call != "connect":
                s = _STRING.search(args)
                query = dns_name(_unhex(s["s"])) if s else None
            if lookup and inode is not None and inode in self._lookups:
                known = self._lookups[inode]
                if query and not known.named_by_query:
                    known.name, known.named_by_query = query, True  # the query outranks the engine's note
                    continue
                if not query or query == known.name:
                    continue  # the same look-up again; a query for another name is an attempt of its own
            note = _frames_for(notes, host, port)
            t = Traced(call, fam, host, port, pid, frames=note.frames if note else (), lookup=lookup)
            if lookup:
                named = note.host if note and note.event.startswith("socket.get") else None
                t.name, t.named_by_query = query or named, bool(query)
                if inode is not None:
                    self._lookups[inode] = t
            self._add(t)


def parse(text: str, limit: int | None = None) -> Log:
    """The attempts and notes of a whole log (see :class:`Parser`)."""
    parser = Parser(limit)
    for line in text.splitlines():
        parser.line(line)
    return parser.log


class Reader:
    """strace's log through a FIFO in the work directory's ``evidence/`` (outside the sandbox), parsed as it
    arrives: nothing of it is ever on a disk the engine could fill, so no line can be lost to ENOSPC, and
    no log can grow too large to read. strace blocks while the reader catches up."""

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
                pending = b""
                while chunk := f.read(1 << 16):
                    *lines, pending = (pending + chunk).split(b"\n")
                    for raw in lines:
                        self.parser.line(raw.decode("utf-8", "replace"))
                    if len(pending) > 1 << 20:  # no strace line is this long (-s bounds every string)
                        self.parser.line(pending.decode("utf-8", "replace"))
                        pending = b""
                if pending:
                    self.parser.line(pending.decode("utf-8", "replace"))
        except OSError as exc:
            self.error = f"cannot read the tracer's log: {exc.strerror or exc}"

    def finish(self, timeout: float = 60.0) -> Log:
        """Wait for the end of the log (strace has exited); a reader strace never opened is released."""
        if not self.opened:
            with contextlib.suppress(OSError), open(self.fifo, "wb"):  # unblocks our own reader
                pass
        self._thread.join(timeout)
        if self._thread.is_alive():
            self.error = "the tracer's log did not end"
        return self.parser.log
