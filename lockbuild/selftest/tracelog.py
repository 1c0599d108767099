"""Reading the self-test's authoritative record, strace's log: which calls are network attempts. Pure.

strace runs outside the sandbox and writes to a FIFO the sandbox does not contain: the engine can neither
touch the log nor stop strace. What is traced goes by rule, not by a list of calls (:class:`Parser`), and
every bound fails closed."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from lockbuild.limits import MiB
from lockbuild.selftest.dns import DnsStream, question
from lockbuild.selftest.line import (
    DATAGRAM_KINDS,
    DNS_PORT,
    FDS,
    FIRST_ARG,
    INET_FAMILIES,
    INET_KINDS,
    LOCAL_FAMILIES,
    STRING,
    Address,
    Note,
    addresses,
    messages,
    note,
    result,
    socket_of,
    text,
)
from lockbuild.selftest.traced import Log, Traced, is_local, note_for

MARKER_CALL = "removexattr"  # the watch hook's note: a call no engine makes on a path that cannot exist
SEND_CALLS = ("sendto", "sendmsg", "sendmmsg")
WRITE_CALLS = ("write", "writev", "pwritev", "pwritev2")  # data sent to the socket's peer, shown in the line
OPAQUE_CALLS = ("sendfile", "splice")  # data sent that the line does not show
CALLS = (
    "socket",
    "socketpair",
    "connect",
    "bind",
    *SEND_CALLS,
    *WRITE_CALLS,
    *OPAQUE_CALLS,
    "io_uring_setup",
    "clone",
    "clone3",
    "seccomp",
    "prctl",
    MARKER_CALL,
)
MARKER = "/.lockbuild-watch/"
CANARY = "canary"  # the marker the inner run makes first: proof that the tracer saw inside the sandbox
LIMIT = 10_000  # distinct attempts (and look-ups noted) a report keeps; more fails the verdict
LINE_BOUND = 16 * MiB  # a strace line read whole: any -s 1024 line but a sendmmsg's of many large messages
HEAD = 64 << 10  # what of a longer line is kept to judge it by its first argument (a -yy path: 16 KiB)
PENDING_BOUND = 64 * MiB  # first halves of calls not yet resumed (<unfinished ...>), all processes together
MAX_PEERS = 4096  # sockets connected to port 53 (their sends are look-ups)
MAX_STREAMS = 256  # streams to port 53 whose bytes are joined (up to dns.MAX_STREAM each)
MAX_FRAMES_PIDS = 4096  # processes whose recent notes are kept for their frames
UNREAD = "an unreadable destination"  # what a bound of the reader makes of what it cannot read or keep
LOOKUP_EVENTS = ("socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr", "socket.getnameinfo")
SEND_EVENTS = ("socket.connect", "socket.sendto", "socket.sendmsg")

_LINE = re.compile(r"^(?P<pid>\d+)\s+(?P<call>[a-z_0-9]+)\((?P<args>.*)$")
_RESUMED = re.compile(r"^(?P<pid>\d+)\s+<\.\.\. (?P<call>[a-z_0-9]+) resumed>(?P<rest>.*)$")
UNFINISHED = " <unfinished ...>"


class Parser:
    """Reads strace's log line by line, as it arrives (:class:`Reader`); :meth:`finish` at its end. ``limit``
    bounds the *distinct* attempts kept (the same call to the same address, for the same name, from the
    same process is kept once); past it, :attr:`Log.overflow` is set and one attempt to :data:`UNREAD`
    fails the verdict. A call strace shows in two halves (``<unfinished ...>``, ``<... resumed>``) is read
    whole when it resumes (``sendmmsg``'s messages, and every return value, are in the second half).

    An attempt, by rule: a ``socket``/``socketpair`` of a family other than unix, netlink, inet and inet6;
    a non-loopback Internet address (or a non-local family) in ``connect``, ``bind``, ``sendto``,
    ``sendmsg``, ``sendmmsg``, a send with no address judged by its socket's peer (sockets known by inode);
    every message to port 53, a look-up of the name its bytes ask for (:mod:`lockbuild.selftest.dns`;
    unreadable: "an unreadable name"); ``io_uring_setup``; ``clone``/``clone3`` with ``CLONE_UNTRACED``;
    ``seccomp`` or ``prctl(PR_SET_SECCOMP)`` after the inner run began. ``removexattr`` under :data:`MARKER`
    is the watch hook's note: it adds a frame to what strace saw, never removes or names an attempt.
    Every bound (:data:`LINE_BOUND`, :data:`PENDING_BOUND`, :data:`MAX_PEERS`, :data:`MAX_STREAMS`,
    ``limit``) fails closed: what cannot be kept or read whole is an attempt to :data:`UNREAD`."""

    def __init__(self, limit: int | None = None) -> None:
        self.log = Log()
        self.limit = LIMIT if limit is None else limit
        self._kept: set[tuple[object, ...]] = set()
        self._noted: set[Note] = set()
        self._peers: dict[str, Address] = {}  # socket inode -> the port-53 address it connected to
        self._streams: dict[str, tuple[DnsStream, Traced]] = {}  # stream socket to port 53 -> its bytes, its attempt
        self._recent: dict[int, list[Note]] = {}
        self._pending: dict[int, tuple[str, str]] = {}  # pid -> (call, first half) of a call not yet resumed
        self._pending_bytes = 0

    def _add(self, t: Traced) -> None:
        key = (t.call, t.family, t.host, t.port, t.pid, t.frames, t.lookup, t.name, t.why)
        if key in self._kept:
            return
        if len(self._kept) >= self.limit:
            self._overflow(f"more than {self.limit} distinct network attempts; the rest were not judged")
            return
        self._kept.add(key)
        self.log.attempts.append(t)

    def _overflow(self, why: str) -> None:
        if not self.log.overflow:  # one attempt past the limit, once
            self.log.overflow = True
            self.log.attempts.append(Traced("-", "?", UNREAD, None, 0, why=why))

    def _unread(self, call: str, pid: int, why: str) -> None:
        """An attempt to :data:`UNREAD`: what a bound of the reader could not read or keep."""
        self._add(Traced(call, "?", UNREAD, None, pid, why=why))

    def line(self, line: str) -> None:
        self.log.lines += 1
        m = _LINE.match(line)
        if m is None:
            r = _RESUMED.match(line)
            first = self._resume(int(r["pid"])) if r else None
            if r and first and first[0] == r["call"]:
                self._call(int(r["pid"]), r["call"], first[1] + r["rest"])
            return  # exits and signals are not traced
        pid, call, args = int(m["pid"]), m["call"], m["args"]
        if args.endswith(UNFINISHED):
            half = args[: -len(UNFINISHED)]
            self._resume(pid)  # a first half never resumed, replaced: strace shows one call per process
            if self._pending_bytes + len(half) > PENDING_BOUND:
                self._judge_head(pid, call, half, f"calls not yet resumed over {PENDING_BOUND // MiB} MiB")
                return
            self._pending[pid] = (call, half)
            self._pending_bytes += len(half)
            return
        self._call(pid, call, args)

    def _resume(self, pid: int) -> tuple[str, str] | None:
        first = self._pending.pop(pid, None)
        if first is not None:
            self._pending_bytes -= len(first[1])
        return first

    def cut(self, head: str, why: str) -> None:
        """A line the reader could not read whole (``why``); ``head``: its first :data:`HEAD` bytes. Never
        parsed in pieces: an attempt to :data:`UNREAD`, unless its first argument alone shows a write
        that is no look-up (a file, a pipe, a socket not connected to port 53), as a whole line would."""
        self.log.lines += 1
        m, r = _LINE.match(head), _RESUMED.match(head)
        if m is not None:
            self._judge_head(int(m["pid"]), m["call"], m["args"], why)
        elif r is not None:
            first = self._resume(int(r["pid"]))
            same = first is not None and first[0] == r["call"]
            self._judge_head(int(r["pid"]), r["call"], first[1] if first and same else "", why)
        else:
            self._unread("?", 0, why)

    def _judge_head(self, pid: int, call: str, head: str, why: str) -> None:
        if call in WRITE_CALLS and not self._to_dns(*socket_of(head)):
            return
        self._unread(call, pid, why)

    def _to_dns(self, kind: str | None, inode: str | None, shown: Address | None) -> bool:
        """Whether a socket, as its call shows it, is an Internet socket connected to port 53."""
        peer = shown or (self._peers.get(inode) if inode else None)
        return kind in INET_KINDS and peer is not None and peer[2] == DNS_PORT

    def finish(self) -> Log:
        """The end of the log: a call that never resumed is judged on its first half; a stream to port 53
        that never sent a whole query is a look-up of a name that could not be read."""
        for pid, (call, args) in sorted(self._pending.items()):
            self._call(pid, call, args)
        self._pending.clear()
        self._pending_bytes = 0
        for stream, t in self._streams.values():
            for name in stream.left():
                self._add(dataclasses.replace(t, name=name))
        self._streams.clear()
        return self.log

    def _call(self, pid: int, call: str, args: str) -> None:  # one rule per branch, as Parser says
        log = self.log
        if call == MARKER_CALL:
            s = STRING.match(args)
            path = text(s["s"]) if s else ""
            if path.startswith(MARKER):
                got = note(pid, path[len(MARKER) :])
                if got is not None and got.event == CANARY:
                    log.canary = True
                elif got is not None:
                    self._note(pid, got)
            return
        notes = self._recent.get(pid, [])
        if call in ("seccomp", "prctl"):
            self._seccomp(pid, call, args)
            return
        if call == "io_uring_setup":
            self._add(Traced(call, "io_uring", "-", None, pid))
            return
        if call in ("clone", "clone3"):
            if "CLONE_UNTRACED" in args:
                self._add(Traced(call, "CLONE_UNTRACED", "-", None, pid))
            return
        if call in ("socket", "socketpair"):
            first = FIRST_ARG.match(args)
            fam = first["family"] if first else "?"
            if fam not in LOCAL_FAMILIES and fam not in INET_FAMILIES:
                got = note_for(notes, ("socket.__new__",), None, None)
                self._add(Traced(call, fam, "-", None, pid, frames=got.frames if got else ()))
            return
        kind, inode, shown_peer = socket_of(args)
        peer = shown_peer or (self._peers.get(inode) if inode else None)
        if call in OPAQUE_CALLS:  # data the line does not show, on any socket of the call
            for k, i in FDS.findall(args):
                to = self._peers.get(i)
                if k in INET_KINDS and to is not None and to[2] == DNS_PORT:
                    self._add(Traced(call, to[0], to[1], to[2], pid, lookup=True))
            return
        if call in WRITE_CALLS and not self._to_dns(kind, inode, shown_peer):
            return  # a file, a pipe, a terminal; or a socket whose connect was the attempt
        if call == "connect":
            self._connect(pid, args, kind, inode, notes)
            return
        if call == "bind":
            for fam, host, port in addresses(args):
                if fam not in INET_FAMILIES and fam not in LOCAL_FAMILIES and fam != "AF_UNSPEC":
                    self._add(Traced(call, fam, host, port, pid))  # binding is no attempt on an Internet socket
            return
        family = "AF_INET6" if (kind or "").endswith("v6") else "AF_INET"
        for addrs, data, whole in messages(call, args, family):
            for fam, host, port in addrs or ([peer] if peer else []):
                if fam in LOCAL_FAMILIES or fam == "AF_UNSPEC":
                    continue
                if fam in INET_FAMILIES and port == DNS_PORT:
                    self._query(call, (fam, host, port), pid, data, whole, kind, inode, notes)
                elif addrs:  # a send on a connected socket: its connect was the attempt
                    got = note_for(notes, SEND_EVENTS, host, port)
                    self._add(Traced(call, fam, host, port, pid, frames=got.frames if got else ()))

    def _connect(self, pid: int, args: str, kind: str | None, inode: str | None, notes: Sequence[Note]) -> None:
        addrs = addresses(args)
        if not addrs and kind in INET_KINDS:
            addrs = [("AF_INET6" if (kind or "").endswith("v6") else "AF_INET", "?", None)]  # an address not read
        for fam, host, port in addrs:
            if fam in LOCAL_FAMILIES or fam == "AF_UNSPEC":
                continue
            got = note_for(notes, SEND_EVENTS, host, port)
            t = Traced("connect", fam, host, port, pid, frames=got.frames if got else ())
            to_dns = fam in INET_FAMILIES and port == DNS_PORT
            if inode is not None:  # only a peer on port 53 is ever asked for (its sends are look-ups)
                self._peers.pop(inode, None)
                if to_dns and len(self._peers) >= MAX_PEERS:
                    self._unread("connect", pid, f"more than {MAX_PEERS} sockets connected to port 53")
                elif to_dns:
                    self._peers[inode] = (fam, host, port)
            if to_dns:
                if kind not in DATAGRAM_KINDS:  # a stream, or a socket not known: its queries are read as sent
                    self._stream(inode or f"{pid} {len(self._streams)}", dataclasses.replace(t, lookup=True))
                if is_local(host):
                    continue  # the resolver's address: the queries sent there are the attempts
            self._add(t)

    def _stream(self, key: str, t: Traced) -> DnsStream | None:
        """A stream to port 53 whose bytes are joined into messages (a new one replaces one of the same
        socket); None past :data:`MAX_STREAMS`, which is an attempt to :data:`UNREAD`."""
        self._streams.pop(key, None)
        if len(self._streams) >= MAX_STREAMS:
            self._unread(t.call, t.pid, f"more than {MAX_STREAMS} streams to port 53")
            return None
        self._streams[key] = (DnsStream(), t)
        return self._streams[key][0]

    def _note(self, pid: int, got: Note) -> None:
        """A watch note: kept for its frames (the last 16 of a process), and, if it is a look-up the
        verdict reads, in :attr:`Log.notes` (distinct ones, at most ``limit``; more fails the verdict)."""
        recent = self._recent.pop(pid, [])  # re-inserted last: the process least recently noted goes first
        self._recent[pid] = [*recent[-15:], got]
        while len(self._recent) > MAX_FRAMES_PIDS:
            del self._recent[next(iter(self._recent))]
        if got.event not in LOOKUP_EVENTS or got in self._noted:
            return
        if len(self._noted) >= self.limit:
            self._overflow(f"more than {self.limit} distinct look-ups noted; the rest were not judged")
            return
        self._noted.add(got)
        self.log.notes.append(got)

    def _query(
        self,
        call: str,
        to: Address,
        pid: int,
        data: bytes,
        whole: bool,
        kind: str | None,
        inode: str | None,
        notes: Sequence[Note],
    ) -> None:
        """A look-up: every name sent to port 53, read from the bytes sent (never from a note)."""
        if kind in DATAGRAM_KINDS:
            names = [question(data)]
        else:  # a stream: the messages this send completed (a socket's own, however the sends split them)
            key = inode or f"{pid} {kind} {to}"
            kept = self._streams.get(key)
            stream = kept[0] if kept else self._stream(key, Traced("connect", *to, pid, lookup=True))
            if stream is None:
                return
            names = stream.send(data, whole)
        for name in names:
            got = note_for(notes, LOOKUP_EVENTS, name, None) if name else None
            self._add(Traced(call, *to, pid, name=name, frames=got.frames if got else (), lookup=True))

    def _seccomp(self, pid: int, call: str, args: str) -> None:
        """A filter installed after the inner run began (before it: bubblewrap installing the sandbox's own)."""
        if not self.log.canary:
            return
        first = FIRST_ARG.match(args)
        op = first["family"] if first else ""
        if call == "prctl" and op not in ("PR_SET_SECCOMP", "22", "0x16"):
            return
        if call == "seccomp" and op in ("SECCOMP_GET_ACTION_AVAIL", "SECCOMP_GET_NOTIF_SIZES"):
            return
        ret = result(args)
        if (ret is None or ret >= 0) and len(self.log.seccomp) < 16:  # one fails the verdict: 16 name enough
            self.log.seccomp.append((call, pid))  # installed, or never returned; one that failed installed nothing


def parse(content: str, limit: int | None = None) -> Log:
    """The attempts and notes of a whole log (see :class:`Parser`)."""
    parser = Parser(limit)
    for line in content.splitlines():
        parser.line(line)
    return parser.finish()
