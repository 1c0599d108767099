"""Reading the arguments of one strace line (``-yy -xx``): addresses, sockets, the bytes a call sends. Pure.

With ``-xx`` every string is hex escapes, so no text inside one can pass for strace's own decoding; a
string cut short by ``-s`` ends in ``"..."...``. With ``-yy`` a socket shows its inode
(``3<UDP:[12345]>``) or its addresses (``3<UDP:[127.0.0.1:40000->127.0.0.1:53]>``)."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

LOCAL_FAMILIES = frozenset({"AF_UNIX", "AF_LOCAL", "AF_NETLINK"})
INET_FAMILIES = frozenset({"AF_INET", "AF_INET6"})
DNS_PORT = 53
INET_KINDS = (
    "TCP",
    "UDP",
    "TCPv6",
    "UDPv6",
    "UDPLITE",
    "UDPLITEv6",
    "RAW",
    "RAWv6",
    "SCTP",
    "SCTPv6",
    "PING",
    "PINGv6",
    "MPTCP",
    "MPTCPv6",
)
DATAGRAM_KINDS = frozenset(
    {"UDP", "UDPv6", "UDPLITE", "UDPLITEv6", "RAW", "RAWv6", "PING", "PINGv6", "SCTP", "SCTPv6"}
)  # one send, one message; anything else is read as a stream

UNREADABLE_NAME = "an unreadable name"  # a look-up whose name cannot be read (bytes, or a note's host too long)
Address = tuple[str, str, int | None]  # (family, host, port); host and port only for AF_INET/AF_INET6

_HEX = r'"(?P<{0}>(?:\\x[0-9a-f]{{2}})*)"'
_FAMILY = re.compile(r"sa_family=(?P<family>AF_[A-Z0-9_]+|0x[0-9a-f]+|\d+)")
_V4 = re.compile(r"sa_family=AF_INET, sin_port=htons\((?P<port>\d+)\), sin_addr=inet_addr\(" + _HEX.format("a") + r"\)")
_V6 = re.compile(r"sa_family=AF_INET6, sin6_port=htons\((?P<port>\d+)\)[^}]*?inet_pton\(AF_INET6, " + _HEX.format("a"))
_FD = re.compile(r"^\d+<(?P<kind>[A-Za-z0-9-]+):\[(?:(?P<inode>\d+)|(?P<ends>[^\]]*))\]")
_PEER = re.compile(r"->\[?(?P<host>[0-9a-fA-F:.]+?)\]?:(?P<port>\d+)$")
FDS = re.compile(r"\d+<([A-Za-z0-9-]+):\[(\d+)\]>")  # every socket a call names (kind, inode)
FIRST_ARG = re.compile(r"^(?P<family>[A-Z0-9_]+|0x[0-9a-f]+|\d+)[,\s]")
STRING = re.compile(_HEX.format("s") + r"(?P<cut>\.\.\.)?")
_IOV = re.compile(r"iov_base=" + _HEX.format("s") + r"(?P<cut>\.\.\.)?")
_BUFFER = re.compile(r"^\d+(?:<(?:[^<>]|<[^<>]*>)*>)?, " + _HEX.format("s") + r"(?P<cut>\.\.\.)?")  # the 2nd argument
_SENDTO_UNREAD = re.compile(r", 0x[0-9a-f]+, [1-9]\d*\)(?: = |$)")  # sendto's address shown as a pointer
_MMSG_UNREAD = re.compile(r"^\d+(?:<(?:[^<>]|<[^<>]*>)*>)?, 0x[0-9a-f]+,")  # sendmmsg's vector shown as a pointer


@dataclass(frozen=True)
class Note:
    """One note of the watch hook (the engine's own word: it adds a frame, never names or hides anything)."""

    event: str
    host: str | None
    port: int | str | None
    frames: tuple[str, ...]
    pid: int


def unhex(s: str) -> bytes:
    return bytes.fromhex(s.replace("\\x", ""))


def text(s: str) -> str:
    return unhex(s).decode("utf-8", "replace")


def note(pid: int, payload: str) -> Note | None:
    """The watch hook's note carried in a marker path (base64 of its JSON), or None."""
    try:
        d = json.loads(base64.urlsafe_b64decode(payload.encode("ascii") + b"=="))
        port = d.get("port")
        host = d.get("host")
        return Note(
            str(d["event"])[:64],
            None if host is None else str(host) if len(str(host)) <= 255 else UNREADABLE_NAME,  # never cut short
            port if isinstance(port, int | None) else str(port)[:32],
            tuple(str(x)[:300] for x in d.get("frames", [])[:8]),
            pid,
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def addresses(args: str) -> list[Address]:
    """Every socket address in a call's arguments: (family, host, port); host and port only for AF_INET/6."""
    out: list[Address] = []
    v4 = {m.start(): m for m in _V4.finditer(args)}
    v6 = {m.start(): m for m in _V6.finditer(args)}
    for m in _FAMILY.finditer(args):
        fam = m["family"]
        got = v4.get(m.start()) or v6.get(m.start())
        if got is not None:
            out.append((fam, text(got["a"]), int(got["port"])))
        elif fam in INET_FAMILIES:
            out.append((fam, "?", None))  # an Internet address strace printed in a way not read here
        else:
            out.append((fam, "-", None))
    return out


def _payload(strings: Sequence[re.Match[str]]) -> tuple[bytes, bool]:
    """The bytes of a buffer strace showed as ``strings`` (an iovec's, in order): (data, shown whole). A
    string cut short by ``-s`` ends what can be read: the bytes after it are not the ones that followed."""
    data = b""
    for m in strings:
        data += unhex(m["s"])
        if m["cut"]:
            return data, False
    return data, True


def messages(call: str, args: str, family: str = "AF_INET") -> list[tuple[list[Address], bytes, bool]]:
    """What a sending call sends, message by message: (the addresses it names, the bytes, shown whole).
    ``sendto`` and ``write``: the buffer, their second argument; ``sendmsg`` and the ``writev`` family: the
    ``iov_base`` strings only (``msg_name``'s ``inet_addr("...")`` comes first and is no data); ``sendmmsg``:
    each ``msg_hdr`` on its own, with its own address. A buffer strace could not read is no bytes; an
    address it could not read (a pointer where ``msg_name`` or sendto's address should be, a ``sendmmsg``
    vector shown as a pointer) is ``(family, "?", None)``: somewhere, not the socket's peer."""
    unread: Address = (family, "?", None)
    if call == "sendmmsg":
        if _MMSG_UNREAD.match(args):
            return [([unread], b"", False)]
        return [
            (addresses(part) or ([unread] if "msg_name=0x" in part else []), *_payload(list(_IOV.finditer(part))))
            for part in args.split("{msg_hdr=")[1:]
        ]
    if call in ("sendmsg", "writev", "pwritev", "pwritev2"):
        addrs = addresses(args) or ([unread] if call == "sendmsg" and "msg_name=0x" in args else [])
        return [(addrs, *_payload(list(_IOV.finditer(args))))]
    first = _BUFFER.match(args)
    addrs = (addresses(args) or ([unread] if _SENDTO_UNREAD.search(args) else [])) if call == "sendto" else []
    return [(addrs, *_payload([first] if first else []))]


def socket_of(args: str) -> tuple[str | None, str | None, Address | None]:
    """The first argument's socket, as ``-yy`` shows it: (kind, inode, the peer where strace shows one)."""
    fd = _FD.match(args)
    if fd is None:
        return None, None, None
    if fd["inode"]:
        return fd["kind"], fd["inode"], None
    peer = _PEER.search(fd["ends"] or "")
    if peer is None:
        return fd["kind"], None, None
    fam = "AF_INET6" if fd["kind"].endswith("v6") else "AF_INET"
    return fd["kind"], None, (fam, peer["host"], int(peer["port"]))


def result(args: str) -> int | None:
    """A call's return value (None where it never returned: ``= ?``, or a call that never resumed)."""
    at = args.rfind(") = ")
    m = re.match(r"-?\d+", args[at + 4 :]) if at >= 0 else None
    return int(m[0]) if m else None
