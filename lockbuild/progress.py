"""Progress for long work: a live line on a terminal, plain phase lines elsewhere, nothing under --json."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


class Progress:
    """Reports phases and byte counts. ``enabled=False`` silences it (for --json and libraries)."""

    def __init__(self, stream: TextIO | None = None, *, enabled: bool = True) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.live = enabled and self.stream.isatty()
        self._lock = threading.Lock()
        self._label = ""
        self._done = 0
        self._total = 0
        self._files_done = 0
        self._files = 0
        self._started = 0.0
        self._drawn = 0.0

    @classmethod
    def quiet(cls) -> Progress:
        return cls(enabled=False)

    def phase(self, text: str) -> None:
        if self.enabled:
            with self._lock:
                self._clear()
                self.stream.write(f"lockbuild: {text}\n")
                self.stream.flush()

    def start(self, label: str, *, total_bytes: int, files: int) -> None:
        with self._lock:
            self._label, self._total, self._files = label, total_bytes, files
            self._done = self._files_done = 0
            self._started = time.monotonic()
        self.phase(f"{label}: {files} file(s), {_size(total_bytes)}")

    def advance(self, n: int) -> None:
        with self._lock:
            self._done += n
            self._draw()

    def file_done(self) -> None:
        with self._lock:
            self._files_done += 1
            self._draw(force=self._files_done == self._files)

    def finish(self, summary: str | None = None) -> None:
        with self._lock:
            self._clear()
        if summary:
            self.phase(summary)

    def _draw(self, force: bool = False) -> None:
        if not self.live:
            return
        now = time.monotonic()
        if not force and now - self._drawn < 0.1:
            return
        self._drawn = now
        rate = self._done / max(now - self._started, 1e-6)
        self.stream.write(
            f"\r\x1b[K{self._label}: {self._files_done}/{self._files} files, "
            f"{_size(self._done)}/{_size(self._total)}, {_size(rate)}/s"
        )
        self.stream.flush()

    def _clear(self) -> None:
        if self.live and self._drawn:
            self.stream.write("\r\x1b[K")
            self._drawn = 0.0
