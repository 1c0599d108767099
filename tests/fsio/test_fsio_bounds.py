"""The bounded readers: ``bounded_read`` refuses a file that holds more than its limit (saying
whether it grew while read), and ``json_depth_ok`` refuses JSON nested deeper than its limit before a
parser recurses into it (brackets inside strings do not count)."""

from __future__ import annotations

import io

import pytest

from lockbuild.documents import json_depth_ok
from lockbuild.errors import IntegrityError
from lockbuild.fsio import bounded_read


def test_bounded_read_returns_up_to_its_limit_and_refuses_more() -> None:
    assert bounded_read(io.BytesIO(b"x" * 10), 10, what="the list") == b"x" * 10
    with pytest.raises(IntegrityError, match=r"^the list is over 10 bytes"):
        bounded_read(io.BytesIO(b"x" * 11), 10, what="the list", error=IntegrityError)
    with pytest.raises(IntegrityError, match=r"^the list grew while it was read: expected 10 bytes"):
        bounded_read(io.BytesIO(b"x" * 11), 10, what="the list", error=IntegrityError, grew=True)


def test_json_nested_deeper_than_the_limit_is_refused() -> None:
    assert json_depth_ok(b"[" * 64 + b"]" * 64, 64)
    assert not json_depth_ok(b"[" * 65 + b"]" * 65, 64)
    assert not json_depth_ok(b'{"a":' * 65 + b"1" + b"}" * 65, 64)
    assert json_depth_ok(b'["' + b"[" * 100 + b'"]', 2)  # inside a string, a bracket is text


def test_pump_sees_a_longer_source_and_feeds_none_of_the_excess() -> None:
    """The one read-hash loop: a source longer than its bound is counted past the bound (the caller refuses
    it) while its sinks get exactly the bound; without ``peek`` the rest stays unread for the next reader."""
    import hashlib
    import io

    from lockbuild.digest import pump, reading_chunks, reading_into

    data = bytes(range(256)) * 40
    for read in (io.BytesIO(data[:1000]).read, reading_into(io.BytesIO(data[:1000]))):
        h, out = hashlib.sha256(), io.BytesIO()
        assert pump(read, h.update, out.write, limit=1000) == 1000
        assert out.getvalue() == data[:1000] and h.hexdigest() == hashlib.sha256(data[:1000]).hexdigest()
    for read in (io.BytesIO(data).read, reading_into(io.BytesIO(data))):
        out = io.BytesIO()
        assert pump(read, out.write, limit=1000) == 1001  # one byte past the bound, seen
        assert data[:1000].startswith(out.getvalue())  # and nothing past the bound written
    src = io.BytesIO(data)
    assert pump(src.read, limit=1000, peek=False) == 1000 and src.read() == data[1000:]
    kept: list[bytes] = []
    assert pump(reading_chunks([data[:600], b"", data[600:1200]]), kept.append, limit=1000) == 1200
    assert kept == [data[:600]]  # the chunk that crossed the bound reached no sink
    assert pump(io.BytesIO(data).read) == len(data)
