"""OSV records: the strict reader and OSV's matching rule (ranges, explicit versions, withdrawn)."""

from __future__ import annotations

import json

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from osvkit import check_schema, record

from lockbuild.errors import AdvisoryDataError
from lockbuild.vulns.osv import parse_record, read_record


def rec(**kw: object) -> object:
    return parse_record(record("GHSA-aaaa-bbbb-cccc", "Jinja2", **kw), where="test")  # type: ignore[arg-type]


def test_introduced_and_fixed_bound_the_range_with_pep440_ordering() -> None:
    r = rec(introduced="3.0.0", fixed="3.1.5")
    assert r.matches("jinja2", "3.1.4")
    assert r.matches("JINJA2", "3.0.0")  # PEP 503 names
    assert r.matches("jinja2", "3.1.5rc1")  # a pre-release before the fix is affected (PEP 440)
    assert not r.matches("jinja2", "3.1.5")
    assert not r.matches("jinja2", "3.1.10")  # 10 > 5, not a string comparison
    assert not r.matches("jinja2", "2.11.3")
    assert not r.matches("markupsafe", "3.1.4")
    assert r.fixed_in("jinja2") == ("3.1.5",)


def test_last_affected_includes_that_version_and_nothing_after() -> None:
    r = rec(introduced="0", last_affected="2.0")
    assert r.matches("jinja2", "0.1") and r.matches("jinja2", "2.0")
    assert not r.matches("jinja2", "2.0.post1")
    assert r.fixed_in("jinja2") == ()


def test_explicit_versions_match_outside_any_range() -> None:
    r = rec(introduced="5.0", fixed="5.1", versions=["1.0", "2.0.0"])
    assert r.matches("jinja2", "1.0") and r.matches("jinja2", "2.0")  # 2.0 == 2.0.0 under PEP 440
    assert not r.matches("jinja2", "1.5")


def test_a_withdrawn_record_matches_nothing() -> None:
    assert not rec(withdrawn="2026-02-01T00:00:00Z").matches("jinja2", "1.0")


def test_several_introduced_fixed_pairs_in_one_range() -> None:
    raw = record("PYSEC-2026-1", "pkg", introduced="1.0", fixed="1.2")
    raw["affected"][0]["ranges"][0]["events"] += [{"introduced": "2.0"}, {"fixed": "2.3"}]
    r = parse_record(check_schema(raw), where="t")
    assert [r.matches("pkg", v) for v in ("0.9", "1.1", "1.5", "2.0", "2.2.9", "2.3")] == [
        False,
        True,
        False,
        True,
        True,
        False,
    ]


def test_other_ecosystems_are_ignored_not_parsed() -> None:
    raw = record("GHSA-aaaa-bbbb-dddd", "pkg", fixed="2")
    raw["affected"].append(
        {
            "package": {"ecosystem": "npm", "name": "pkg"},
            "ranges": [{"type": "SEMVER", "events": [{"introduced": "^x"}]}],
        }
    )
    r = parse_record(check_schema(raw), where="t")
    assert r.matches("pkg", "1") and len(r.affected) == 1


@pytest.mark.parametrize(
    "change",
    [
        lambda r: r.pop("id"),
        lambda r: r.update(id="../../etc/passwd"),
        lambda r: r.update(aliases="CVE-1"),
        lambda r: r["affected"][0]["ranges"][0].update(events=[]),
        lambda r: r["affected"][0]["ranges"][0]["events"].append({"fixed": "not a version"}),
        lambda r: r["affected"][0]["ranges"][0]["events"].append({"introduced": "1", "fixed": "2"}),
        lambda r: r["affected"][0]["ranges"][0].update(type="WHATEVER"),
        lambda r: r["affected"][0].update(versions=["1"] * 200_001),
    ],
)
def test_a_malformed_record_is_refused_with_what_was_expected(change) -> None:
    raw = record("GHSA-aaaa-bbbb-eeee", "pkg", fixed="2")
    change(raw)
    with pytest.raises(AdvisoryDataError, match="expected"):
        parse_record(raw, where="db")


def test_a_deep_or_huge_record_is_refused_before_parsing() -> None:
    with pytest.raises(AdvisoryDataError, match="nests deeper"):
        read_record(b"[" * 100_000, where="r.json")
    with pytest.raises(AdvisoryDataError, match="bytes: expected at most"):
        read_record(b" " * (9 << 20), where="r.json")
    with pytest.raises(AdvisoryDataError, match="not valid JSON"):
        read_record(b"{", where="r.json")


versions = st.tuples(st.integers(0, 20), st.integers(0, 20), st.integers(0, 20)).map(lambda t: ".".join(map(str, t)))


@given(versions, versions, versions)
def test_matching_is_the_interval_introduced_to_fixed(lo: str, hi: str, v: str) -> None:
    from packaging.version import Version

    assume(Version(lo) < Version(hi))  # OSV sorts the events: a fix below the introduction bounds nothing
    r = rec(introduced=lo, fixed=hi)
    assert r.matches("jinja2", v) == (Version(lo) <= Version(v) < Version(hi))
    r = rec(introduced=lo, last_affected=hi)
    assert r.matches("jinja2", v) == (Version(lo) <= Version(v) <= Version(hi))


def test_records_as_received_survive_json() -> None:
    r = rec(fixed="3")
    from lockbuild.vulns.osv import record_json

    assert parse_record(json.loads(record_json(r)), where="again") == r
