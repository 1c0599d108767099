"""Bounded hand-offs between threads, for streams that several stages work on at once.

A ``Channel`` is a FIFO of at most ``depth`` items: a producer that runs ahead waits. Either side can
``stop`` it (``Cancelled``); a producer's failure (``fail``) reaches the consumer in order, the same
exception object. ``start`` runs a function on its own thread and turns its exception into such a failure."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Cancelled(Exception):
    """The other side of a channel stopped it (internal: never leaves lockbuild)."""


class End:
    """The marker ``get`` returns after the last item."""


class _Failed:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


END = End()  # the producer is done: ``get`` returns END after the last item


class Channel(Generic[T]):
    """A bounded FIFO between one producer and one consumer thread."""

    def __init__(self, depth: int) -> None:
        if depth < 1:
            raise ValueError("a channel holds at least one item")
        self._depth = depth
        self._items: deque[T | End | _Failed] = deque()
        self._cond = threading.Condition()
        self._stopped = False

    def put(self, item: T) -> None:
        """Hand ``item`` on, waiting while the channel is full; ``Cancelled`` once it is stopped."""
        with self._cond:
            while len(self._items) >= self._depth and not self._stopped:
                self._cond.wait()
            if self._stopped:
                raise Cancelled
            self._items.append(item)
            self._cond.notify_all()

    def close(self) -> None:
        """No more items: the consumer gets ``END`` after the last one."""
        self._append(END)

    def fail(self, exc: BaseException) -> None:
        """The producer failed: the consumer raises ``exc`` after the items sent before it."""
        self._append(_Failed(exc))

    def _append(self, item: End | _Failed) -> None:
        with self._cond:  # never waits: one marker past the bound, so a failing producer cannot hang
            if not self._stopped:
                self._items.append(item)
                self._cond.notify_all()

    def get(self) -> T | End:
        """The next item, or ``END``; raises the producer's exception, or ``Cancelled`` once stopped."""
        with self._cond:
            while not self._items and not self._stopped:
                self._cond.wait()
            if self._stopped:
                raise Cancelled
            item = self._items.popleft()
            self._cond.notify_all()
        if isinstance(item, _Failed):
            raise item.exc
        return item

    def stop(self) -> None:
        """Drop what is queued and wake both sides: their next ``put`` or ``get`` raises ``Cancelled``."""
        with self._cond:
            self._stopped = True
            self._items.clear()
            self._cond.notify_all()


def start(name: str, produce: Callable[[Channel[T]], None], channel: Channel[T]) -> threading.Thread:
    """Run ``produce(channel)`` on a daemon thread, then close the channel; an exception is sent down the
    channel with ``fail``. Daemon: a producer blocked outside the channel (waiting for a download that is
    being cancelled) never holds up the consumer's failure; it ends at its next ``put``."""

    def run() -> None:
        try:
            produce(channel)
        except Cancelled:
            return
        except BaseException as exc:  # handed to the consumer, which raises it
            channel.fail(exc)
            return
        channel.close()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread
