"""Deciding whether a bundle file is trusted, before any byte of it is decompressed.

The signatures (minisign ``ED`` over the whole file) must meet the site's policy: ``threshold``
distinct trusted, non-revoked keys. Each counted signature's trusted comment must name this file,
its sha256, and be unexpired; the site's policy may also bound the bundle's as-of time.
"""

from __future__ import annotations

import datetime as dt
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from lockbuild.digest import file_twin_digests
from lockbuild.errors import SignatureError
from lockbuild.signing import (
    PublicKey,
    Signature,
    TrustStore,
    check_policy,
    load_trust_dir,
    parse_signatures,
    parse_trusted_comment,
)
from lockbuild.times import iso, parse_time

DEFAULT_TRUST_DIR = Path("/etc/lockbuild/keys")
POLICY_FILE = "policy.toml"
CLOCK_SKEW = dt.timedelta(minutes=10)


@dataclass(frozen=True)
class Policy:
    threshold: int = 1
    not_before: dt.datetime | None = None  # refuse bundles whose as-of is earlier
    not_after: dt.datetime | None = None  # refuse bundles whose as-of is later


@dataclass(frozen=True)
class FileDigests:
    size: int
    sha256: str
    blake2b: bytes


@dataclass(frozen=True)
class Verified:
    """A bundle file that met the signature policy."""

    digests: FileDigests
    signers: tuple[PublicKey, ...]
    fields: dict[str, str]


def trust_dir(explicit: Path | None) -> Path:
    if explicit is not None:
        return explicit
    env = os.environ.get("LOCKBUILD_TRUST_DIR")
    return Path(env) if env else DEFAULT_TRUST_DIR


def signature_path(bundle: Path) -> Path:
    return bundle.with_name(bundle.name + ".minisig")


def _time(value: object, key: str, source: str) -> dt.datetime:
    if isinstance(value, str) and "T" in value.upper():  # quoted, as people often write it
        value = parse_time(value) or value
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC)
    raise SignatureError(f"{source}: {key} must be a time with a zone (e.g. 2026-01-01T00:00:00Z), found {value!r}.")


def load_policy(directory: Path) -> Policy:
    """The site's policy.toml in the trust dir (optional): threshold, not-before, not-after."""
    path = directory / POLICY_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Policy()
    except (OSError, UnicodeDecodeError) as exc:
        raise SignatureError(f"cannot read {path}: {exc}; the trust store fails closed.") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SignatureError(f"{path} is not valid TOML ({exc}); the trust store fails closed.") from None
    unknown = set(data) - {"threshold", "not-before", "not-after"}
    if unknown:
        raise SignatureError(f"{path}: unknown keys {sorted(unknown)}; expected threshold, not-before, not-after.")
    threshold = data.get("threshold", 1)
    if not isinstance(threshold, int) or isinstance(threshold, bool) or threshold < 1:
        raise SignatureError(f"{path}: threshold must be a whole number of at least 1, found {threshold!r}.")
    nb = _time(data["not-before"], "not-before", str(path)) if "not-before" in data else None
    na = _time(data["not-after"], "not-after", str(path)) if "not-after" in data else None
    return Policy(threshold, nb, na)


def digest_file(path: Path) -> FileDigests:
    """sha256 and BLAKE2b-512 of a file in one streaming pass (the two digests on two threads)."""
    return FileDigests(*file_twin_digests(path))


def read_signatures(path: Path, limit: int = 64 << 10) -> tuple[Signature, ...]:
    try:
        with path.open("rb") as f:
            raw = f.read(limit + 1)
    except FileNotFoundError:
        raise SignatureError(
            f"no signature file {path}; expected the bundle's .minisig beside it.",
            tip="Copy the .lbz.minisig that was published with the bundle next to it.",
        ) from None
    except OSError as exc:
        raise SignatureError(f"cannot read {path}: {exc.strerror}.") from None
    return parse_signatures(raw, source=str(path))


def check_fields(fields: dict[str, str], *, bundle_name: str, digests: FileDigests, now: dt.datetime) -> None:
    """A counted signature's signed metadata must describe exactly this file, and be current."""
    if fields.get("file") != bundle_name:
        raise SignatureError(
            f"the signature is for {fields.get('file')!r}, but the bundle file is named {bundle_name!r}.",
            tip="A renamed or swapped bundle is refused; use the file under the name it was signed as.",
        )
    if fields.get("sha256") != digests.sha256:
        raise SignatureError(f"the signed sha256 {fields.get('sha256')!r} is not this file's ({digests.sha256}).")
    expires = fields.get("expires")
    if expires is not None:
        when = parse_time(expires)
        if when is None or when.tzinfo is None:
            raise SignatureError(f"the signed expiry {expires[:40]!r} is not a time with a zone.")
        if now >= when:
            raise SignatureError(
                f"the bundle's signature expired at {expires} (now {iso(now)}).",
                tip="Ask the publisher for a freshly signed bundle (lockbuild sign --expires ...).",
            )
    made = serial_time(fields.get("serial", ""))
    if now + CLOCK_SKEW < made:
        raise SignatureError(
            f"this machine's clock ({iso(now)}) is before the bundle's time ({iso(made)}).",
            tip="Set the node's clock correctly: expiry checks depend on it.",
        )


def serial_time(serial: str) -> dt.datetime:
    """The signed serial (Unix seconds: the as-of time) as a time; refused unless a plausible number."""
    if not (serial.isascii() and serial.isdigit() and len(serial) <= 12):
        raise SignatureError(f"the signed serial {serial[:40]!r} is not a number of seconds.")
    try:
        return dt.datetime.fromtimestamp(int(serial), dt.UTC)
    except (OverflowError, OSError, ValueError):
        raise SignatureError(f"the signed serial {serial!r} is not a time.") from None


def check_dates(serial: int, policy: Policy) -> None:
    """The site's not-before / not-after bounds on the bundle's as-of time (its serial)."""
    when = serial_time(str(serial))
    if policy.not_before is not None and when < policy.not_before:
        raise SignatureError(f"the bundle's as-of {iso(when)} is before the site's not-before "
                             f"{iso(policy.not_before)}; refused.")  # fmt: skip
    if policy.not_after is not None and when > policy.not_after:
        raise SignatureError(f"the bundle's as-of {iso(when)} is after the site's not-after "
                             f"{iso(policy.not_after)}; refused.")  # fmt: skip


def verify_file(
    bundle: Path,
    *,
    trust: TrustStore,
    policy: Policy,
    threshold: int | None = None,
    now: dt.datetime | None = None,
) -> Verified:
    """Check the bundle's signatures against the trust store and policy; raise SignatureError if unmet."""
    signatures = read_signatures(signature_path(bundle))
    digests = digest_file(bundle)
    needed = max(threshold or 1, policy.threshold)
    signers = check_policy(signatures, trust, file_blake2b=digests.blake2b, threshold=needed)
    current = now or dt.datetime.now(dt.UTC)
    # A signature whose signed metadata does not hold (expired, another file name) does not count;
    # the others may still meet the threshold on their own.
    current_signers: list[PublicKey] = []
    problems: list[SignatureError] = []
    fields: dict[str, str] | None = None
    for key in signers:
        for sig in (s for s in signatures if s.key_id == key.key_id):
            got = parse_trusted_comment(sig.trusted_comment)
            try:
                check_fields(got, bundle_name=bundle.name, digests=digests, now=current)
            except SignatureError as exc:
                problems.append(exc)
                continue
            current_signers.append(key)
            fields = fields or got
            break
    if len(current_signers) < needed:
        first = problems[0]
        raise SignatureError(
            f"{first.message} ({len(current_signers)} of the {needed} signature(s) needed hold)",
            tip=first.tip,
        )
    assert fields is not None
    check_dates(int(fields["serial"]), policy)
    signers = tuple(current_signers)
    return Verified(digests, signers, fields)


def load_trust(directory: Path | None) -> tuple[TrustStore, Policy]:
    d = trust_dir(directory)
    return load_trust_dir(d), load_policy(d)
