"""The bounds of every exchange with a registry, what its transport may raise, and how a failed answer reads.

``Transport`` holds the named bounds; ``TRANSPORT_ERRORS`` is every exception httpx and the socket may raise,
each turned into a ``RegistryError`` by ``registry/client.py``; ``TransferCut`` is a body that broke off.
``error_text`` puts a registry's error answer into one short line (its first 300 characters at most)."""

from __future__ import annotations

import http
import ssl
from dataclasses import dataclass, field

import httpcore
import httpx

from lockbuild.documents import loads_json
from lockbuild.errors import LockbuildError
from lockbuild.limits import MiB
from lockbuild.registry.reference import RegistryError
from lockbuild.registry.retry import DEFAULT_RETRY, RETRY_ENV, RetryPolicy

MAX_OCI_MANIFEST = 64 << 20
BUSY_TIP = (
    "The registry (or a mirror or proxy in front of it) is overloaded or limits requests: run the same command "
    f"again later (a pull resumes what it already has), pull from a mirror nearer the node, or give it longer with "
    f"{RETRY_ENV}=SECONDS."
)
FAIL_TIP = "Check the registry address, that it is up, and your access to the repository."
# What the transport may raise (httpx wraps socket and ssl errors; the rest is belt and braces).
TRANSPORT_ERRORS = (
    httpx.HTTPError,
    httpx.InvalidURL,
    httpx.StreamError,
    httpcore.TimeoutException,
    httpcore.NetworkError,
    httpcore.ProtocolError,
    ssl.SSLError,
    OSError,
    ValueError,
)


class TransferCut(RegistryError):
    """An answer's body broke off (the connection closed or failed mid-body), not on a deadline or a stop:
    a blob can be asked for again from the byte received. Given up, it is shown as the RegistryError it is."""

    default_tip = "Run the same command again: a pull resumes a cut blob at the byte received."

    def plain(self) -> RegistryError:
        return RegistryError(self.message, tip="Run the same command again: a pull resumes where this one stopped.")


@dataclass(frozen=True)
class Transport:
    """The time and size bounds of every exchange with a registry (named settings; the tests shorten them).

    Every exchange has an overall deadline, enforced at every socket read, write and connect (so a registry
    that sends one byte every 2 s fails on time): a small request ``request_seconds``, a blob of ``n`` bytes
    ``blob_seconds + n / min_rate``, no one read, write or connect more than ``io_seconds``. Every answer is
    read as a stream with a cap (a ``Content-Length`` over it is refused unread), raw, so nothing is
    decompressed past a cap."""

    request_seconds: float = 60.0  # a small request, whole: connect, send, headers and body
    blob_seconds: float = 60.0  # a blob's fixed allowance ...
    min_rate: float = 1_000_000.0  # ... plus its size at this many bytes per second
    io_seconds: float = 30.0  # the longest any one read, write or connect may wait
    max_manifest: int = MAX_OCI_MANIFEST
    max_token: int = MiB
    max_error: int = 16 << 10
    max_depth: int = 32  # JSON nesting (an OCI manifest nests 3 deep)
    retry: RetryPolicy = field(default=DEFAULT_RETRY)  # 429 / 502 / 503 / 504: when to ask again (registry/retry.py)

    def blob_deadline(self, size: int) -> float:
        return self.blob_seconds + max(0, size) / self.min_rate

    def deadline_tip(self) -> str:
        """What to do when an exchange ran past its deadline: the bounds it had, and run again."""
        return (
            f"Check the registry and the network to it (a request must finish within {self.request_seconds:g} s, "
            f"a blob within {self.blob_seconds:g} s plus its size at {self.min_rate / 1e6:g} MB/s); then run the "
            "same command again (a pull resumes what it already has)."
        )


DEFAULT_TRANSPORT = Transport()


def phrase(status: int) -> str:
    """The standard reason phrase of ``status`` (never the registry's own words)."""
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return ""


def error_text(body: bytes) -> str:
    """An error answer as one short line: the OCI ``errors`` messages when it has them, else its text."""
    try:
        doc = loads_json(body, what="the error", max_bytes=len(body), max_depth=8, error=LockbuildError)
        errors = doc.get("errors") if isinstance(doc, dict) else None
        if isinstance(errors, list) and errors:
            text = "; ".join(
                f"{e.get('code', '')} {e.get('message', '')}".strip() for e in errors[:5] if isinstance(e, dict)
            )
            if text:
                return text[:300]
    except LockbuildError:
        pass
    return " ".join(body[:300].decode("utf-8", "replace").split())
