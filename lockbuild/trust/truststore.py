"""The trust store: the keys a site trusts, the keys it revoked, and its policy (``policy.toml``).

A signer's identity is its raw Ed25519 public key, never its key id (unsigned: one key under two ids
would count twice); a store holding one raw key twice is refused, and a revocation covers its key under
any id. Pure: the files' contents in, a store out."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from lockbuild.documents import Problems, TomlRefusal, loads_toml
from lockbuild.errors import PolicyError, SignatureError
from lockbuild.limits import MiB
from lockbuild.text import closest
from lockbuild.times import iso, parse_time
from lockbuild.trust.scheme import SCHEME, Identity

POLICY_FILE = "policy.toml"
MAX_POLICY_TEXT = MiB  # a policy given as text; read from a trust directory it is bounded as a key file
REVOKED_FILE = "revoked.txt"
POLICY_KEYS = ("threshold", "not-before", "not-after")
_POLICY_TIP = (
    "policy.toml takes: threshold = 2 (a whole number, at least 1), not-before = 2026-01-01T00:00:00Z and"
    " not-after = ... (times with a zone, quoted or not). Fix the file; until then nothing installs."
)


@dataclass(frozen=True)
class Policy:
    threshold: int = 1
    not_before: dt.datetime | None = None  # refuse bundles whose as-of is earlier
    not_after: dt.datetime | None = None  # refuse bundles whose as-of is later


@dataclass(frozen=True)
class TrustStore:
    """The public keys an installer trusts (each raw key once), the keys it revoked, and its policy."""

    keys: tuple[Identity, ...]
    revoked: frozenset[bytes]  # key ids named in revoked.txt (as written)
    source: str
    revoked_keys: frozenset[bytes] = frozenset()  # raw keys: what a revocation really covers
    policy: Policy = Policy()

    def find(self, key_id: bytes) -> Identity | None:
        for key in self.keys:
            if key.key_id == key_id:
                return key
        return None

    def is_revoked(self, key: Identity) -> bool:
        return key.raw in self.revoked_keys or key.key_id in self.revoked


def describe(value: object) -> str:
    """A TOML value as a person wrote it, for an error message (never a Python repr)."""
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        shown = value if len(value) <= 60 else value[:60] + "..."
        return f'the string "{shown}"'
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            return f"a time without a zone ({value.isoformat()})"
        return f"the time {iso(value)}"
    if isinstance(value, dt.date):
        return f"a date without a time ({value.isoformat()})"
    if isinstance(value, dt.time):
        return f"a time of day without a date ({value.isoformat()})"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a table"
    return "a value of another type"


def _time(value: object, key: str, p: Problems) -> dt.datetime | None:
    if isinstance(value, str) and "T" in value.upper():  # quoted, as people often write it
        parsed = parse_time(value)
        value = parsed if parsed is not None else value
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC)
    p.add(p.path, f"{key} must be a time with a zone (e.g. 2026-01-01T00:00:00Z), found {describe(value)}.")
    return None


def parse_policy(text: str, *, source: str = POLICY_FILE) -> Policy:
    """The site's policy: threshold, not-before, not-after; anything else is refused, at the first problem
    (the trust store fails closed)."""

    def refuse(why: TomlRefusal) -> PolicyError:
        if why.kind == "size":
            return PolicyError(f"{source} is {why.detail}; the trust store fails closed.", tip=_POLICY_TIP)
        if why.kind == "depth":
            return PolicyError(f"{source} is nested too deeply; the trust store fails closed.", tip=_POLICY_TIP)
        return PolicyError(f"{source} is not valid TOML ({why.detail}); the trust store fails closed.", tip=_POLICY_TIP)

    data = loads_toml(text, max_bytes=MAX_POLICY_TEXT, refuse=refuse)
    p = Problems(source, first=True, error=lambda items: PolicyError(items[0], tip=_POLICY_TIP))
    unknown = sorted(set(data) - set(POLICY_KEYS))
    if unknown:
        meant = [(k, closest(k, POLICY_KEYS)) for k in unknown]
        hints = "".join(f" {k!r}: did you mean {m!r}?" for k, m in meant if m is not None)
        p.add(source, f"unknown keys {unknown}; expected only {', '.join(POLICY_KEYS)}.{hints}")
    threshold = data.get("threshold", 1)
    if not isinstance(threshold, int) or isinstance(threshold, bool) or threshold < 1:
        p.add(source, f"threshold must be a whole number of at least 1, found {describe(threshold)}.")
        threshold = 1
    nb = _time(data["not-before"], "not-before", p) if "not-before" in data else None
    na = _time(data["not-after"], "not-after", p) if "not-after" in data else None
    p.raise_if_any()
    return Policy(threshold, nb, na)


def parse_revocations(text: str, *, source: str = REVOKED_FILE) -> tuple[frozenset[bytes], frozenset[bytes]]:
    """(key ids, raw keys): one key id (16 hex digits) or one public key (its base64 line) per line;
    '#' starts a comment; blank lines are ignored."""
    ids: set[bytes] = set()
    raws: set[bytes] = set()
    for number, raw_line in enumerate(text.split("\n"), 1):
        line = raw_line.split("#", 1)[0].strip()
        if not line:
            continue
        kind, value = SCHEME.parse_revocation(line, source=f"{source} line {number}")
        (raws if kind == "key" else ids).add(value)
    return frozenset(ids), frozenset(raws)


def secret_key_error(path: str) -> SignatureError:
    return SignatureError(
        f"{path}: this is a secret key, not a public key: remove it from the trust directory.",
        tip=f"Remove {path} now (and treat the key as exposed to whoever can read the directory); put the "
        "matching public key (the .pub that keygen wrote beside it) there instead.",
    )


def build_store(
    keys: Sequence[tuple[str, Identity]], *, source: str, revoked: str = "", policy: str | None = None
) -> TrustStore:
    """A store from (file name, key) pairs and the texts of revoked.txt and policy.toml (None: absent)."""
    tip = (
        f"Keep one .pub file per signing key in {source}: remove the duplicate, and revoke a key by its id"
        f" or its public key line in {REVOKED_FILE}."
    )
    if not keys:
        raise SignatureError(
            f"trust directory {source} holds no *.pub files: expected at least one",
            tip=f"Put the publishers' minisign .pub files in {source}.",
        )
    by_raw: dict[bytes, str] = {}
    by_id: dict[bytes, tuple[str, Identity]] = {}
    kept: list[Identity] = []
    for name, key in keys:
        if key.raw in by_raw:
            raise SignatureError(
                f"trust directory {source}: {name} (key id {key.key_id_hex}) holds the same public key as"
                f" {by_raw[key.raw]}: a signer is its key, whatever its key id, and one key must not count twice.",
                tip=tip,
            )
        if key.key_id in by_id:
            raise SignatureError(
                f"trust directory {source}: {name} has key id {key.key_id_hex}, already used by a different key"
                f" in {by_id[key.key_id][0]}",
                tip=tip,
            )
        by_raw[key.raw] = name
        by_id[key.key_id] = (name, key)
        kept.append(key)
    ids, raws = parse_revocations(revoked, source=f"{source}/{REVOKED_FILE}")
    revoked_keys = set(raws) | {k.raw for k in kept if k.key_id in ids}
    pol = Policy() if policy is None else parse_policy(policy, source=f"{source}/{POLICY_FILE}")
    return TrustStore(tuple(kept), ids, source, frozenset(revoked_keys), pol)
