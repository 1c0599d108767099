"""lockbuild audit, offline: the signatures first, a database carried in later, VEX statements, hostile input."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import Keys, make_keys
from osvkit import FakeOSV, record

from lockbuild.cli import main


@pytest.fixture
def osv(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOSV]:
    service = FakeOSV()
    monkeypatch.setenv("LOCKBUILD_OSV_URL", service.url)
    yield service
    service.close()


def cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


OLD = record("GHSA-1111-2222-3333", "toydep", fixed="1.1", aliases=["CVE-2026-0001"])
NEW = record("GHSA-9999-8888-7777", "toyengine", introduced="0.1", fixed="1.0.1", aliases=["CVE-2026-0042"])


@pytest.fixture
def built(env, osv: FakeOSV, keys: Keys, toy_recipe: Path, tmp_path: Path) -> Path:
    """A bundle whose signed report names OLD; NEW is published after its query time."""
    osv.add(OLD)
    code, stdout, stderr = cli(
        "build", str(toy_recipe), "--key", str(keys.secret), "--out", str(tmp_path / "dist"), "--json"
    )
    assert code == 0, stderr
    return Path(json.loads(stdout)["bundles"][0]["bundle"])


def database(tmp_path: Path, *records: dict, as_zip: bool = False) -> Path:
    if as_zip:
        z = tmp_path / "all.zip"
        with zipfile.ZipFile(z, "w", zipfile.ZIP_DEFLATED) as zf:
            for r in records:
                zf.writestr(f"{r['id']}.json", json.dumps(r))
        return z
    d = tmp_path / "osv"
    d.mkdir()
    for r in records:
        (d / f"{r['id']}.json").write_text(json.dumps(r))
    return d


def vex(tmp_path: Path, *statements: dict, name: str = "site.vex.json") -> Path:
    doc = {
        "@context": "https://openvex.dev/ns/v0.2.0",
        "@id": "https://example.invalid/vex/1",
        "author": "security@example.invalid",
        "timestamp": "2026-02-01T00:00:00Z",
        "version": 1,
        "statements": list(statements),
    }
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


def statement(vuln: str, product: str, status: str, **extra: str) -> dict:
    return {"vulnerability": {"name": vuln}, "products": [{"@id": product}], "status": status, **extra}


def test_audit_finds_an_advisory_published_after_the_report_and_vex_hides_it(
    built: Path, keys: Keys, tmp_path: Path
) -> None:
    db = database(tmp_path, OLD, NEW, as_zip=True)
    code, stdout, stderr = cli("audit", str(built), "--osv", str(db), "--trust", str(keys.trust), "--json")
    assert code == 7, stderr
    out = json.loads(stdout)
    got = {f["id"]: f for f in out["findings"]}
    assert got["GHSA-1111-2222-3333"]["in_report"] is True
    assert got["GHSA-9999-8888-7777"]["in_report"] is False
    assert got["GHSA-9999-8888-7777"]["known"].startswith("new since ")
    assert got["GHSA-9999-8888-7777"]["aliases"] == ["CVE-2026-0042"]
    assert got["GHSA-9999-8888-7777"]["fixed_in"] == ["1.0.1"]
    assert out["report"]["status"] == "checked" and out["open"] == 2
    doc = vex(
        tmp_path,
        statement(
            "CVE-2026-0042",
            "pkg:pypi/toyengine@1.0",
            "not_affected",
            justification="vulnerable_code_not_in_execute_path",
        ),
        statement("GHSA-1111-2222-3333", "pkg:pypi/toydep@1.0", "fixed"),
    )
    code, stdout, _ = cli("audit", str(built), "--osv", str(db), "--trust", str(keys.trust), "--vex", str(doc))
    assert code == 0
    assert "hidden by VEX: not_affected (vulnerable_code_not_in_execute_path)" in stdout
    assert "GHSA-9999-8888-7777 [CVE-2026-0042]: toyengine 1.0" in stdout and "NEW since" in stdout


@pytest.mark.parametrize("status", ["under_investigation", "affected"])
def test_vex_statements_that_keep_the_finding(built: Path, keys: Keys, tmp_path: Path, status: str) -> None:
    db = database(tmp_path, NEW)
    doc = vex(tmp_path, statement("GHSA-9999-8888-7777", "pkg:pypi/toyengine@1.0", status))
    code, stdout, _ = cli(
        "audit", str(built), "--osv", str(db), "--trust", str(keys.trust), "--vex", str(doc), "--json"
    )
    assert code == 7
    f = json.loads(stdout)["findings"][0]
    assert f["hidden_by_vex"] is False and f["vex"].startswith(status)


def test_vex_for_another_version_or_package_hides_nothing(built: Path, keys: Keys, tmp_path: Path) -> None:
    db = database(tmp_path, NEW)
    doc = vex(
        tmp_path,
        statement(
            "GHSA-9999-8888-7777", "pkg:pypi/toyengine@0.9", "not_affected", justification="component_not_present"
        ),
        statement("GHSA-9999-8888-7777", "pkg:npm/toyengine@1.0", "fixed"),
    )
    code, _, _ = cli("audit", str(built), "--osv", str(db), "--trust", str(keys.trust), "--vex", str(doc))
    assert code == 7


@pytest.mark.parametrize(
    "bad",
    [
        statement("X", "pkg:pypi/toyengine@1.0", "not_affected"),  # no justification
        statement("X", "pkg:pypi/toyengine@1.0", "wontfix"),
        statement("X", "pkg:pypi/toyengine@1.0", "not_affected", justification="because"),
        {"products": ["pkg:pypi/toyengine@1.0"], "status": "fixed"},
    ],
)
def test_a_bad_vex_document_is_exit_2(built: Path, keys: Keys, tmp_path: Path, bad: dict) -> None:
    code, stdout, _ = cli("audit", str(built), "--trust", str(keys.trust), "--vex", str(vex(tmp_path, bad)), "--json")
    assert code == 2 and "expected" in json.loads(stdout)["error"]["message"]


def test_without_a_database_the_signed_reports_records_are_checked(built: Path, keys: Keys) -> None:
    code, stdout, _ = cli("audit", str(built), "--trust", str(keys.trust), "--json")
    assert code == 7 and [f["id"] for f in json.loads(stdout)["findings"]] == ["GHSA-1111-2222-3333"]


def test_withdrawn_and_unrelated_records_count_for_nothing(built: Path, keys: Keys, tmp_path: Path) -> None:
    gone = record("GHSA-9999-8888-7777", "toyengine", fixed="2", withdrawn="2026-02-01T00:00:00Z")
    other = record("PYSEC-2026-99", "otherpkg", fixed="9")
    code, stdout, _ = cli(
        "audit", str(built), "--osv", str(database(tmp_path, gone, other)), "--trust", str(keys.trust)
    )
    assert code == 0 and "0 vulnerabilities apply" in stdout


def test_signatures_first_a_bundle_or_report_not_trusted_is_exit_3(built: Path, keys: Keys, tmp_path: Path) -> None:
    stranger = make_keys(tmp_path / "other", "stranger")
    db = database(tmp_path, NEW)
    code, _, stderr = cli("audit", str(built), "--osv", str(db), "--trust", str(stranger.trust))
    assert code == 3 and "signature policy not met" in stderr
    report = Path(str(built) + ".vulns.cdx.json")
    doc = json.loads(report.read_text())
    doc["vulnerabilities"] = []  # the report altered: the finding it named removed
    report.write_text(json.dumps(doc))
    code, _, stderr = cli("audit", str(built), "--osv", str(db), "--trust", str(keys.trust))
    assert code == 3 and "report" in stderr


def test_a_report_of_another_bundle_is_refused(built: Path, keys: Keys, toy_recipe: Path, tmp_path: Path) -> None:
    recipe = tmp_path / "r2.toml"  # the same build name, another cut-off: another bundle, validly signed
    recipe.write_text(
        toy_recipe.read_text().replace('variant = "cpu"', 'variant = "cpu"\nas-of = "2026-01-01T00:00:00Z"')
    )
    code, stdout, stderr = cli("build", str(recipe), "--key", str(keys.secret), "--out", str(tmp_path / "o"), "--json")
    assert code == 0, stderr
    theirs = Path(json.loads(stdout)["bundles"][0]["vulnerability_report"])
    ours = Path(str(built) + ".vulns.cdx.json")
    assert theirs.name == ours.name
    shutil.copy(theirs, ours)
    shutil.copy(str(theirs) + ".minisig", str(ours) + ".minisig")
    code, _, stderr = cli("audit", str(built), "--trust", str(keys.trust))
    assert code == 3 and "expected" in stderr and "the bundle audited" in stderr


@pytest.mark.parametrize(
    "hostile",
    ["../evil.json", "/abs.json", "dir/x.json", "notjson.txt"],
)
def test_a_hostile_zip_is_exit_2_and_writes_nothing(built: Path, keys: Keys, tmp_path: Path, hostile: str) -> None:
    z = tmp_path / "all.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr(hostile, json.dumps(NEW))
    before = sorted(p for p in tmp_path.rglob("*"))
    code, stdout, _ = cli("audit", str(built), "--osv", str(z), "--trust", str(keys.trust), "--json")
    message = json.loads(stdout)["error"]["message"]
    assert code == 2 and ("expected" in message or "not an OSV record" in message)
    assert sorted(p for p in tmp_path.rglob("*")) == before
    assert not (tmp_path.parent / "evil.json").exists()


def test_a_zip_bomb_is_refused_by_what_it_decompresses(built: Path, keys: Keys, tmp_path: Path) -> None:
    z = tmp_path / "all.zip"
    with zipfile.ZipFile(z, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("BOMB-1.json", b" " * (64 << 20))
    assert z.stat().st_size < 1 << 20
    code, stdout, _ = cli("audit", str(built), "--osv", str(z), "--trust", str(keys.trust), "--json")
    assert code == 2 and "decompressed" in json.loads(stdout)["error"]["message"]


@pytest.mark.parametrize(
    "raw",
    [
        b"{",
        b"[]",
        b'{"id": "GHSA-x", "modified": "2026"}' + b" " * 10,
        json.dumps(
            {
                **NEW,
                "affected": [
                    {
                        "package": {"ecosystem": "PyPI", "name": "toyengine"},
                        "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "not-a-version"}]}],
                    }
                ],
            }
        ).encode(),
    ],
)
def test_a_hostile_record_is_exit_2(built: Path, keys: Keys, tmp_path: Path, raw: bytes) -> None:
    d = tmp_path / "osv"
    d.mkdir()
    (d / "X.json").write_bytes(raw)
    code, stdout, _ = cli("audit", str(built), "--osv", str(d), "--trust", str(keys.trust), "--json")
    assert code == 2 and json.loads(stdout)["ok"] is False


def test_a_record_through_a_link_is_refused(built: Path, keys: Keys, tmp_path: Path) -> None:
    d = database(tmp_path, NEW)
    (tmp_path / "secret.json").write_text(json.dumps(OLD))
    (d / "LINK.json").symlink_to(tmp_path / "secret.json")
    code, _, _ = cli("audit", str(built), "--osv", str(d), "--trust", str(keys.trust))
    assert code == 2


def test_audit_runs_without_a_network(built: Path, keys: Keys, tmp_path: Path) -> None:
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-rn", "true"], check=False).returncode != 0:
        pytest.skip("unshare -rn is not available here")
    db = database(tmp_path, OLD, NEW, as_zip=True)
    argv = ["unshare", "-rn", sys.executable, "-m", "lockbuild", "audit", str(built), "--osv", str(db)]
    ran = subprocess.run([*argv, "--trust", str(keys.trust)], capture_output=True, text=True, check=False)
    assert ran.returncode == 7, ran.stderr
    assert "GHSA-9999-8888-7777" in ran.stdout and "NEW since" in ran.stdout


def test_import_keeps_the_report_and_a_store_build_is_audited(built: Path, keys: Keys, tmp_path: Path) -> None:
    store = tmp_path / "store"
    code, _, stderr = cli("import", str(built), "--trust", str(keys.trust), "--store", str(store))
    assert code == 0, stderr
    db = database(tmp_path, OLD, NEW)
    code, stdout, stderr = cli(
        "audit", "toyengine/1.0-cpu", "--store", str(store), "--osv", str(db), "--trust", str(keys.trust), "--json"
    )
    assert code == 7, stderr
    out = json.loads(stdout)
    assert out["report"]["status"] == "checked"
    code, stdout, _ = cli("store", "list", "--store", str(store))
    assert code == 0 and "vulnerabilities: 1 known as of " in stdout
    code, stdout, _ = cli("inspect", str(built))
    assert code == 0 and "vulnerabilities: 1 known as of " in stdout
    code, stdout, _ = cli("inspect", "toyengine/1.0-cpu", "--store", str(store), "--json")
    assert json.loads(stdout)["vulnerabilities"]["known"] == 1
    assert {f["id"]: f["in_report"] for f in out["findings"]} == {
        "GHSA-1111-2222-3333": True,
        "GHSA-9999-8888-7777": False,
    }


def test_report_refreshes_the_report_without_touching_the_bundle(
    built: Path, keys: Keys, osv: FakeOSV, tmp_path: Path
) -> None:
    before = built.read_bytes()
    osv.add(NEW)
    code, stdout, stderr = cli("report", str(built), "--key", str(keys.secret), "--json")
    assert code == 0, stderr
    got = json.loads(stdout)
    assert [f["id"] for f in got["vulnerabilities"]["findings"]] == ["GHSA-1111-2222-3333", "GHSA-9999-8888-7777"]
    assert built.read_bytes() == before
    code, stdout, _ = cli("audit", str(built), "--trust", str(keys.trust), "--json")
    assert code == 7 and all(f["in_report"] for f in json.loads(stdout)["findings"])


@pytest.mark.parametrize("text", ["[]", '{"metadata": 1}', '{"metadata": {"properties": [1]}, "vulnerabilities": [1]}'])
def test_inspect_shows_a_malformed_report_as_unreadable(built: Path, text: str) -> None:
    Path(str(built) + ".vulns.cdx.json").write_text(text)
    code, stdout, stderr = cli("inspect", str(built), "--json")
    assert code == 0, stderr
    assert json.loads(stdout)["vulnerabilities"]["status"] == "unreadable"
