"""A bundle whose zstd frame is whole but whose tar stream ends inside a member's data is refused as
truncated, naming the member, at once (the reader never waits for bytes that cannot come)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hostile import GOOD_FILES, bundle_tar, compress
from test_hostile_bundles import refused


@contextmanager
def within(seconds: int) -> Iterator[None]:
    def late(*_: object) -> None:
        raise TimeoutError(f"still reading after {seconds} s")

    old = signal.signal(signal.SIGALRM, late)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_a_tar_stream_that_ends_inside_a_member_is_refused_naming_it(tmp_path: Path) -> None:
    path, data, _ = GOOD_FILES[-1]
    tar = bundle_tar()
    at = tar.index(data)
    with within(20):
        refused(tmp_path, compress(tar[: at + len(data) // 2]), f"the bundle is truncated inside {path!r}")


@pytest.mark.parametrize("where", ["header", "padding"])
def test_a_tar_stream_that_ends_inside_a_header_or_padding_is_refused(tmp_path: Path, where: str) -> None:
    _, data, _ = GOOD_FILES[-1]
    tar = bundle_tar()
    at = tar.index(data)
    cut = at - 100 if where == "header" else at + len(data) + 1
    assert len(data) % 512, "the last member needs padding for this test"
    with within(20):
        refused(tmp_path, compress(tar[:cut]), "the bundle is truncated")
