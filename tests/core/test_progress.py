"""Progress a person sees: a bar with rate and ETA on a terminal, a heartbeat in logs, silence under --json."""

from __future__ import annotations

import io
import time

import pytest

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


# --------------------------------------------------------------------------- off a terminal
class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_long_step_written_to_a_file_shows_rate_and_eta(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Output to a file (CI logs, nohup): every heartbeat line has what the live bar has."""
    clock = _Clock()
    log = tmp_path / "build.log"
    with log.open("w") as out:
        p = Progress(out, heartbeat=0.05, clock=clock)
        p.start("packing", total_bytes=4_000_000, files=4)
        p.advance(1_000_000)
        p.file_done()
        clock.now = 10.0
        _wait_for(lambda: "ETA" in log.read_text())
        p.finish()
        p.close()
    lines = log.read_text().splitlines()
    assert lines[0] == "lockbuild: packing: 4 file(s), 4.0 MB"
    assert "lockbuild: packing: 10 s, 1/4 files, 1.0 MB of 4.0 MB at 100.0 KB/s, ETA 0:30" in lines


def test_downloading_and_packing_count_both_and_the_eta_follows_the_download() -> None:
    clock = _Clock()
    out = io.StringIO()
    p = Progress(out, heartbeat=0.05, clock=clock)
    downloads = p.alongside("downloading", "downloaded")
    downloads.start("fetching", total_bytes=5_000_000, files=3)
    downloads.skip(1_000_000)  # a cache hit: nothing moves, it is off the download's total
    p.start("packing", total_bytes=5_000_000, files=4)
    downloads.advance(2_000_000)
    clock.now = 10.0
    _wait_for(lambda: "ETA" in out.getvalue())
    p.finish()
    downloads.close()
    p.close()
    lines = out.getvalue().splitlines()
    assert lines[0] == "lockbuild: downloading and packing: 4 file(s), 5.0 MB"
    assert (
        "lockbuild: downloading and packing: 10 s, downloaded 0/2 files, 2.0 MB of 4.0 MB at 200.0 KB/s; "
        "packed 0/4 files, 0 B of 5.0 MB at 0 B/s; ETA 0:10"
    ) in lines  # packing waits on the download: its ETA is the download's, and it moves


def test_the_live_bar_shows_both_counts() -> None:
    clock = _Clock()
    out = _Tty()
    p = Progress(out, clock=clock)
    downloads = p.alongside("downloading", "downloaded")
    downloads.start("fetching", total_bytes=4_000_000, files=2)
    p.start("packing", total_bytes=4_000_000, files=3)
    clock.now = 2.0
    downloads.advance(2_000_000)
    clock.now = 4.0
    p.advance(2_000_000)
    p.finish()
    downloads.close()
    p.close()
    text = out.getvalue()
    assert "\r\x1b[Kdownloading and packing [" in text
    assert "[############............]  50%  downloaded 2.0 MB/4.0 MB 500.0 KB/s  " in text
    assert "packed 2.0 MB/4.0 MB 500.0 KB/s  ETA 0:04  0/3 files" in text


def _slow_toy_index(srv, chunk: int, pause: float) -> int:  # type: ignore[no-untyped-def]
    """The toy engine's index, whose uv wheel (the bundle's first fetched member) arrives slowly."""
    from conftest import day
    from servers import make_wheel

    from lockbuild.proc.uvtool import uv_binary, uv_version

    version = uv_version(uv_binary())
    name = f"uv-{version}-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
    data = make_wheel("uv", version, padding=3_000_000)[1]
    srv.publish(name, data, uploaded=day(1))
    srv.publish(*make_wheel("toydep", "1.0"), uploaded=day(1))
    srv.publish(*make_wheel("toyengine", "1.0", deps=("toydep",)), uploaded=day(5))

    def trickle():  # type: ignore[no-untyped-def]
        for i in range(0, len(data), chunk):
            time.sleep(pause)
            yield data[i : i + chunk]

    srv.files[f"/files/primary/{name}"].data = trickle
    return len(data)


def test_a_cold_builds_count_rises_while_its_first_member_downloads(  # type: ignore[no-untyped-def]
    srv, keys, toy_recipe, tmp_path, monkeypatch
) -> None:
    import re

    from click.testing import CliRunner

    from lockbuild import progress
    from lockbuild.cli import main

    size = _slow_toy_index(srv, chunk=100_000, pause=0.05)  # about 2 MB/s: 1.5 s for the first member
    monkeypatch.setattr(progress, "HEARTBEAT", 0.2)
    monkeypatch.setenv("LOCKBUILD_INDEX_URL", srv.index_url())
    args = ["build", str(toy_recipe), "--key", str(keys.secret), "--out", str(tmp_path / "dist")]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    beats = list(
        re.finditer(
            r"^lockbuild: downloading and packing: \d+ s, downloaded \d+/\d+ files, ([\d.]+ [KMG]?B) of [\d.]+ MB "
            r"at [\d.]+ [KMG]?B/s; packed 3/\d+ files, ([\d.]+ [KMG]?B) of [\d.]+ MB at [\d.]+ [KMG]?B/s; "
            r"ETA (\d+:\d\d|--:--)$",
            result.stderr,
            re.M,
        )
    )
    # While the uv wheel (packed right after the recipe, lock and SBOM) is still arriving, the packed count
    # stands still, and the downloaded one rises, with its ETA.
    downloaded = [m.group(1) for m in beats]
    assert len(set(downloaded)) >= 3, result.stderr
    assert len({m.group(2) for m in beats}) == 1, result.stderr
    assert any(m.group(3) != "--:--" for m in beats), result.stderr
    assert size > 3_000_000


@pytest.mark.parametrize("command", ["lock", "fetch", "build"])
def test_under_json_stdout_holds_the_result_only(srv, keys, toy_recipe, tmp_path, monkeypatch, command) -> None:  # type: ignore[no-untyped-def]
    import json

    from click.testing import CliRunner

    from lockbuild import progress
    from lockbuild.cli import main

    _slow_toy_index(srv, chunk=500_000, pause=0.05)
    monkeypatch.setattr(progress, "HEARTBEAT", 0.05)
    monkeypatch.setenv("LOCKBUILD_INDEX_URL", srv.index_url())
    args = [command, str(toy_recipe), "--out", str(tmp_path / "out"), "--json"]
    if command == "build":
        args += ["--key", str(keys.secret)]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["ok"] is True  # one JSON document, nothing before or after it
    assert "lockbuild:" not in result.stderr


def test_a_warm_build_shows_packing_alone() -> None:
    """Every file from the cache: nothing downloads, so the line is the packing's only."""
    clock = _Clock()
    out = io.StringIO()
    p = Progress(out, heartbeat=0.05, clock=clock)
    downloads = p.alongside("downloading", "downloaded")
    downloads.start("fetching", total_bytes=3_000_000, files=2)
    downloads.skip(1_000_000)
    downloads.skip(2_000_000)
    p.start("packing", total_bytes=3_000_000, files=3)
    p.advance(1_500_000)
    clock.now = 3.0
    _wait_for(lambda: "ETA" in out.getvalue())
    p.finish()
    downloads.close()
    p.close()
    assert "lockbuild: packing: 3 s, 0/3 files, 1.5 MB of 3.0 MB at 500.0 KB/s, ETA 0:03" in out.getvalue().splitlines()
