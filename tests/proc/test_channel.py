"""Threads that hand a stream on (lockbuild.proc.channel), the bundle's output sink (digest.HashingWriter) and its
file (writeback.EarlyWriteback): order kept, memory bounded, a failure on any thread raised on the
caller's, no thread left behind, every byte written."""

from __future__ import annotations

import errno
import hashlib
import io
import itertools
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from lockbuild.digest import HashingWriter
from lockbuild.fsio import writeback
from lockbuild.fsio.writeback import EarlyWriteback
from lockbuild.proc.channel import Cancelled, Channel, End, start


def until(condition: Callable[[], bool], wait: float = 10.0) -> bool:
    deadline = time.monotonic() + wait
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


PIPELINE = ("lockbuild-test", "lockbuild-read", "lockbuild-out", "lockbuild-sha256", "lockbuild-blake2b")


def no_thread_left() -> bool:
    return until(lambda: not any(t.name in PIPELINE for t in threading.enumerate()))


def test_items_arrive_in_order_then_end() -> None:
    ch: Channel[int] = Channel(2)
    start("lockbuild-test", lambda out: [out.put(i) for i in range(100)], ch)
    got = []
    while not isinstance(item := ch.get(), End):
        got.append(item)
    assert got == list(range(100))


def test_a_producer_never_runs_more_than_depth_items_ahead() -> None:
    ch: Channel[int] = Channel(3)
    sent = []

    def produce(out: Channel[int]) -> None:
        for i in range(10):
            out.put(i)
            sent.append(i)

    start("lockbuild-test", produce, ch)
    assert until(lambda: len(sent) == 3)
    time.sleep(0.2)
    assert len(sent) == 3  # the fourth put waits for the consumer
    assert ch.get() == 0
    assert until(lambda: len(sent) == 4)
    time.sleep(0.2)
    assert len(sent) == 4
    ch.stop()
    assert no_thread_left()


def test_a_producers_failure_is_raised_after_the_items_before_it() -> None:
    class Boom(Exception):
        pass

    def produce(out: Channel[int]) -> None:
        out.put(1)
        out.put(2)
        raise Boom("the third item could not be read")

    ch: Channel[int] = Channel(8)
    start("lockbuild-test", produce, ch)
    assert ch.get() == 1
    assert ch.get() == 2
    with pytest.raises(Boom, match="third item"):
        ch.get()


def test_stop_wakes_a_blocked_producer_and_consumer() -> None:
    full: Channel[int] = Channel(1)
    full.put(0)
    empty: Channel[int] = Channel(1)
    outcomes: list[str] = []

    def wait_on(call: object) -> None:
        try:
            call()  # type: ignore[operator]
        except Cancelled:
            outcomes.append("cancelled")

    threads = [
        threading.Thread(target=wait_on, args=(lambda: full.put(1),)),
        threading.Thread(target=wait_on, args=(empty.get,)),
    ]
    for t in threads:
        t.start()
    time.sleep(0.1)
    full.stop()
    empty.stop()
    for t in threads:
        t.join(5)
    assert outcomes == ["cancelled", "cancelled"]


# --- the bundle's output sink -------------------------------------------------------------------------


def test_hashing_writer_writes_and_hashes_every_chunk_in_order() -> None:
    out = io.BytesIO()
    sink = HashingWriter(out, depth=2)
    chunks = [bytes([i]) * (1000 + 4000 * i) for i in range(50)]
    for c in chunks:
        sink.write(c)
    sink.write(memoryview(b"tail"))  # not bytes: copied once, then shared
    size, sha, b2 = sink.finish()
    data = b"".join(chunks) + b"tail"
    assert out.getvalue() == data
    assert (size, sha, b2) == (len(data), hashlib.sha256(data).hexdigest(), hashlib.blake2b(data).digest())
    assert no_thread_left()


class FullDisk(io.RawIOBase):
    """A file that takes ``room`` bytes, then fails as a full disk does."""

    def __init__(self, room: int) -> None:
        self.room = room

    def writable(self) -> bool:
        return True

    def write(self, data: object) -> int:  # type: ignore[override]
        n = len(data)  # type: ignore[arg-type]
        if n > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= n
        return n


def test_an_output_error_is_raised_on_the_writers_thread_and_stops_the_others() -> None:
    sink = HashingWriter(FullDisk(10_000), depth=2)  # type: ignore[arg-type]
    with pytest.raises(OSError, match="No space left"):
        for _ in range(1000):  # the error stops the producer long before the end
            sink.write(b"x" * 4096)
        sink.finish()
    sink.abort()
    assert no_thread_left()


def test_an_aborted_writer_leaves_no_thread() -> None:
    sink = HashingWriter(io.BytesIO(), depth=1)
    sink.write(b"some bytes")
    sink.abort()
    assert no_thread_left()


def test_early_writeback_writes_every_byte_and_starts_each_stretch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bundle's file asks the kernel to start writing each finished stretch (the final fsync then
    waits for the last one only); every byte is written, in order, whatever the calls."""
    if sys.platform == "linux":
        assert writeback._sync_file_range() is not None  # the real call is found where it exists
    started: list[tuple[int, int]] = []
    monkeypatch.setattr(writeback, "_sync_file_range", lambda: lambda fd, offset, n, flags: started.append((offset, n)))
    data = bytes(range(256)) * 400
    path = tmp_path / "bundle"
    with path.open("wb") as raw:
        out = EarlyWriteback(raw, stretch=10_000)
        for i in range(0, len(data), 3_000):
            assert out.write(data[i : i + 3_000]) == len(data[i : i + 3_000])
    assert path.read_bytes() == data
    assert started[0][0] == 0 and all(n >= 10_000 for _, n in started)
    assert all(a + n == b for (a, n), (b, _) in itertools.pairwise(started))
    assert sum(n for _, n in started) > len(data) - 10_000
