"""Progress for long work: a live bar on a terminal, plain lines with a heartbeat elsewhere, nothing under --json.

A long step is never silent: off a terminal, each phase prints a line when it starts and one every
``heartbeat`` seconds. Two counts can share a line (``alongside``: downloading while packing). Every text
shown passes through ``lockbuild.text.for_terminal`` (names and URLs come from outside)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from lockbuild.text import for_terminal

BAR_WIDTH = 24
HEARTBEAT = 10.0  # seconds between lines when the output is not a terminal (tests set it lower)
_DONE_WORDS = {"downloading": "downloaded", "fetching": "fetched", "packing": "packed"}


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


def _clock(seconds: float) -> str:
    s = max(0, round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


@dataclass
class _Count:
    """One thing being counted: its bytes and files done of total, since when."""

    label: str  # "packing", "downloading"
    word: str  # what a done byte is: "packed", "downloaded"
    total: int
    files: int
    started: float
    done: int = 0
    files_done: int = 0
    finished: bool = False

    def rate(self, now: float) -> float:
        elapsed = now - self.started
        return self.done / elapsed if elapsed > 0 else 0.0

    def eta(self, now: float) -> float | None:
        rate = self.rate(now)
        return (self.total - self.done) / rate if rate > 0 and self.done < self.total else None

    def fraction(self) -> float:
        return min(1.0, self.done / self.total) if self.total > 0 else (1.0 if self.finished else 0.0)


def _eta(counts: list[_Count], now: float) -> str:
    """The ETA of the first count still under way (the download, which the packing waits on)."""
    for c in counts:
        if c.done < c.total:
            eta = c.eta(now)
            return _clock(eta) if eta is not None else "--:--"
    return "--:--"


def _bar(counts: list[_Count], now: float) -> str:
    frac = sum(c.fraction() for c in counts) / len(counts)
    filled = int(frac * BAR_WIDTH)
    head = f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {frac * 100:3.0f}%  "
    if len(counts) == 1:
        c = counts[0]
        return (
            f"{head}{_size(c.done)}/{_size(c.total)}  {_size(c.rate(now))}/s  ETA {_eta(counts, now)}  "
            f"{c.files_done}/{c.files} files"
        )
    parts = [f"{c.word} {_size(c.done)}/{_size(c.total)} {_size(c.rate(now))}/s" for c in counts]
    return f"{head}{'  '.join(parts)}  ETA {_eta(counts, now)}  {counts[-1].files_done}/{counts[-1].files} files"


def _fields(counts: list[_Count], now: float) -> str:
    """The heartbeat's fields: the bar's, in words."""
    if len(counts) == 1:
        c = counts[0]
        return (
            f"{c.files_done}/{c.files} files, {_size(c.done)} of {_size(c.total)} at {_size(c.rate(now))}/s, "
            f"ETA {_eta(counts, now)}"
        )
    parts = [
        f"{c.word} {c.files_done}/{c.files} files, {_size(c.done)} of {_size(c.total)} at {_size(c.rate(now))}/s"
        for c in counts
    ]
    return f"{'; '.join(parts)}; ETA {_eta(counts, now)}"


def bar_line(label: str, done: int, total: int, files_done: int, files: int, elapsed: float) -> str:
    """One line of a byte-counting phase: bar, percent, bytes, rate, ETA and files (pure, for tests)."""
    count = _Count(label, label, total, files, started=0.0, done=done, files_done=files_done)
    return f"{label} {_bar([count], elapsed)}"


class Progress:
    """Reports phases and byte counts. ``enabled=False`` silences it (for --json and libraries)."""

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        enabled: bool = True,
        heartbeat: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.live = enabled and self.stream.isatty()
        self.heartbeat = HEARTBEAT if heartbeat is None else heartbeat
        self._now = clock
        self._lock = threading.Lock()
        self._main: _Count | None = None  # the count started by start(), until finish()
        self._side: _Count | None = None  # a count running alongside it (downloads while packing)
        self._drawn = 0.0
        self._phase: str | None = None  # the work under way, for the heartbeat
        self._phase_started = 0.0
        self._detail: Callable[[], str] | None = None  # what the phase's heartbeat says instead of "still working"
        self._last_line = 0.0
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def quiet(cls) -> Progress:
        return cls(enabled=False)

    def phase(self, text: str, *, detail: Callable[[], str] | None = None) -> None:
        """Start a step: one line now, then a heartbeat (or a live timer) until the next phase or finish;
        ``detail()`` (e.g. :func:`written_of`) says how far it is, where the step can tell."""
        self._line(text, ongoing=True)
        with self._lock:
            self._detail = detail

    def note(self, text: str) -> None:
        """One line that starts no step (a result, a warning)."""
        self._line(text, ongoing=False)

    def start(self, label: str, *, total_bytes: int, files: int) -> None:
        with self._lock:
            label = for_terminal(label)
            self._main = _Count(label, _DONE_WORDS.get(label, "done"), total_bytes, files, self._now())
            shown = self._label()
        self.phase(f"{shown}: {files} file(s), {_size(total_bytes)}")

    def advance(self, n: int) -> None:
        with self._lock:
            if self._main is not None:
                self._main.done += n
            self._draw()

    def skip(self, n: int) -> None:
        """A whole file of ``n`` bytes that needed no work (a cache hit): done, for a count of everything."""
        self.advance(n)
        self.file_done()

    def file_done(self) -> None:
        with self._lock:
            if self._main is not None:
                self._main.files_done += 1
                self._draw(force=self._main.files_done == self._main.files)

    def finish(self, summary: str | None = None) -> None:
        with self._lock:
            self._clear()
            self._main = None
            self._phase = None
        if summary:
            self.note(summary)

    def alongside(self, label: str, word: str) -> Progress:
        """A count shown in this one's line while it runs (``label`` "downloading", ``word`` "downloaded"):
        what is reported into the returned Progress is counted here, never printed on its own. Its cache
        hits (``skip``) are taken off its total: it counts only the bytes really moving."""
        return _Alongside(self, for_terminal(label), for_terminal(word))

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
    def _counts(self) -> list[_Count]:
        """What the line shows: the side count (while it has anything to count), then the main one."""
        side = self._side
        idle = side is None or (side.done == 0 and (side.finished or side.total <= 0))  # a warm build
        shown = [side] if side is not None and not idle else []
        return [*shown, self._main] if self._main is not None else shown

    def _label(self) -> str:
        return " and ".join(c.label for c in self._counts())

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
                self._phase, self._phase_started, self._detail = text, now, None
            elif self._main is None:
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
                    if self.live and self._main is not None:
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
        counts = self._counts()
        if self._main is not None:
            detail, label = _fields(counts, now), self._label()
        else:
            detail, label = self._phase_detail(), self._phase or ""
        self.stream.write(f"lockbuild: {label}: {elapsed:.0f} s, {detail}\n")
        self.stream.flush()
        self._last_line = now

    def _phase_detail(self) -> str:
        if self._detail is None:
            return "still working"
        try:
            return for_terminal(self._detail())
        except OSError:
            return "still working"

    def _draw_timer(self, now: float) -> None:
        more = f", {self._phase_detail()}" if self._detail is not None else ""
        self.stream.write(f"\r\x1b[K{self._phase}: {_clock(now - self._phase_started)}{more}")
        self.stream.flush()
        self._drawn = now

    def _draw(self, force: bool = False) -> None:
        if not self.live or self._main is None:
            return
        now = self._now()
        if not force and now - self._drawn < 0.1:
            return
        self._drawn = now
        self.stream.write(f"\r\x1b[K{self._label()} {_bar(self._counts(), now)}")
        self.stream.flush()

    def _clear(self) -> None:
        if self.live and self._drawn:
            self.stream.write("\r\x1b[K")
            self._drawn = 0.0


class _Alongside(Progress):
    """A count reported into another Progress's line (see ``Progress.alongside``); prints nothing itself."""

    def __init__(self, parent: Progress, label: str, word: str) -> None:
        super().__init__(parent.stream, enabled=False, heartbeat=0, clock=parent._now)
        self.parent = parent
        self.side_label = label
        self.word = word

    def start(self, label: str, *, total_bytes: int, files: int) -> None:
        p = self.parent
        with p._lock:
            p._side = _Count(self.side_label, self.word, total_bytes, files, p._now())

    def advance(self, n: int) -> None:
        p = self.parent
        with p._lock:
            if p._side is not None:
                p._side.done += n
                p._draw()

    def skip(self, n: int) -> None:
        p = self.parent
        with p._lock:
            if p._side is not None:
                p._side.total -= n
                p._side.files -= 1

    def file_done(self) -> None:
        p = self.parent
        with p._lock:
            if p._side is not None:
                p._side.files_done += 1

    def finish(self, summary: str | None = None) -> None:
        p = self.parent
        with p._lock:
            if p._side is not None:
                p._side.finished = True

    def close(self) -> None:
        """Take the count out of the parent's line."""
        p = self.parent
        with p._lock:
            p._side = None


def written_of(path: Path, expected: int) -> Callable[[], str]:
    """A phase's detail for a tool writing one file from ``expected`` bytes of input: its bytes so far
    against that, e.g. ``1.2 GB written, from 3.4 GB of files`` (compressed, it ends smaller)."""

    def detail() -> str:
        try:
            got = path.stat().st_size
        except FileNotFoundError:
            got = 0
        return f"{_size(got)} written, from {_size(expected)} of files"

    return detail
