"""The frame walk's own bounds (lockbuild.bundle.zstdframe.check_zstd_frame), before anything is
decompressed: a block over the 128 KiB a block may hold, raw or run-length, and more frames than a
bundle of ``max_members`` members can need, are refused by what they are."""

from __future__ import annotations

import io

import pytest
from hostile import block, frame

from lockbuild.bundle.zstdframe import MAX_FRAMES, STORED_BLOCK, check_zstd_frame
from lockbuild.errors import IntegrityError


@pytest.mark.parametrize("kind", [0, 1], ids=["raw", "run-length"])
def test_a_block_over_the_largest_a_block_holds_is_refused(kind: int) -> None:
    def one(size: int) -> bytes:
        content = b"x" * size if kind == 0 else b"\0"
        return frame([block(kind, content, last=True, size=None if kind == 0 else size)])

    check_zstd_frame(io.BytesIO(one(STORED_BLOCK)))
    with pytest.raises(
        IntegrityError,
        match=rf"zstd block is {STORED_BLOCK + 1} bytes; a block holds at most "
        rf"{STORED_BLOCK}",
    ):
        check_zstd_frame(io.BytesIO(one(STORED_BLOCK + 1)))


def test_more_frames_than_a_bundle_can_need_are_refused() -> None:
    empty = frame([block(0, b"", last=True)])
    check_zstd_frame(io.BytesIO(empty * 3))
    with pytest.raises(IntegrityError, match=f"more than {MAX_FRAMES} zstd frames"):
        check_zstd_frame(io.BytesIO(empty * (MAX_FRAMES + 1)))
