"""PEP 740 provenance: who published a locked file, as the index states it. A report, never a gate.

Pure logic, no network: the index's answer, ``provenance.json``, the manifest's per-file field and the
comparison with the previous lock all go through the checks here; every field is bounded plain text. The
attestations are recorded, not verified (``verified`` is always false); see docs/release-engineers.md."""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from lockbuild.errors import LockbuildError
from lockbuild.limits import MiB

MAX_PUBLISHERS = 8  # attestation bundles (one publisher each) recorded for one file
MAX_ATTESTATIONS = 64  # attestations one provenance answer may carry in all
MAX_TEXT = 256  # each publisher field, in characters
MAX_ANSWER_BYTES = MiB  # one provenance answer (numpy's is about 10 kB)
MAX_RECORD_BYTES = 16 << 20  # a lock directory's provenance.json
RECORD = "provenance.json"
RECORD_FORMAT = 1
_KIND = re.compile(r"[A-Za-z][A-Za-z0-9._-]{0,63}")
_FIELDS = ("repository", "workflow", "environment")
# A publisher's fields are shown to operators as who published a file: plain ASCII only, so that no
# homoglyph (a Cyrillic "о" in numpy/numpy) and no separator of describe() (", " and "; ") can fake one.
# GitHub and GitLab names, workflow paths and Google's service-account e-mails all fit; an environment may
# hold a space (GitHub allows one), never a comma or a semicolon.
_IDENT = re.compile(r"[A-Za-z0-9._/@+:-]*")
_ENVIRONMENT = re.compile(r"[A-Za-z0-9._/@+: -]*")
_SHA256 = re.compile(r"[0-9a-f]{64}")
MAX_STATEMENT_BYTES = 64 << 10  # one attestation's in-toto statement, decoded (PyPI's are about 1 kB)
Status = Literal["attested", "none", "not-offered"]


@dataclass(frozen=True)
class Publisher:
    """A Trusted Publisher identity. ``repository`` is the publishing repository (GitHub, GitLab) or,
    for kinds that name an account instead (Google), that account; ``workflow`` is the workflow file
    (GitLab's workflow_filepath); ``environment`` is empty when the publisher names none."""

    kind: str
    repository: str = ""
    workflow: str = ""
    environment: str = ""

    def describe(self) -> str:
        parts = [f"{self.kind} {self.repository}".strip()]
        if self.workflow:
            parts.append(f"workflow {self.workflow}")
        if self.environment:
            parts.append(f"environment {self.environment}")
        return ", ".join(parts)

    def to_json(self) -> dict[str, str]:
        return {
            "kind": self.kind,
            "repository": self.repository,
            "workflow": self.workflow,
            "environment": self.environment,
        }


@dataclass(frozen=True)
class Provenance:
    """A file's provenance as its index gave it: its publishers (none: the index says it has no
    attestations) and how many attestations it carried. Never verified here (``verified`` is false)."""

    publishers: tuple[Publisher, ...] = ()
    attestations: int = 0
    verified: bool = False

    @property
    def status(self) -> Status:
        return "attested" if self.publishers else "none"

    def describe(self) -> str:
        if not self.publishers:
            return "no attestations"
        return "; ".join(p.describe() for p in self.publishers)

    def to_json(self) -> dict[str, Any]:
        return {
            "attestations": self.attestations,
            "publishers": [p.to_json() for p in self.publishers],
            "verified": self.verified,
        }


def status_of(p: Provenance | None) -> Status:
    return "not-offered" if p is None else p.status


def _text(value: object, where: str, error: type[LockbuildError]) -> str:
    """A bounded printable string (``str.isprintable``: no category C, and no line or paragraph separator,
    U+2028/U+2029, which ``str.splitlines`` breaks at); "" for None."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise error(f"{where} is {type(value).__name__}; expected a string.")
    if len(value) > MAX_TEXT or not value.isprintable():
        raise error(f"{where} {value[:60]!r} is not plain text of at most {MAX_TEXT} characters; refused.")
    return value


def _field(value: object, where: str, error: type[LockbuildError], *, environment: bool = False) -> str:
    """A publisher's repository, workflow or environment: ``_text``, and plain ASCII (``_IDENT``)."""
    text = _text(value, where, error)
    if not (_ENVIRONMENT if environment else _IDENT).fullmatch(text):
        allowed = "letters, digits" + (", spaces" if environment else "") + " and . _ / @ + : -"
        raise error(f"{where} {text[:60]!r} holds a character other than ASCII {allowed}; refused.")
    return text


def publisher(data: Mapping[str, Any], where: str, error: type[LockbuildError]) -> Publisher:
    """A publisher from a table with kind, repository, workflow and environment (the record's and the
    manifest's form); ``error`` is raised for a wrong type, an over-long value or a control character."""
    kind = data.get("kind")
    if not isinstance(kind, str) or not _KIND.fullmatch(kind):
        raise error(f"{where}.kind {str(kind)[:40]!r} is not a plain word such as GitHub; refused.")
    unknown = sorted(set(data) - {"kind", *_FIELDS})
    if unknown:
        raise error(f"{where} has the unknown key(s) {', '.join(unknown)[:80]}; refused.")
    values = [_field(data.get(k, ""), f"{where}.{k}", error, environment=k == "environment") for k in _FIELDS]
    return Publisher(kind, *values)


def _from_index(data: Mapping[str, Any], where: str, error: type[LockbuildError]) -> Publisher:
    """A publisher as PEP 740 and PyPI's integrity API write it: GitHub's repository, workflow and
    environment; GitLab's workflow_filepath; Google's email (kept as the repository). Other keys
    (claims) are not recorded."""
    kind = data.get("kind")
    if not isinstance(kind, str) or not _KIND.fullmatch(kind):
        raise error(f"{where}.kind {str(kind)[:40]!r} is not a plain word such as GitHub; refused.")
    repository = _field(data.get("repository"), f"{where}.repository", error)
    email = _field(data.get("email"), f"{where}.email", error)
    workflow = _field(data.get("workflow"), f"{where}.workflow", error)
    filepath = _field(data.get("workflow_filepath"), f"{where}.workflow_filepath", error)
    environment = _field(data.get("environment"), f"{where}.environment", error, environment=True)
    return Publisher(kind, repository or email, workflow or filepath, environment)


def _subjects(attestation: Mapping[str, Any], where: str, error: type[LockbuildError]) -> list[str] | None:
    """The sha256 digests an attestation's in-toto statement names as its subjects (PEP 740: its
    ``envelope.statement``, base64 of the Statement JSON, ``subject: [{name, digest: {sha256}}]``); None
    when it carries no statement. Read bounded; the signature over it is not checked (no Sigstore here)."""
    envelope = attestation.get("envelope")
    statement = envelope.get("statement") if isinstance(envelope, dict) else None
    if statement is None or statement == "":
        return None
    unreadable = (
        f"{where}.envelope.statement is not base64 of an in-toto statement of at most "
        f"{MAX_STATEMENT_BYTES} bytes with a subject list; refused."
    )
    if not isinstance(statement, str) or len(statement) > MAX_STATEMENT_BYTES * 4 // 3 + 4:
        raise error(unreadable)
    try:
        doc = json.loads(base64.b64decode(statement, validate=True))
    except (binascii.Error, ValueError, RecursionError):
        raise error(unreadable) from None
    subject = doc.get("subject") if isinstance(doc, dict) else None
    if not isinstance(subject, list) or not subject or len(subject) > MAX_ATTESTATIONS:
        raise error(unreadable)
    out: list[str] = []
    for s in subject:
        digest = s.get("digest") if isinstance(s, dict) else None
        sha = digest.get("sha256") if isinstance(digest, dict) else None
        if sha is not None:
            if not isinstance(sha, str) or not _SHA256.fullmatch(sha.lower()):
                raise error(unreadable)
            out.append(sha.lower())
    return out


def parse_answer(data: Any, *, what: str, error: type[LockbuildError], sha256: str | None = None) -> Provenance:
    """A PEP 740 provenance object: ``{"version": 1, "attestation_bundles": [{"publisher": {...},
    "attestations": [...]}]}``, strictly typed and bounded. The attestations are counted, not verified;
    one whose statement names sha256 digests none of which is ``sha256`` (the locked file's) is an
    attestation of another file, and refused."""
    if not isinstance(data, dict) or data.get("version") != 1:
        raise error(f"{what} is not a PEP 740 provenance object (expected an object with version 1); refused.")
    bundles = data.get("attestation_bundles")
    if not isinstance(bundles, list):
        raise error(f"{what} has no attestation_bundles list; refused.")
    if len(bundles) > MAX_PUBLISHERS:
        raise error(f"{what} has {len(bundles)} attestation bundles; expected at most {MAX_PUBLISHERS}; refused.")
    publishers: list[Publisher] = []
    count = 0
    for i, b in enumerate(bundles):
        where = f"{what}: attestation_bundles[{i}]"
        if (
            not isinstance(b, dict)
            or not isinstance(b.get("publisher"), dict)
            or not isinstance(b.get("attestations"), list)
        ):
            raise error(f"{where} is not an object with a publisher object and an attestations list; refused.")
        if not all(isinstance(a, dict) for a in b["attestations"]):
            raise error(f"{where}.attestations holds something other than objects; refused.")
        count += len(b["attestations"])
        if count > MAX_ATTESTATIONS:
            raise error(f"{what} carries more than {MAX_ATTESTATIONS} attestations; refused.")
        for j, a in enumerate(b["attestations"]):
            digests = _subjects(a, f"{where}.attestations[{j}]", error)
            if sha256 is not None and digests and sha256.lower() not in digests:
                raise error(
                    f"{what}: attestation_bundles[{i}].attestations[{j}] names another file (sha256 "
                    f"{digests[0][:16]}..., the locked file's is {sha256[:16]}...); refused."
                )
        p = _from_index(b["publisher"], f"{where}.publisher", error)
        if p not in publishers:
            publishers.append(p)
    return Provenance(tuple(publishers), count)


def parse_recorded(data: Any, where: str, error: type[LockbuildError]) -> Provenance:
    """The form ``Provenance.to_json`` writes (the lock record, the manifest), strictly."""
    if not isinstance(data, dict) or set(data) != {"attestations", "publishers", "verified"}:
        raise error(f"{where} is not a table of attestations, publishers and verified.")
    count, pubs, verified = data["attestations"], data["publishers"], data["verified"]
    if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count <= MAX_ATTESTATIONS:
        raise error(f"{where}.attestations is not a count of 0..{MAX_ATTESTATIONS}.")
    if not isinstance(pubs, list) or len(pubs) > MAX_PUBLISHERS or not all(isinstance(p, dict) for p in pubs):
        raise error(f"{where}.publishers is not a list of at most {MAX_PUBLISHERS} tables.")
    if verified is not False:
        raise error(f"{where}.verified is not false (lockbuild records attestations, it does not verify them).")
    return Provenance(tuple(publisher(p, f"{where}.publishers[{i}]", error) for i, p in enumerate(pubs)), count)


@dataclass(frozen=True)
class Recorded:
    """One package's provenance in a lock: the file locked and what its index said of it."""

    name: str
    version: str
    filename: str
    provenance: Provenance | None  # None: the index offers no PEP 740 provenance (or the file is a URL's)


def record_json(engine: str, build: str, packages: Sequence[Recorded]) -> dict[str, Any]:
    """The lock directory's provenance.json (deterministic: packages by name)."""
    return {
        "format": RECORD_FORMAT,
        "engine": engine,
        "build": build,
        "verified": False,
        "packages": {
            r.name: {
                "version": r.version,
                "file": r.filename,
                "status": status_of(r.provenance),
                **(r.provenance.to_json() if r.provenance is not None else {}),
            }
            for r in sorted(packages, key=lambda r: r.name)
        },
    }


def parse_provenance_record(
    data: Any, where: str, error: type[LockbuildError]
) -> tuple[str, str, tuple[Recorded, ...]]:
    """(engine, build, packages) of a provenance.json that ``record_json`` wrote."""
    if not isinstance(data, dict) or data.get("format") != RECORD_FORMAT or not isinstance(data.get("packages"), dict):
        raise error(f"{where} is not a provenance record of format {RECORD_FORMAT}.")
    engine, build = data.get("engine"), data.get("build")
    if not isinstance(engine, str) or not isinstance(build, str):
        raise error(f"{where} names no engine or build.")
    out: list[Recorded] = []
    for name, entry in data["packages"].items():
        at = f"{where}: packages.{name[:60]}"
        if not isinstance(entry, dict):
            raise error(f"{at} is not a table.")
        version, filename = (
            _text(entry.get("version"), f"{at}.version", error),
            _text(entry.get("file"), f"{at}.file", error),
        )
        status = entry.get("status")
        rest = {k: v for k, v in entry.items() if k not in ("version", "file", "status")}
        if status == "not-offered" and not rest:
            prov = None
        elif status in ("attested", "none"):
            prov = parse_recorded(rest, at, error)
            if prov.status != status:
                raise error(f"{at}.status says {status}, its publishers say {prov.status}.")
        else:
            raise error(f"{at}.status {str(status)[:40]!r} is not attested, none or not-offered.")
        out.append(Recorded(_text(name, f"{where}: a package name", error), version, filename, prov))
    return engine, build, tuple(out)


def changes(previous: Sequence[Recorded], current: Sequence[Recorded]) -> list[str]:
    """The warnings a new lock gets against the previous lock of the same build: a project whose
    publishers differ, and a project that had attestations and has none now. A report, never a gate."""
    before = {r.name: r for r in previous}
    out: list[str] = []
    for now in sorted(current, key=lambda r: r.name):
        old = before.get(now.name)
        if old is None or old.provenance is None or not old.provenance.publishers:
            continue
        was = f"{old.version} was published by {old.provenance.describe()}"
        if now.provenance is None or not now.provenance.publishers:
            why = (
                "its index offers no PEP 740 provenance"
                if now.provenance is None
                else "its index says it has no attestations"
            )
            out.append(
                f"provenance: {now.name} had attestations in the previous lock and has none now ({was}; "
                f"{now.version} ({now.filename}): {why}). Check that its maintainers stopped attesting on "
                "purpose before trusting this lock (a report: the lock was written)"
            )
        elif set(now.provenance.publishers) != set(old.provenance.publishers):
            out.append(
                f"provenance: {now.name}'s publisher changed since the previous lock ({was}; {now.version} by "
                f"{now.provenance.describe()}). Check that the project moved its releases on purpose before "
                "trusting this lock (a report: the lock was written)"
            )
    return out
