"""Key files on disk: write a new key pair, read a secret or public key (regular files only)."""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

from lockbuild import fsio
from lockbuild.errors import SignatureError
from lockbuild.fsio import bounded_read, open_regular, read_regular
from lockbuild.minisign.encoding import MAX_KEY_FILE_BYTES
from lockbuild.minisign.keys import (
    PublicKey,
    SecretKey,
    decode_secret_key,
    encode_secret_key,
    generate_secret_key,
    parse_public_key,
)


def read_text(path: Path, *, what: str, limit: int = MAX_KEY_FILE_BYTES) -> str:
    """A small UTF-8 text file that must be a regular file; anything else is a SignatureError."""
    try:
        data = read_regular(path, what=what, max_size=limit, error=SignatureError)
    except FileNotFoundError:
        raise SignatureError(
            f"cannot read {what} {path}: No such file or directory",
            tip=f"Check that {path} exists and is the {what} you meant.",
        ) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SignatureError(
            f"{what} {path} is not UTF-8 text", tip=f"Check that {path} is the {what} you meant."
        ) from None


def _write_new_file(path: Path, text: str, mode: int) -> None:
    """Create ``path`` exclusively (never overwrite) with permissions ``mode``."""
    try:
        fh = fsio.create_new(path, mode=mode)
    except FileExistsError:
        raise SignatureError(
            f"{path} already exists; refusing to overwrite a key",
            tip="Choose another name, or move the existing key away first if you really mean to replace it.",
        ) from None
    except OSError as exc:
        raise SignatureError(
            f"cannot create {path}: {exc.strerror or exc}", tip="Check the directory exists and is writable."
        ) from None
    try:
        with fh:
            os.fchmod(fh.fileno(), mode)
            fh.write(text.encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        path.unlink(missing_ok=True)
        raise SignatureError(
            f"cannot write {path}: {exc.strerror or exc}", tip="Check free space and permissions."
        ) from None


def write_keypair(path_stem: Path, *, password: str | None, comment: str | None = None) -> tuple[Path, Path]:
    """Write a new key pair to ``STEM.key`` (mode 0600, never overwritten) and ``STEM.pub``."""
    key_path = path_stem.parent / (path_stem.name + ".key")
    pub_path = path_stem.parent / (path_stem.name + ".pub")
    for existing in (key_path, pub_path):
        if existing.exists():
            raise SignatureError(
                f"{existing} already exists; refusing to overwrite a key",
                tip="Choose another name, or move the existing key away first if you really mean to replace it.",
            )
    sk = generate_secret_key()
    key_text = encode_secret_key(sk, password)
    pub_text = sk.public_key().to_text(comment)
    _write_new_file(key_path, key_text, 0o600)
    try:
        _write_new_file(pub_path, pub_text, 0o644)
    except SignatureError:
        key_path.unlink(missing_ok=True)
        raise
    return key_path, pub_path


def read_secret_key(path: Path, password: Callable[[], str], *, allow_readable: bool = False) -> SecretKey:
    """The secret key at ``path``, decrypted with ``password()``. A key file that its group or other users
    can read is refused unless ``allow_readable`` (``--allow-readable-key``): its passphrase is then the
    only thing between them and the key."""
    try:
        f, size = open_regular(path, what="secret key", max_size=MAX_KEY_FILE_BYTES, error=SignatureError)
    except FileNotFoundError:
        raise SignatureError(
            f"cannot read secret key {path}: No such file or directory",
            tip=f"Check that {path} exists and is the secret key you meant.",
        ) from None
    with f:
        mode = os.fstat(f.fileno()).st_mode
        if mode & 0o077 and not allow_readable:
            raise SignatureError(
                f"the secret key {path} has mode {stat.S_IMODE(mode):04o}: expected it readable by its owner "
                "alone (0600), so that other users cannot copy it and try passphrases offline.",
                tip=f"chmod 600 {path} (and check who may have copied it), or pass --allow-readable-key "
                "if this is deliberate (a key on a single-user machine).",
            )
        data = bounded_read(f, size, what=f"the secret key {path}", error=SignatureError, grew=True)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise SignatureError(
            f"secret key {path} is not UTF-8 text", tip=f"Check that {path} is the secret key you meant."
        ) from None
    return decode_secret_key(text, password, source=str(path))


def read_public_key(path: Path) -> PublicKey:
    return parse_public_key(read_text(path, what="public key"), source=str(path))


def unignored_in_git(path: Path) -> Path | None:
    """The git work tree that would track ``path`` (a new secret key file), or None: outside any work tree, or
    ignored by it. When git cannot answer, the work tree is returned (fail closed)."""
    start = path.absolute().parent
    root = next((p for p in (start, *start.parents) if (p / ".git").exists()), None)
    if root is None:
        return None
    try:
        proc = subprocess.run(
            ["git", "-C", str(root), "check-ignore", "-q", "--", str(path.absolute())],
            capture_output=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return root
    return None if proc.returncode == 0 else root
