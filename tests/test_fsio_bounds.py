"""The bounded readers: ``bounded_read`` refuses a file that holds more than its limit (saying
whether it grew while read), and ``json_depth_ok`` refuses JSON nested deeper than its limit before a
parser recurses into it (brackets inside strings do not count)."""

from __future__ import annotations

import io

import pytest

from lockbuild.errors import IntegrityError
from lockbuild.fsio import bounded_read
from lockbuild.jsonio import json_depth_ok


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
