"""OpenVEX documents: what a site states about a vulnerability in a product, read strictly.

``not_affected`` (justified) or ``fixed`` hides a finding and says so; ``under_investigation`` and
``affected`` keep it. A statement applies by the finding's id or alias and the purl ``pkg:pypi/NAME@VERSION``
(PEP 503 name, PEP 440 equal version); of several about one finding, the last read counts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from lockbuild.documents import loads_json
from lockbuild.errors import AdvisoryDataError
from lockbuild.fsio import read_regular
from lockbuild.limits import MiB

MAX_VEX = 16 * MiB
MAX_STATEMENTS = 100_000
Status = Literal["not_affected", "affected", "fixed", "under_investigation"]
STATUSES: tuple[Status, ...] = ("not_affected", "affected", "fixed", "under_investigation")
JUSTIFICATIONS = (
    "component_not_present",
    "vulnerable_code_not_present",
    "vulnerable_code_not_in_execute_path",
    "vulnerable_code_cannot_be_controlled_by_adversary",
    "inline_mitigations_already_exist",
)
_TIP = "Write the VEX document as OpenVEX (openvex.dev): statements with vulnerability, products and status."


@dataclass(frozen=True)
class VexStatement:
    names: frozenset[str]  # the vulnerability's name and aliases
    products: frozenset[tuple[str, str]]  # (normalised name, version) of each pkg:pypi product
    status: Status
    justification: str
    impact: str
    where: str  # FILE, statement N

    @property
    def hides(self) -> bool:
        return self.status in ("not_affected", "fixed")

    def why(self) -> str:
        reason = self.justification or self.impact
        return f"{self.status}" + (f" ({reason})" if reason else "") + f", {self.where}"


def _bad(where: str, expected: str) -> AdvisoryDataError:
    return AdvisoryDataError(f"{where}: expected {expected}.", tip=_TIP)


def _purl(text: str) -> tuple[str, str] | None:
    """(name, version) of a ``pkg:pypi/NAME@VERSION`` purl; None for another type or no version."""
    if not text.startswith("pkg:pypi/"):
        return None
    body = text.removeprefix("pkg:pypi/").split("?", 1)[0].split("#", 1)[0]
    name, at, version = body.partition("@")
    if not at or not name or not version:
        return None
    try:
        return canonicalize_name(unquote(name)), str(Version(unquote(version)))
    except InvalidVersion:
        return None


def _statement(s: Mapping[str, Any], where: str) -> VexStatement:
    v = s.get("vulnerability")
    if isinstance(v, str):  # OpenVEX before 0.2 names it as a string
        names = {v}
    elif isinstance(v, dict) and isinstance(v.get("name"), str):
        aliases = v.get("aliases", [])
        if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
            raise _bad(f"{where}.vulnerability.aliases", "a list of strings")
        names = {v["name"], *aliases}
    else:
        raise _bad(f"{where}.vulnerability", "a vulnerability with a name (an OSV id or a CVE)")
    status = s.get("status")
    if status not in STATUSES:
        raise _bad(f"{where}.status", f"one of {', '.join(STATUSES)}, found {str(status)[:40]!r}")
    raw_products = s.get("products")
    if not isinstance(raw_products, list) or not raw_products or len(raw_products) > MAX_STATEMENTS:
        raise _bad(f"{where}.products", "a list of products (pkg:pypi/NAME@VERSION)")
    products = set()
    for p in raw_products:
        ref = p.get("@id") if isinstance(p, dict) else p
        if not isinstance(ref, str):
            raise _bad(f"{where}.products", "each product a purl, or an object whose @id is one")
        got = _purl(ref)
        if got is not None:
            products.add(got)
    justification = s.get("justification", "")
    impact = s.get("impact_statement", "")
    if not isinstance(justification, str) or not isinstance(impact, str):
        raise _bad(where, "justification and impact_statement as strings")
    if justification and justification not in JUSTIFICATIONS:
        raise _bad(f"{where}.justification", f"one of {', '.join(JUSTIFICATIONS)}")
    if status == "not_affected" and not (justification or impact):
        raise _bad(where, "a justification or an impact_statement with not_affected, as OpenVEX requires")
    return VexStatement(frozenset(names), frozenset(products), status, justification, impact[:500], where)


def read_vex(path: Path) -> tuple[VexStatement, ...]:
    """The statements of the OpenVEX document at ``path``, strictly."""
    try:
        raw = read_regular(path, what="VEX document", max_size=MAX_VEX, error=AdvisoryDataError)
    except FileNotFoundError:
        raise AdvisoryDataError(f"no VEX document {path}.", tip="Check the path given to --vex.") from None
    doc = loads_json(raw, what=f"the VEX document {path}", max_bytes=MAX_VEX, error=AdvisoryDataError)
    if not isinstance(doc, dict) or not str(doc.get("@context", "")).startswith("https://openvex.dev/ns"):
        raise _bad(str(path), "an OpenVEX document (its @context https://openvex.dev/ns/...)")
    statements = doc.get("statements")
    if not isinstance(statements, list) or len(statements) > MAX_STATEMENTS:
        raise _bad(f"{path}.statements", f"a list of at most {MAX_STATEMENTS} statements")
    out = []
    for i, s in enumerate(statements):
        if not isinstance(s, dict):
            raise _bad(f"{path} statement {i + 1}", "an object")
        out.append(_statement(s, f"{path.name} statement {i + 1}"))
    return tuple(out)


def applicable(statements: Sequence[VexStatement], ids: Sequence[str], name: str, version: str) -> VexStatement | None:
    """The last statement about this finding (any of ``ids``, the package at ``version``), or None."""
    try:
        key = (canonicalize_name(name), str(Version(version)))
    except InvalidVersion:
        key = (canonicalize_name(name), version)
    found = None
    for s in statements:
        if key in s.products and not s.names.isdisjoint(ids):
            found = s
    return found
