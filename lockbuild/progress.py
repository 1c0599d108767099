"""Progress for long work: a live bar on a terminal, plain lines with a heartbeat elsewhere, nothing under --json.

On a terminal, a phase that counts bytes draws a bar with its rate and ETA, and a phase that cannot count
(resolving, uv installing) shows how long it has run. Elsewhere (CI logs, pipes) every phase prints one
line when it starts and, while it runs, a heartbeat line every ``heartbeat`` seconds, so a long step is
never silent: ``lockbuild: installing packages with uv: 61 s, still working``. Every text shown passes
through ``lockbuild.text.for_terminal`` (names and URLs come from outside).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

from lockbuild.text import for_terminal

BAR_WIDTH = 24


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


def _clock(seconds: float) -> str:
    s = max(0, round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def bar_line(label: str, done: int, total: int, files_done: int, files: int, elapsed: float) -> str:
    """One line of a byte-counting phase: bar, percent, bytes, rate, ETA and files (pure, for tests)."""
    frac = min(1.0, done / total) if total > 0 else 0.0
    filled = int(frac * BAR_WIDTH)
    rate = done / elapsed if elapsed > 0 else 0.0
    eta = _clock((total - done) / rate) if rate > 0 and done < total else "--:--"
    return (
        f"{label} [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {frac * 100:3.0f}%  "
        f"{_size(done)}/{_size(total)}  {_size(rate)}/s  ETA {eta}  {files_done}/{files} files"
    )


class Progress:
    """Reports phases and byte counts. ``enabled=False`` silences it (for --json and libraries)."""

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        enabled: bool = True,
        heartbeat: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.live = enabled and self.stream.isatty()
        self.heartbeat = heartbeat
        self._now = clock
        self._lock = threading.Lock()
        self._label = ""
        self._counting = False
        self._done = 0
        self._total = 0
        self._files_done = 0
        self._files = 0
        self._started = 0.0
        self._drawn = 0.0
        self._phase: str | None = None  # the work under way, for the heartbeat
        self._phase_started = 0.0
        self._last_line = 0.0
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def quiet(cls) -> Progress:
        return cls(enabled=False)

    def phase(self, text: str) -> None:
        """Start a step: one line now, then a heartbeat (or a live timer) until the next phase or finish."""
        self._line(text, ongoing=True)

    def note(self, text: str) -> None:
        """One line that starts no step (a result, a warning)."""
        self._line(text, ongoing=False)

    def start(self, label: str, *, total_bytes: int, files: int) -> None:
        with self._lock:
            self._label, self._total, self._files = for_terminal(label), total_bytes, files
            self._done = self._files_done = 0
            self._started = self._now()
            self._counting = True
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
            self._counting = False
            self._phase = None
        if summary:
            self.note(summary)

    def close(self) -> None:
        """Stop the heartbeat (it is a daemon thread, so a process that exits needs no call)."""
        with self._lock:
            self._phase = None
            thread, self._thread = self._thread, None
        self._wake.set()
        if thread is not None:
            thread.join(timeout=1.0)
        self._wake.clear()

    # --------------------------------------------------------------------------------- internals
    def _line(self, text: str, *, ongoing: bool) -> None:
        if not self.enabled:
            return
        text = for_terminal(text)  # names, URLs and messages from outside: no escape sequence reaches the terminal
        with self._lock:
            self._clear()
            self.stream.write(f"lockbuild: {text}\n")
            self.stream.flush()
            now = self._now()
            self._last_line = now
            if ongoing:
                self._phase, self._phase_started = text, now
            elif not self._counting:
                self._phase = None
            if ongoing and self._thread is None and self.heartbeat > 0:
                self._thread = threading.Thread(target=self._beat, name="lockbuild-progress", daemon=True)
                self._thread.start()

    def _beat(self) -> None:
        tick = min(1.0, self.heartbeat) if self.live else self.heartbeat / 4
        while not self._wake.wait(tick):
            with self._lock:
                if self._thread is not threading.current_thread():
                    return
                if self._phase is None:
                    continue
                now = self._now()
                try:
                    if self.live and self._counting:
                        self._draw(force=True)
                    elif self.live:
                        self._draw_timer(now)
                    elif now - self._last_line >= self.heartbeat:
                        self._heartbeat_line(now)
                except (OSError, ValueError):  # the stream was closed under us: nobody is reading
                    self._thread = None
                    return

    def _heartbeat_line(self, now: float) -> None:
        elapsed = now - self._phase_started
        if self._counting:
            detail = f"{self._files_done}/{self._files} files, {_size(self._done)} of {_size(self._total)}"
            label = self._label
        else:
            detail, label = "still working", self._phase or ""
        self.stream.write(f"lockbuild: {label}: {elapsed:.0f} s, {detail}\n")
        self.stream.flush()
        self._last_line = now

    def _draw_timer(self, now: float) -> None:
        self.stream.write(f"\r\x1b[K{self._phase}: {_clock(now - self._phase_started)}")
        self.stream.flush()
        self._drawn = now

    def _draw(self, force: bool = False) -> None:
        if not self.live:
            return
        now = self._now()
        if not force and now - self._drawn < 0.1:
            return
        self._drawn = now
        line = bar_line(self._label, self._done, self._total, self._files_done, self._files, now - self._started)
        self.stream.write(f"\r\x1b[K{line}")
        self.stream.flush()

    def _clear(self) -> None:
        if self.live and self._drawn:
            self.stream.write("\r\x1b[K")
            self._drawn = 0.0
