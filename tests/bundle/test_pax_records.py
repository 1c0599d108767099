"""A pax extended header's records ("LEN key=value\\n") are read by rule: a length that is not a plain
decimal, a record that overruns the header or its newline, a record without '=' and a key given twice
are refused by name (lockbuild.bundle.tar.parse_pax), and well-formed records are read as written."""

from __future__ import annotations

import io
import tarfile

import pytest

from lockbuild.bundle.tar import MAX_PAX, TarReader, parse_pax
from lockbuild.bundle.write import BLOCK
from lockbuild.errors import IntegrityError


def record(key: str, value: str) -> bytes:
    body = f" {key}={value}\n".encode()
    n = len(body) + len(str(len(body) + 1))  # the length counts its own digits
    return str(n).encode() + body


def test_well_formed_records_are_read_as_written() -> None:
    assert parse_pax(record("path", "assets/é.bin") + record("size", "12") + record("mtime", "1.5")) == {
        "path": "assets/é.bin",
        "size": "12",
        "mtime": "1.5",
    }


@pytest.mark.parametrize(
    "data",
    [b"x9 path=a\n", b" 9 path=a\n", b"011 path=ab\n", b"path=a\n"],
    ids=["letter", "space-first", "leading-zero", "no-length"],
)
def test_a_record_length_that_is_not_plain_decimal_is_refused(data: bytes) -> None:
    with pytest.raises(IntegrityError, match="has a malformed record length"):
        parse_pax(data, 1024)


@pytest.mark.parametrize(
    "data",
    [b"30 path=a\n", b"10 path=ab", b"11 path=abX", b"2 \n"],
    ids=["past-the-end", "no-newline", "other-last-byte", "no-room-for-a-key"],
)
def test_a_record_that_overruns_the_header_is_refused(data: bytes) -> None:
    with pytest.raises(IntegrityError, match="at offset 1024 has a record that overruns it"):
        parse_pax(data, 1024)


def test_a_record_without_an_equals_sign_is_refused() -> None:
    with pytest.raises(IntegrityError, match="malformed or repeated record 'path'"):
        parse_pax(b"7 path\n", 1024)


def test_a_key_given_twice_is_refused() -> None:
    with pytest.raises(IntegrityError, match="malformed or repeated record 'path'"):
        parse_pax(record("path", "assets/a") + record("path", "../../etc/passwd"), 1024)


def _pax_then_member(records: bytes) -> io.BytesIO:
    pax = tarfile.TarInfo("././@PaxHeader")
    pax.type = tarfile.XHDTYPE
    pax.size = len(records)
    member = tarfile.TarInfo("assets/a")
    raw = pax.tobuf(tarfile.USTAR_FORMAT) + records + bytes(-len(records) % BLOCK)
    return io.BytesIO(raw + member.tobuf(tarfile.USTAR_FORMAT) + bytes(2 * BLOCK))


def test_a_pax_header_over_its_bound_is_refused_before_it_is_read() -> None:
    head = record("path", "assets/a")
    fits = head + record("mtime", "1" * (MAX_PAX - len(head) - 13))
    assert len(fits) == MAX_PAX
    header = TarReader(_pax_then_member(fits)).next()  # type: ignore[arg-type]
    assert header is not None and header.name == "assets/a"
    over = fits + record("uid", "0")  # one record more
    with pytest.raises(
        IntegrityError,
        match=rf"the pax header at offset 0 is {len(over)} bytes; expected at most "
        rf"{MAX_PAX}\.",
    ):
        TarReader(_pax_then_member(over)).next()  # type: ignore[arg-type]
