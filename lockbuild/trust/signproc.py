"""The signing process: the only process that reads a secret key or asks for its passphrase (:func:`main`).

Started last, in ``python -I -S`` (no user site, no ``PYTHON*``, no ``.pth``), with lockbuild's and
cryptography's directories *after* the standard library; every module is imported before the key is
read, and the parent refuses a signature if anything was imported after."""

from __future__ import annotations

import getpass
import json
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lockbuild.errors import LockbuildError, SignatureError
from lockbuild.minisign.keyfiles import read_secret_key
from lockbuild.minisign.sigfile import sign_prehashed

if TYPE_CHECKING:
    from lockbuild.minisign import SecretKey

MAX_REQUEST = 16 << 20
PROMPT = "Passphrase for the secret key: "
CHECK_PROMPT = "Passphrase for the secret key (checked before the build; asked again to sign): "


def _typed_passphrase(prompt: str = PROMPT) -> str:
    """The passphrase typed at this process's controlling terminal (``/dev/tty``); with none, an error
    (getpass would otherwise fall back to reading stdin, the request pipe, with echo)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", getpass.GetPassWarning)
            return getpass.getpass(prompt)
    except (getpass.GetPassWarning, EOFError):
        raise SignatureError(
            "the secret key is encrypted and there is no terminal to ask for its passphrase.",
            tip="Set LOCKBUILD_KEY_PASSWORD, or run the command in a terminal.",
        ) from None


def _key(request: dict[str, Any]) -> SecretKey:
    given = request.get("password")
    asked_again = not request["items"] and not request.get("session")  # build's check before its first download
    prompt = CHECK_PROMPT if asked_again else PROMPT
    return read_secret_key(
        Path(request["key"]),
        (lambda: str(given)) if given is not None else (lambda: _typed_passphrase(prompt)),
        allow_readable=bool(request.get("allow_readable_key")),
    )


def _signed(key: SecretKey, items: list[dict[str, str]], before: set[str]) -> dict[str, Any]:
    untrusted = f"lockbuild signature {key.key_id_hex}"
    blocks = [
        sign_prehashed(key, bytes.fromhex(item["blake2b"]), item["comment"], untrusted_comment=untrusted)
        for item in items
    ]
    public = key.public_key().to_text()
    return {
        "key_id": key.key_id.hex(),
        "key_id_hex": key.key_id_hex,
        "public_key": public,
        "blocks": blocks,
        "imported_after_key": sorted(set(sys.modules) - before),
    }


def answer(request: dict[str, Any]) -> dict[str, Any]:
    """Read the key, sign every item; the answer, with the modules imported after the key was read."""
    before = set(sys.modules)
    return _signed(_key(request), request["items"], before)


def _write(result: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


def main() -> int:
    """One JSON request line on stdin (the key's path, the passphrase when it came from
    LOCKBUILD_KEY_PASSWORD, whether a group/other-readable key is allowed, and per bundle the BLAKE2b-512
    prehash and trusted comment); one JSON answer on stdout (the key id, public key and one block per
    bundle, or the error). A ``session`` request is answered twice: once the key is read (who it is, no
    block), then for the one item of a second line (a batch is refused); no second line (the command
    failed), nothing signed. A passphrase that must be typed is read from ``/dev/tty`` here, once, never
    through the parent."""
    try:
        request = json.loads(sys.stdin.buffer.readline(MAX_REQUEST))
        if request.get("session"):
            before = set(sys.modules)
            key = _key(request)
            _write(_signed(key, [], before))
            line = sys.stdin.buffer.readline(MAX_REQUEST)
            if not line:
                return 0
            items = json.loads(line)["items"]
            if not isinstance(items, list) or len(items) != 1:  # one command, one statement: never a batch
                raise SignatureError(
                    f"a signing session signs exactly one statement; it was asked for {len(items)}.",
                    tip="This is a defect in the command that asked: report it.",
                )
            result = _signed(key, items, before)
        else:
            result = answer(request)
    except LockbuildError as exc:
        result = {"error": exc.message, "tip": exc.tip, "exit_code": exc.exit_code}
    except (ValueError, KeyError, TypeError) as exc:
        result = {"error": f"the signing process got a malformed request ({type(exc).__name__})", "exit_code": 1}
    _write(result)
    return 0
