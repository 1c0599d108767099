"""The name a DNS query asks for, read from the bytes sent (pure). What cannot be read is no name at all.

The name is read strictly, as a server reads its one question (one question, no compression, bounded
labels); a label's own dots and odd bytes are escaped as in a zone file (``\\.``, ``\\DDD``), so no label
passes for a name of several. :class:`DnsStream` joins a TCP stream's messages."""

from __future__ import annotations

from dataclasses import dataclass

_PLAIN = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")
MAX_STREAM = 1 << 17  # bytes of a stream kept while a message is incomplete (two of the largest messages)


def _label(raw: bytes) -> str:
    return "".join(chr(b) if b in _PLAIN else f"\\{b:03d}" if b != 0x2E else "\\." for b in raw)


def question(message: bytes) -> str | None:
    """The name of the one question of ``message`` (a DNS message, or a prefix of one long enough to hold
    its question), ``"."`` for the root; None if it is not a query a server would answer for one name."""
    if len(message) < 12 or int.from_bytes(message[4:6], "big") != 1:
        return None
    labels: list[str] = []
    i, size = 12, 0
    while i < len(message):
        n = message[i]
        if n == 0:
            return (".".join(labels) or ".") if i + 5 <= len(message) else None  # the type and class follow
        if n > 63:  # a compression pointer (0xc0) or a reserved label type: never in a plain question
            return None
        size += n + 1
        if size > 254 or i + 1 + n > len(message):
            return None
        labels.append(_label(message[i + 1 : i + 1 + n]))
        i += 1 + n
    return None


@dataclass
class DnsStream:
    """The bytes sent on one stream socket to port 53, cut into messages (a two-byte length each).
    ``broken``: a send was not shown whole (strace's ``-s``), so nothing after it can be read."""

    pending: bytes = b""
    broken: bool = False
    messages: int = 0  # messages read whole so far

    def send(self, data: bytes, whole: bool) -> list[str | None]:
        """The names of the messages this send completed (None for one that cannot be read)."""
        if self.broken:
            return [None]
        self.pending += data
        out: list[str | None] = []
        while len(self.pending) >= 2:
            size = int.from_bytes(self.pending[:2], "big")
            if len(self.pending) < 2 + size:
                break
            out.append(question(self.pending[2 : 2 + size]))
            self.pending = self.pending[2 + size :]
            self.messages += 1
        if not whole or len(self.pending) > MAX_STREAM:
            self.broken = True
            out.append(None)
        return out

    def left(self) -> list[str | None]:
        """At the end: a message begun and never finished (its name if its question was sent), or a stream
        on which no message was ever sent whole (a look-up that never showed its name)."""
        if self.broken:
            return []
        if self.pending:
            return [question(self.pending[2:])]
        return [] if self.messages else [None]
