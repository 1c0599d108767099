"""`lockbuild sign` with a typed passphrase, at a terminal (a pty): the signing process asks once, checks
the key before the bundle is read, and signs in the same process once the bundle has been checked."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

from sitekit import make_bundle

from lockbuild.minisign import write_keypair

PROMPT = b"Passphrase for the secret key"


def _sign_at_a_terminal(bundle: Path, key: Path, typed: bytes) -> tuple[int, bytes, int]:
    """(exit code, what the terminal showed, prompts answered): ``typed`` is typed at every prompt."""
    env = {k: v for k, v in os.environ.items() if k != "LOCKBUILD_KEY_PASSWORD"}
    pid, fd = pty.fork()
    if pid == 0:  # the child: the pty is its controlling terminal, so /dev/tty is it
        os.execve(sys.executable, [sys.executable, "-m", "lockbuild", "sign", str(bundle), "--key", str(key)], env)
    shown, prompts, deadline = b"", 0, time.monotonic() + 120
    while time.monotonic() < deadline:
        if not select.select([fd], [], [], 1)[0]:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the child has ended and closed the terminal
            break
        if not chunk:
            break
        shown += chunk
        while prompts < shown.count(PROMPT):
            prompts += 1
            os.write(fd, typed + b"\n")
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), shown, prompts


def test_a_typed_passphrase_is_asked_once_and_the_signature_verifies(tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path / "b", [])
    secret, public = write_keypair(tmp_path / "k", password="correct horse")
    code, shown, prompts = _sign_at_a_terminal(bundle, secret, b"correct horse")
    assert code == 0, shown.decode(errors="replace")
    assert prompts == 1 and shown.count(PROMPT) == 1
    assert b"asked again" not in shown  # the prompt of build's check, which signs later in another process
    trust = tmp_path / "trust"
    trust.mkdir()
    (trust / "k.pub").write_bytes(public.read_bytes())
    verified = subprocess.run(
        [sys.executable, "-m", "lockbuild", "verify", str(bundle), "--trust", str(trust)], capture_output=True
    )
    assert verified.returncode == 0, verified.stderr


def test_a_wrong_passphrase_stops_sign_before_the_bundle_is_read(tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path / "b", [])
    secret, _ = write_keypair(tmp_path / "k", password="correct horse")
    code, shown, prompts = _sign_at_a_terminal(bundle, secret, b"wrong")
    assert code == 3 and prompts == 1, shown.decode(errors="replace")
    assert b"checking" not in shown  # refused before a byte of the bundle was checked
    assert not Path(f"{bundle}.minisig").exists()
