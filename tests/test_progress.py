"""Progress a person sees: a bar with rate and ETA on a terminal, a heartbeat in logs, silence under --json."""

from __future__ import annotations

import io
import time

from lockbuild.progress import Progress, bar_line


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _wait_for(predicate: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(predicate) and predicate():
            return
        time.sleep(0.02)


def test_bar_line_shows_percent_rate_eta_and_files() -> None:
    line = bar_line("fetching", 1_000_000_000, 4_000_000_000, 3, 12, elapsed=10.0)
    assert "[######..................]  25%" in line
    assert "1.0 GB/4.0 GB" in line
    assert "100.0 MB/s" in line
    assert "ETA 0:30" in line
    assert "3/12 files" in line


def test_bar_line_before_any_byte_has_no_eta() -> None:
    assert "ETA --:--" in bar_line("fetching", 0, 100, 0, 1, elapsed=0.0)


def test_terminal_gets_a_live_bar_with_eta() -> None:
    out = _Tty()
    p = Progress(out)
    p.start("fetching", total_bytes=2_000_000, files=2)
    p.advance(1_000_000)
    p.file_done()
    p.advance(1_000_000)
    p.file_done()
    p.finish("fetched 2 files")
    p.close()
    text = out.getvalue()
    assert "\r\x1b[Kfetching [" in text
    assert "ETA" in text and "2/2 files" in text
    assert text.endswith("lockbuild: fetched 2 files\n")


def test_a_long_step_without_a_terminal_prints_a_heartbeat() -> None:
    out = io.StringIO()
    p = Progress(out, heartbeat=0.1)
    p.phase("installing 141 package(s) offline with uv")
    _wait_for(lambda: "still working" in out.getvalue())
    p.finish("installed")
    p.close()
    lines = out.getvalue().splitlines()
    assert lines[0] == "lockbuild: installing 141 package(s) offline with uv"
    assert any(
        line.startswith("lockbuild: installing 141 package(s) offline with uv: ") and line.endswith(" s, still working")
        for line in lines
    )
    assert lines[-1] == "lockbuild: installed"


def test_a_byte_counting_step_heartbeat_says_how_far_it_is() -> None:
    out = io.StringIO()
    p = Progress(out, heartbeat=0.1)
    p.start("fetching", total_bytes=4_000_000, files=4)
    p.advance(1_000_000)
    p.file_done()
    _wait_for(lambda: "1/4 files" in out.getvalue())
    p.finish()
    p.close()
    assert "lockbuild: fetching: " in out.getvalue()
    assert "1/4 files, 1.0 MB of 4.0 MB" in out.getvalue()


def test_no_heartbeat_after_the_work_is_done() -> None:
    out = io.StringIO()
    p = Progress(out, heartbeat=0.05)
    p.phase("resolving")
    p.finish("resolved")
    time.sleep(0.3)
    p.close()
    assert out.getvalue() == "lockbuild: resolving\nlockbuild: resolved\n"


def test_disabled_progress_prints_nothing_and_starts_no_thread() -> None:
    out = io.StringIO()
    p = Progress(out, enabled=False, heartbeat=0.01)
    p.phase("resolving")
    time.sleep(0.1)
    assert out.getvalue() == ""
    assert p._thread is None


def test_heartbeat_stops_quietly_when_its_stream_is_closed() -> None:
    out = io.StringIO()
    p = Progress(out, heartbeat=0.05)
    p.phase("installing")
    thread = p._thread
    out.close()
    assert thread is not None
    thread.join(timeout=2.0)
    assert not thread.is_alive()
