"""Deadlines at the socket: an httpx transport whose every read, write and connect asks a clock.

``Clock`` holds each thread's exchange deadline (``within``) and a stop shared by a command's threads; so a
registry that sends one byte every 2 s fails on time. ``Clock.pause`` is the one sleep of a retry: it ends
early when the command is stopped."""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpcore
import httpx

_WRITE_SLICE = 64 << 10  # writes are cut to this size, so the deadline is checked between slices


class Clock:
    """The deadline of the exchange each thread is in, and a stop shared by every thread of a command.

    ``budget`` is asked before every socket read, write and connect: it gives the time left (at most
    the per-operation timeout), or raises a timeout once the deadline has passed."""

    def __init__(self) -> None:
        self._local = threading.local()
        self.stopped: str | None = None
        self._woken = threading.Event()

    def stop(self, why: str) -> None:
        """Every later read, write, connect and pause of any thread fails (``why`` says why)."""
        self.stopped = why
        self._woken.set()

    def pause(self, seconds: float) -> bool:
        """Sleep ``seconds`` (a retry's wait), or less if the command is stopped meanwhile: False then."""
        if self.stopped is None:
            self._woken.wait(max(0.0, seconds))
        return self.stopped is None

    def _now(self) -> tuple[float, float] | None:
        value: tuple[float, float] | None = getattr(self._local, "deadline", None)
        return value

    @contextmanager
    def within(self, seconds: float) -> Iterator[None]:
        outer = self._now()
        mine = (time.monotonic() + seconds, seconds)
        self._local.deadline = mine if outer is None or mine[0] < outer[0] else outer
        try:
            yield
        finally:
            self._local.deadline = outer

    def expired(self) -> float | None:
        """The seconds the current exchange was given, if they have run out."""
        now = self._now()
        return now[1] if now is not None and time.monotonic() >= now[0] else None

    def budget(self, timeout: float | None, late: type[Exception]) -> float | None:
        if self.stopped is not None:
            raise httpcore.ReadError("stopped")
        now = self._now()
        if now is None:
            return timeout
        left = now[0] - time.monotonic()
        if left <= 0:
            raise late(f"the overall deadline of {now[1]:.0f} s has passed")
        return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream, clock: Clock) -> None:
        self._inner = inner
        self._clock = clock

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, self._clock.budget(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        view = memoryview(buffer)
        for at in range(0, len(view), _WRITE_SLICE):
            self._inner.write(bytes(view[at : at + _WRITE_SLICE]), self._clock.budget(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        budget = self._clock.budget(timeout, httpcore.ConnectTimeout)
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, budget), self._clock)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    def __init__(self, clock: Clock) -> None:
        self._inner = httpcore.SyncBackend()
        self._clock = clock

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.NetworkStream:
        budget = self._clock.budget(timeout, httpcore.ConnectTimeout)
        return _Stream(self._inner.connect_tcp(host, port, budget, local_address, socket_options), self._clock)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> httpcore.NetworkStream:
        budget = self._clock.budget(timeout, httpcore.ConnectTimeout)
        return _Stream(self._inner.connect_unix_socket(path, budget, socket_options), self._clock)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class ClockedTransport(httpx.HTTPTransport):
    """httpx's transport over a connection pool whose sockets answer to the clock."""

    def __init__(self, verify: ssl.SSLContext | bool, clock: Clock) -> None:
        context = verify if isinstance(verify, ssl.SSLContext) else httpx.create_ssl_context(verify=verify)
        super().__init__(verify=context)
        limits = httpx.Limits()  # httpx's own defaults, on our pool
        self._pool = httpcore.ConnectionPool(
            ssl_context=context,
            network_backend=_Backend(clock),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
        )
