"""The signing process: the only process that reads a secret key or asks for its passphrase.

``lockbuild build`` runs everything else first (lock, fetch, prebuild and self-test, the other people's
code among it sandboxed and exited), then starts this module in a fresh interpreter,
``python -I -S``: isolated mode (no script directory, no user site, no ``PYTHON*`` variables) and no
``site`` (so no ``.pth`` file of any installation runs), with lockbuild's and cryptography's directories
appended *after* the standard library (a ``getpass.py`` planted beside them cannot shadow the real one).
Every module it needs is imported before the key is read; it reports what was imported after, and the
parent refuses a signature if anything was.

Protocol: one JSON request on stdin (the key's path, the passphrase when it came from
LOCKBUILD_KEY_PASSWORD, whether a group/other-readable key is allowed, and for each bundle the BLAKE2b-512
prehash and the trusted comment to sign); one JSON answer on stdout (the signer's key id and public key
and one minisign block per bundle, or the error). A passphrase that must be typed is read from
``/dev/tty`` here, never through the parent.
"""

from __future__ import annotations

import getpass
import json
import sys
import warnings
from pathlib import Path
from typing import Any

from lockbuild.errors import LockbuildError, SignatureError
from lockbuild.minisign.keyfiles import read_secret_key
from lockbuild.minisign.sigfile import sign_prehashed

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


def answer(request: dict[str, Any]) -> dict[str, Any]:
    """Read the key, sign every item; the answer, with the modules imported after the key was read."""
    given = request.get("password")
    prompt = PROMPT if request["items"] else CHECK_PROMPT  # build's check before its first download
    before = set(sys.modules)
    key = read_secret_key(
        Path(request["key"]),
        (lambda: str(given)) if given is not None else (lambda: _typed_passphrase(prompt)),
        allow_readable=bool(request.get("allow_readable_key")),
    )
    untrusted = f"lockbuild signature {key.key_id_hex}"
    blocks = [
        sign_prehashed(key, bytes.fromhex(item["blake2b"]), item["comment"], untrusted_comment=untrusted)
        for item in request["items"]
    ]
    public = key.public_key().to_text()
    return {
        "key_id": key.key_id.hex(),
        "key_id_hex": key.key_id_hex,
        "public_key": public,
        "blocks": blocks,
        "imported_after_key": sorted(set(sys.modules) - before),
    }


def main() -> int:
    try:
        request = json.loads(sys.stdin.buffer.read(MAX_REQUEST))
        result = answer(request)
    except LockbuildError as exc:
        result = {"error": exc.message, "tip": exc.tip, "exit_code": exc.exit_code}
    except (ValueError, KeyError, TypeError) as exc:
        result = {"error": f"the signing process got a malformed request ({type(exc).__name__})", "exit_code": 1}
    sys.stdout.write(json.dumps(result))
    sys.stdout.flush()
    return 0
