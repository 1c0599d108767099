"""``digest.digest_exactly``: the verify pass (sha256, and BLAKE2b-512 where a signature needs it) of one
read, the digests on threads of their own; exactly the size given, or refused."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import pytest

from lockbuild.digest import READ_PIECE, digest_exactly
from lockbuild.errors import IntegrityError
from lockbuild.trust import digest_signed_file


@pytest.mark.parametrize("size", [0, 1, READ_PIECE - 1, READ_PIECE, 5 * READ_PIECE + 7])
def test_the_digests_are_those_of_the_bytes(size: int) -> None:
    data = bytes(i * 7 % 251 for i in range(min(size, 4096))) * (size // 4096 + 1)
    data = data[:size]
    sha, b2 = digest_exactly(io.BytesIO(data), size, what="the bundle x", blake2b=True)
    assert sha == hashlib.sha256(data).hexdigest()
    assert b2 == hashlib.blake2b(data, digest_size=64).digest()
    assert digest_exactly(io.BytesIO(data), size, what="the bundle x") == (sha, None)


def test_a_file_shorter_than_its_size_is_refused() -> None:
    with pytest.raises(IntegrityError, match="the bundle x shrank while it was read: expected 10 bytes"):
        digest_exactly(io.BytesIO(b"123456789"), 10, what="the bundle x")


def test_a_file_longer_than_its_size_is_refused() -> None:
    """The bytes past the size would be unsigned: a file that grew after its size was checked is refused."""
    with pytest.raises(IntegrityError, match="the bundle x grew while it was read: expected 10 bytes"):
        digest_exactly(io.BytesIO(b"12345678901"), 10, what="the bundle x")


def test_digest_signed_file_hashes_the_file_once_for_both_digests(tmp_path: Path) -> None:
    p = tmp_path / "b.lbz"
    data = b"z" * (2 * READ_PIECE + 3)
    p.write_bytes(data)
    d = digest_signed_file(p)
    assert (d.size, d.sha256, d.blake2b) == (
        len(data),
        hashlib.sha256(data).hexdigest(),
        hashlib.blake2b(data, digest_size=64).digest(),
    )
    assert digest_signed_file(p, prehash=False).blake2b is None
