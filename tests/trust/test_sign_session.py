"""One `lockbuild sign` keeps one signing process open (trust/sign.py::SigningSession): it signs exactly
one statement, so a command process that parses an untrusted bundle cannot get a batch of signatures."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockbuild.errors import SignatureError
from lockbuild.minisign import write_keypair
from lockbuild.trust.sign import SigningSession


def test_a_session_signs_one_statement_and_refuses_a_batch(tmp_path: Path) -> None:
    secret, _ = write_keypair(tmp_path / "k", password="pw")
    items = [(bytes([i]) * 64, f"lockbuild file=evil{i}.lbz") for i in range(3)]
    session = SigningSession(secret, "pw", False)
    try:
        with pytest.raises(SignatureError, match=r"a signing session signs exactly one statement; it was asked for 3"):
            session.sign(items)
    finally:
        session.close()
    session = SigningSession(secret, "pw", False)
    try:
        signed = session.sign(items[:1])
    finally:
        session.close()
    assert len(signed.blocks) == 1 and signed.key_id == session.checked.key_id
