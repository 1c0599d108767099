"""Key files on disk: write a new key pair, read a secret or public key (regular files only)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from lockbuild.errors import SignatureError
from lockbuild.fsio import read_regular
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
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
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
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            os.fchmod(fh.fileno(), mode)
            fh.write(text)
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


def read_secret_key(path: Path, password: Callable[[], str]) -> SecretKey:
    return decode_secret_key(read_text(path, what="secret key"), password, source=str(path))


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
        proc = subprocess.run(["git", "-C", str(root), "check-ignore", "-q", "--", str(path.absolute())],
                              capture_output=True, timeout=30, check=False)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return root
    return None if proc.returncode == 0 else root
