"""A file that reaches the disk while it is still being written.

``EarlyWriteback`` asks the kernel to start writing each finished stretch (``sync_file_range``, which does
not wait), so the bundle's final fsync waits for the last stretch only, not gigabytes of page cache. It
changes no byte and no check; where the call is missing (not Linux) it is a plain file."""

from __future__ import annotations

import ctypes
import functools
import sys
from collections.abc import Callable
from typing import BinaryIO, cast

STRETCH = 64 << 20
_SYNC_FILE_RANGE_WRITE = 2  # <linux/fs.h>: start write-out of dirty pages in the range, do not wait


@functools.cache
def _sync_file_range() -> Callable[[int, int, int, int], int] | None:
    if sys.platform != "linux":
        return None
    try:
        call = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    call.restype = ctypes.c_int
    return cast(Callable[[int, int, int, int], int], call)


class EarlyWriteback:
    """Writes to ``raw`` (a buffered file); every ``stretch`` bytes, starts their write-out to disk."""

    def __init__(self, raw: BinaryIO, stretch: int = STRETCH) -> None:
        self.raw = raw
        self.stretch = stretch
        self.started = 0  # bytes whose write-out was started
        self.written = 0
        self._start = _sync_file_range()

    def write(self, data: bytes) -> int:
        self.raw.write(data)  # a BufferedWriter writes the whole chunk or raises
        self.written += len(data)
        if self._start is not None and self.written - self.started >= self.stretch:
            self.raw.flush()
            self._start(self.raw.fileno(), self.started, self.written - self.started, _SYNC_FILE_RANGE_WRITE)
            self.started = self.written  # advice only: a failure here is the final fsync's to report
        return len(data)
