"""The engine's own commands (the verify command, the GPU probe, uv) run to their end with their output
read, never held: an engine that prints without end costs the installer no memory, and the error still
shows the last lines it printed."""

from __future__ import annotations

import os
import time
import tracemalloc
from pathlib import Path

import pytest

from lockbuild.errors import InstallError
from lockbuild.install.runenv import OUTPUT_KEPT, run_command

ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


def test_a_command_that_prints_hundreds_of_megabytes_is_read_in_bounded_memory() -> None:
    script = "head -c 300000000 /dev/zero | tr '\\0' x; echo; echo 'the last line' >&2; exit 3"
    tracemalloc.start()
    try:
        with pytest.raises(InstallError) as got:
            run_command(["sh", "-c", script], env=ENV, timeout=120, what="the verify command")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * OUTPUT_KEPT, f"{peak} bytes held for a command's output"
    assert "the verify command failed (exit 3):" in got.value.message
    assert got.value.message.rstrip().endswith("the last line"), got.value.message[-300:]


def test_stdout_and_stderr_come_back_in_the_order_written() -> None:
    out = run_command(["sh", "-c", "echo one; echo two >&2; echo three"], env=ENV, timeout=30, what="x")
    assert out.split() == ["one", "two", "three"]


def test_past_the_deadline_the_command_and_what_it_started_are_killed(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    started = time.monotonic()
    with pytest.raises(InstallError, match="the GPU probe did not finish within 1 s"):
        run_command(
            ["sh", "-c", f"sleep 60 & echo $! > {pid_file}; sleep 60"], env=ENV, timeout=1, what="the GPU probe"
        )
    assert time.monotonic() - started < 20
    pid = int(pid_file.read_text())
    for _ in range(100):  # the kill is sent; the orphan is reaped by init a moment later
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
            break
        time.sleep(0.05)
    else:
        pytest.fail("a process the command started outlived the deadline")


def test_a_program_that_does_not_exist_is_named() -> None:
    with pytest.raises(InstallError, match="uv venv: cannot run /nonexistent/uv"):
        run_command(["/nonexistent/uv"], env=ENV, timeout=5, what="uv venv")
