"""build and lock ask the OSV service (a fake one on 127.0.0.1) and write a signed report beside the bundle."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from click.testing import CliRunner
from conftest import Keys
from osvkit import FakeOSV, record

from lockbuild.cli import main

REPORT = "toyengine-1.0-cpu-{}.lbz.vulns.cdx.json"


@pytest.fixture
def osv(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOSV]:
    service = FakeOSV(page_size=1)  # one id a page: every look-up follows next_page_token
    monkeypatch.setenv("LOCKBUILD_OSV_URL", service.url)
    yield service
    service.close()


def cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def build(recipe: Path, key: Path, out: Path, *extra: str, env: dict[str, str] | None = None) -> dict:
    code, stdout, stderr = cli("build", str(recipe), "--key", str(key), "--out", str(out), "--json", *extra, env=env)
    assert code == 0, stderr
    return json.loads(stdout)["bundles"][0]


def test_a_build_writes_a_signed_report_naming_the_findings_against_the_sbom(
    env, osv: FakeOSV, keys: Keys, toy_recipe: Path, tmp_path: Path
) -> None:
    osv.add(
        record("GHSA-1111-2222-3333", "toydep", fixed="1.1", aliases=["CVE-2026-0001"]),
        record("PYSEC-2026-7", "toyengine", introduced="0.5", last_affected="1.0"),
        record("GHSA-4444-5555-6666", "toydep", fixed="0.9"),  # an older release only
        record("GHSA-7777-8888-9999", "toydep", fixed="2.0", withdrawn="2026-01-03T00:00:00Z"),
    )
    out = tmp_path / "dist"
    got = build(toy_recipe, keys.secret, out)
    v = got["vulnerabilities"]
    assert v["status"] == "checked" and v["packages"] >= 2
    assert [(f["id"], f["package"], f["version"], f["fixed_in"]) for f in v["findings"]] == [
        ("GHSA-1111-2222-3333", "toydep", "1.0", ["1.1"]),
        ("PYSEC-2026-7", "toyengine", "1.0", []),
    ]
    assert v["findings"][0]["aliases"] == ["CVE-2026-0001"]
    report = Path(got["vulnerability_report"])
    assert report.name == REPORT.format(got["bundle"].split("cpu-")[1].removesuffix(".lbz"))
    assert report.parent == out and Path(str(report) + ".minisig").is_file()
    doc = json.loads(report.read_text())
    pytest.importorskip("cyclonedx")
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    assert JsonStrictValidator(SchemaVersion.V1_5).validate_str(report.read_text()) is None
    # the affects point at the bundle's own SBOM components by BOM-link
    root = tmp_path / "root"
    code, _, stderr = cli("install", got["bundle"], "--root", str(root), "--trust", str(keys.trust))
    assert code == 0, stderr
    sbom = json.loads((root / "toyengine" / "1.0-cpu" / "lockbuild" / "sbom.cdx.json").read_text())
    base = f"urn:cdx:{sbom['serialNumber'].removeprefix('urn:uuid:')}/{sbom['version']}#"
    refs = {base + quote(c["bom-ref"], safe="") for c in sbom["components"]}
    affects = [a["ref"] for vuln in doc["vulnerabilities"] for a in vuln["affects"]]
    assert affects and set(affects) <= refs
    assert [x["id"] for x in doc["vulnerabilities"]] == ["GHSA-1111-2222-3333", "PYSEC-2026-7"]
    props = {p["name"]: p["value"] for p in doc["metadata"]["properties"]}
    assert props["lockbuild:bundle-sha256"] == got["sha256"] and props["lockbuild:osv-service"] == osv.url
    assert osv.gets and all("page_token" in q for b in osv.queries[1:] for q in b["queries"])
    # the signature's statement binds the report, the bundle and the query time; stock minisign verifies it
    if shutil.which("minisign"):
        shown = subprocess.run(
            ["minisign", "-Vm", str(report), "-p", str(keys.public)], capture_output=True, text=True, check=True
        ).stdout
        assert f"bundle-sha256={got['sha256']}" in shown and "queried=" in shown
    code, stdout, _ = cli("build", str(toy_recipe), "--key", str(keys.secret), "--out", str(tmp_path / "txt"))
    assert code == 0
    assert "2 known vulnerabilities in " in stdout
    assert "GHSA-1111-2222-3333 (toydep 1.0, fixed in 1.1), PYSEC-2026-7 (toyengine 1.0, no fixed version)" in stdout


def test_lock_prints_the_line_and_json_carries_it(env, osv: FakeOSV, toy_recipe: Path, tmp_path: Path) -> None:
    osv.add(record("GHSA-1111-2222-3333", "toydep", fixed="1.1"))
    code, stdout, stderr = cli("lock", str(toy_recipe), "--out", str(tmp_path / "l"))
    assert code == 0, stderr
    assert "1 known vulnerability in " in stdout and "GHSA-1111-2222-3333 (toydep 1.0, fixed in 1.1)" in stdout
    code, stdout, _ = cli("lock", str(toy_recipe), "--out", str(tmp_path / "l"), "--json")
    assert json.loads(stdout)["locks"][0]["vulnerabilities"]["findings"][0]["id"] == "GHSA-1111-2222-3333"


def test_an_unreachable_service_is_not_checked_and_the_bundle_is_the_same(
    env, osv: FakeOSV, keys: Keys, toy_recipe: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    osv.add(record("GHSA-1111-2222-3333", "toydep", fixed="1.1"))
    seen = build(toy_recipe, keys.secret, tmp_path / "a")
    monkeypatch.setenv("LOCKBUILD_OSV_URL", "http://127.0.0.1:9")  # nothing listens there
    started = time.monotonic()
    blind = build(toy_recipe, keys.secret, tmp_path / "b")
    assert time.monotonic() - started < 60
    assert blind["sha256"] == seen["sha256"]
    assert blind["vulnerabilities"]["status"] == "not checked" and blind["vulnerabilities"]["findings"] == []
    doc = json.loads(Path(blind["vulnerability_report"]).read_text())
    props = {p["name"]: p["value"] for p in doc["metadata"]["properties"]}
    assert props["lockbuild:status"] == "not checked" and "127.0.0.1:9" in props["lockbuild:reason"]
    assert doc["vulnerabilities"] == []
    code, stdout, _ = cli("build", str(toy_recipe), "--key", str(keys.secret), "--out", str(tmp_path / "c"))
    assert code == 0 and "vulnerabilities not checked (" in stdout and "known vulnerabilities" not in stdout


def test_none_turns_the_look_up_off(env, osv: FakeOSV, keys: Keys, toy_recipe: Path, tmp_path: Path) -> None:
    got = build(toy_recipe, keys.secret, tmp_path / "a", env={"LOCKBUILD_OSV_URL": "none"})
    assert "vulnerabilities" not in got and osv.queries == []
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [
        Path(got["bundle"]).name,
        Path(got["bundle"]).name + ".minisig",
    ]


@pytest.mark.parametrize("url", ["http://osv.example.com", "ftp://127.0.0.1/", "https://user:pw@osv.example/"])
def test_the_service_is_https_or_loopback(env, keys: Keys, toy_recipe: Path, tmp_path: Path, url: str) -> None:
    code, _, stderr = cli("lock", str(toy_recipe), "--out", str(tmp_path / "l"), env={"LOCKBUILD_OSV_URL": url})
    assert code != 0 and "LOCKBUILD_OSV_URL" in stderr and "Traceback" not in stderr


def test_fail_on_vulnerabilities_leaves_no_bundle(
    env, osv: FakeOSV, keys: Keys, toy_recipe: Path, tmp_path: Path
) -> None:
    osv.add(record("GHSA-1111-2222-3333", "toydep", fixed="1.1"))
    out = tmp_path / "dist"
    code, _, stderr = cli(
        "build", str(toy_recipe), "--key", str(keys.secret), "--out", str(out), "--fail-on-vulnerabilities"
    )
    assert code == 7 and "GHSA-1111-2222-3333" in stderr and "No bundle was written" in stderr
    assert not out.exists() or list(out.iterdir()) == []
    osv.records.clear()
    assert build(toy_recipe, keys.secret, out, "--fail-on-vulnerabilities")["vulnerabilities"]["findings"] == []


def test_a_rebuild_a_day_later_gives_the_same_bundle_and_a_new_report(
    env, osv: FakeOSV, keys: Keys, toy_recipe: Path, tmp_path: Path
) -> None:
    out = tmp_path / "dist"
    first = build(toy_recipe, keys.secret, out)
    report = Path(first["vulnerability_report"])
    before = report.read_bytes()
    assert first["vulnerabilities"]["findings"] == []
    osv.add(record("GHSA-1111-2222-3333", "toydep", fixed="1.1"))  # published in the meantime
    time.sleep(1.1)  # the query time is to the second
    second = build(toy_recipe, keys.secret, out)
    assert second["sha256"] == first["sha256"]
    assert [f["id"] for f in second["vulnerabilities"]["findings"]] == ["GHSA-1111-2222-3333"]
    assert report.read_bytes() != before and second["vulnerabilities"]["queried"] > first["vulnerabilities"]["queried"]


def test_a_service_that_never_answers_costs_the_deadline_only(
    env, keys: Keys, toy_recipe: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    from lockbuild.fetch import osvclient as osvquery

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # connections are taken by the kernel and never answered
    monkeypatch.setenv("LOCKBUILD_OSV_URL", f"http://127.0.0.1:{silent.getsockname()[1]}")
    monkeypatch.setattr(osvquery, "DEADLINE", 2.0)
    try:
        started = time.monotonic()
        code, stdout, stderr = cli("lock", str(toy_recipe), "--out", str(tmp_path / "l"), "--json")
        took = time.monotonic() - started
    finally:
        silent.close()
    assert code == 0, stderr
    got = json.loads(stdout)["locks"][0]["vulnerabilities"]
    assert got["status"] == "not checked" and "did not answer within 2 s" in got["reason"]
    assert took < 25
