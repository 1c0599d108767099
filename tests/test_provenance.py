"""PEP 740 provenance (issue 28): the publisher each locked file's index states, recorded in the lock, the
manifest and the SBOM; a changed or vanished publisher is reported by the next lock (never a gate); an
index without provenance still locks; a hostile answer is bounded and refused; inspect shows it offline."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from conftest import PLATFORM, PY, TOY_RECIPE, Keys, day, publish_toy
from servers import FakeServer, github_publisher, make_wheel, provenance_doc

from lockbuild.builder.index import Index
from lockbuild.builder.provenance import fetch_provenance
from lockbuild.bundle.manifest import parse_manifest
from lockbuild.cli import main
from lockbuild.errors import IntegrityError, RemoteError
from lockbuild.provenance import MAX_ANSWER_BYTES, Provenance, Publisher

ENGINE_FILE = "toyengine-1.0-py3-none-any.whl"
PUBLISHER = {"kind": "GitHub", "repository": "toy/toyengine", "workflow": "release.yml", "environment": "pypi"}


def cli(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


@pytest.fixture
def pv(srv: FakeServer, monkeypatch: pytest.MonkeyPatch) -> FakeServer:
    """The toy engine on a primary index that offers PEP 740 provenance (like PyPI): toyengine's wheel is
    attested by toy/toyengine's release.yml; toydep's entry says null (no attestations)."""
    publish_toy(srv)
    srv.pep740.add("primary")
    srv.provenance[("primary", ENGINE_FILE)] = provenance_doc(github_publisher("toy/toyengine"), attestations=2)
    monkeypatch.setenv("LOCKBUILD_INDEX_URL", srv.index_url())
    monkeypatch.setenv("LOCKBUILD_GITHUB_API", srv.github_api)
    monkeypatch.setenv("LOCKBUILD_GITHUB_DOWNLOAD", srv.github_download)
    return srv


@pytest.fixture
def recipe(tmp_path: Path) -> Path:
    p = tmp_path / "toyengine.toml"
    p.write_text(TOY_RECIPE)
    return p


def lock_json(recipe: Path, out: Path) -> dict[str, object]:
    code, stdout, stderr = cli("lock", str(recipe), "--out", str(out), "--json")
    assert code == 0, stderr
    doc: dict[str, object] = json.loads(stdout)
    return doc


def packages(doc: dict[str, object]) -> dict[str, dict[str, object]]:
    return {p["name"]: p for p in doc["locks"][0]["packages"]}  # type: ignore[index]


def test_a_lock_records_the_publisher_in_json_text_and_the_lock_dir(pv: FakeServer, recipe: Path, tmp_path: Path) -> None:
    doc = lock_json(recipe, tmp_path / "out")
    pkgs = packages(doc)
    assert pkgs["toyengine"]["provenance"] == {"attestations": 2, "publishers": [PUBLISHER], "verified": False}
    assert pkgs["toydep"]["provenance"] == {"attestations": 0, "publishers": [], "verified": False}  # null
    assert doc["locks"][0]["warnings"] == []  # type: ignore[index]
    asked = [(p, h) for p, h in pv.request_headers if "/integrity/" in p]
    assert [p for p, _ in asked] == [f"/primary/integrity/toyengine/1.0/{ENGINE_FILE}/provenance"]
    assert asked[0][1]["accept"] == "application/vnd.pypi.integrity.v1+json"
    record = json.loads((tmp_path / "out" / "1.0-cpu" / "provenance.json").read_text())
    assert record["packages"]["toyengine"] == {
        "version": "1.0", "file": ENGINE_FILE, "status": "attested", "attestations": 2, "publishers": [PUBLISHER],
        "verified": False}
    assert record["packages"]["toydep"]["status"] == "none" and record["verified"] is False

    code, stdout, stderr = cli("lock", str(recipe), "--out", str(tmp_path / "text"))
    assert code == 0, stderr
    assert "provenance (PEP 740, as the index states it, unverified): 1 of 2 packages attested" in stdout
    assert "toyengine 1.0: GitHub toy/toyengine, workflow release.yml, environment pypi" in stdout
    assert "warning" not in stderr


def _relock_both_ways(recipe: Path, out: Path) -> tuple[list[str], str]:
    """The next lock's warnings under --json (into ``out``) and in text (into a copy of it, its stderr)."""
    copy = out.parent / (out.name + "-text")
    shutil.copytree(out, copy)
    warnings: list[str] = lock_json(recipe, out)["locks"][0]["warnings"]  # type: ignore[index]
    code, _, stderr = cli("lock", str(recipe), "--out", str(copy))
    assert code == 0, stderr  # a report, never a gate
    return warnings, stderr


def test_a_changed_publisher_is_reported_in_text_and_json(pv: FakeServer, recipe: Path, tmp_path: Path) -> None:
    lock_json(recipe, tmp_path / "out")
    pv.provenance[("primary", ENGINE_FILE)] = provenance_doc(github_publisher("someone-else/toyengine", "ci.yml"))
    warnings, stderr = _relock_both_ways(recipe, tmp_path / "out")
    said = ("provenance: toyengine's publisher changed since the previous lock (1.0 was published by GitHub "
            "toy/toyengine, workflow release.yml, environment pypi; 1.0 by GitHub someone-else/toyengine, "
            "workflow ci.yml, environment pypi)")
    assert len(warnings) == 1 and warnings[0].startswith(said), warnings
    assert f"warning: {said}" in stderr
    record = json.loads((tmp_path / "out" / "1.0-cpu" / "provenance.json").read_text())
    assert record["packages"]["toyengine"]["publishers"][0]["repository"] == "someone-else/toyengine"
    assert lock_json(recipe, tmp_path / "out")["locks"][0]["warnings"] == []  # type: ignore[index]  # said once


@pytest.mark.parametrize("gone", ["null", "404"])
def test_vanished_attestations_are_reported_in_text_and_json(
    pv: FakeServer, recipe: Path, tmp_path: Path, gone: str
) -> None:
    lock_json(recipe, tmp_path / "out")
    if gone == "null":
        del pv.provenance[("primary", ENGINE_FILE)]  # the page says "provenance": null
    else:
        pv.provenance[("primary", ENGINE_FILE)] = None  # the page names a URL that answers 404
    warnings, stderr = _relock_both_ways(recipe, tmp_path / "out")
    said = "provenance: toyengine had attestations in the previous lock and has none now"
    assert len(warnings) == 1 and warnings[0].startswith(said), warnings
    assert "its index says it has no attestations" in warnings[0]
    assert f"warning: {said}" in stderr


def test_an_index_without_provenance_still_locks_with_nothing_recorded(
    pv: FakeServer, tmp_path: Path
) -> None:
    """The second index (no upload times, like PyTorch's) has no provenance key: nothing is asked there."""
    pv.publish(*make_wheel("pvgpu", "1.0", deps=("pvtorch",)), uploaded=day(2))
    pv.publish(*make_wheel("pvtorch", "1.0"), index="second")
    path = tmp_path / "pv.toml"
    path.write_text(
        f'[engine]\nname = "pvgpu"\npypi = "pvgpu"\nbinary = "pvgpu"\nverify = ["pvgpu"]\n\n'
        f'[[builds]]\nversion = "1.0"\nvariant = "gpu"\npython = "{PY}"\nplatform = "{PLATFORM}"\n'
        f'requirements = ["pvgpu==1.0", "pvtorch==1.0"]\n'
        f'index = {{ url = "{pv.index_url("second")}", packages = ["pvtorch"] }}\n'
    )
    pkgs = packages(lock_json(path, tmp_path / "out"))
    assert pkgs["pvtorch"]["provenance"] is None and pkgs["pvtorch"]["index"] == "second"
    assert pkgs["pvgpu"]["provenance"] == {"attestations": 0, "publishers": [], "verified": False}
    assert not [p for p in pv.requests if "/integrity/" in p]
    pv.pep740.clear()  # an index that offers no provenance at all says so, once
    code, stdout, stderr = cli("lock", str(path), "--out", str(tmp_path / "text"))
    assert code == 0, stderr
    assert "provenance (PEP 740): the index offers none for these 2 packages (nothing recorded)" in stdout
    record = json.loads((tmp_path / "out" / "1.0-gpu" / "provenance.json").read_text())
    assert record["packages"]["pvtorch"] == {"version": "1.0", "file": "pvtorch-1.0-py3-none-any.whl",
                                             "status": "not-offered"}


def _deep(n: int) -> bytes:
    return b"[" * n + b"]" * n


HOSTILE = {
    "huge": (b'{"version": 1, "attestation_bundles": [], "pad": "' + b"x" * MAX_ANSWER_BYTES + b'"}',
             f"sent more than {MAX_ANSWER_BYTES} bytes"),
    "deep": (_deep(200_000), "nested too deeply"),
    "not json": (b"<html>hello</html>", "did not answer valid JSON"),
    "no version": (b'{"attestation_bundles": []}', "is not a PEP 740 provenance object"),
    "bundles not a list": (b'{"version": 1, "attestation_bundles": "x"}', "has no attestation_bundles list"),
    "repository a number": (provenance_doc({"kind": "GitHub", "repository": 5, "workflow": "r.yml"}),
                            "publisher.repository is int; expected a string"),
    "kind with a newline": (provenance_doc({"kind": "Git\nHub", "repository": "a/b"}), "is not a plain word"),
    "control in workflow": (provenance_doc(github_publisher("a/b", "r\x1b[2J.yml")), "is not plain text"),
    "long repository": (provenance_doc(github_publisher("a/" + "b" * 300)), "is not plain text of at most 256"),
    "too many bundles": (provenance_doc(*[github_publisher(f"a/{i}") for i in range(9)]),
                         "has 9 attestation bundles; expected at most 8"),
    "too many attestations": (provenance_doc(github_publisher("a/b"), attestations=65), "more than 64 attestations"),
    "attestation not an object": (b'{"version": 1, "attestation_bundles": [{"publisher": {"kind": "GitHub"}, '
                                  b'"attestations": [1]}]}', "holds something other than objects"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_provenance_answer_is_bounded_and_refused(srv: FakeServer, case: str) -> None:
    body, expected = HOSTILE[case]
    srv.pep740.add("primary")
    srv.publish(*make_wheel("pvhost", "1.0"))
    srv.provenance[("primary", "pvhost-1.0-py3-none-any.whl")] = body
    with httpx.Client() as client:
        (listed,) = Index(srv.index_url(), client).release("pvhost", "1.0")
        with pytest.raises(RemoteError) as err:
            fetch_provenance(client, listed, project="pvhost")
    assert expected in err.value.message, err.value.message
    assert "pvhost-1.0-py3-none-any.whl" in err.value.message


def test_a_hostile_answer_fails_the_lock_cleanly(pv: FakeServer, recipe: Path, tmp_path: Path) -> None:
    pv.provenance[("primary", ENGINE_FILE)] = _deep(100_000)
    code, stdout, stderr = cli("lock", str(recipe), "--out", str(tmp_path / "out"), "--json")
    err = json.loads(stdout)
    assert code == err["error"]["exit_code"] != 0 and err["error"]["type"] == "RemoteError", err
    assert "nested too deeply" in err["error"]["message"] and ENGINE_FILE in err["error"]["message"]
    assert "Traceback" not in stderr
    assert not (tmp_path / "out" / "1.0-cpu").exists()


def test_a_page_whose_provenance_key_is_not_a_url_is_refused(srv: FakeServer) -> None:
    srv.publish(*make_wheel("pvkey", "1.0"))
    page = json.loads(srv._project_page("primary", "pvkey") or b"")
    page["files"][0]["provenance"] = {"url": "x"}
    srv.raw_pages["/primary/simple/pvkey/"] = json.dumps(page).encode()
    with httpx.Client() as client, pytest.raises(RemoteError) as err:
        Index(srv.index_url(), client).release("pvkey", "1.0")
    assert "expected null or a URL" in err.value.message


def test_the_bundle_carries_the_publisher_in_its_manifest_and_sbom_and_inspect_shows_it_offline(
    pv: FakeServer, recipe: Path, keys: Keys, tmp_path: Path
) -> None:
    pytest.importorskip("cyclonedx")
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    from lockbuild.builder.pack import sbom
    from lockbuild.builder.session import session
    from lockbuild.progress import Progress
    from lockbuild.recipe import load_recipe
    from lockbuild.settings import load

    with session(load(dict(os.environ), home=tmp_path), progress=Progress.quiet()) as s:
        r = load_recipe(recipe)
        plan = s.planner.plan(r, r.builds[0])
    doc = sbom(plan).decode()
    assert JsonStrictValidator(SchemaVersion.V1_5).validate_str(doc) is None
    engine = next(c for c in json.loads(doc)["components"] if c["name"] == "toyengine")
    props = {p["name"]: p["value"] for p in engine["properties"]}
    assert props == {
        "lockbuild:provenance:attestations": "2", "lockbuild:provenance:verified": "false",
        "lockbuild:provenance:publisher:kind": "GitHub",
        "lockbuild:provenance:publisher:repository": "toy/toyengine",
        "lockbuild:provenance:publisher:workflow": "release.yml",
        "lockbuild:provenance:publisher:environment": "pypi"}

    code, stdout, stderr = cli("build", str(recipe), "--key", str(keys.secret), "--out", str(tmp_path / "d"), "--json")
    assert code == 0, stderr
    bundle = json.loads(stdout)["bundles"][0]["bundle"]
    pv.reset()  # inspect asks no server: what it shows is the manifest's
    code, stdout, _ = cli("inspect", bundle, "--json")
    assert code == 0
    files = {f["path"]: f for f in json.loads(stdout)["files"]}
    assert files[f"wheels/{ENGINE_FILE}"]["provenance"] == {"attestations": 2, "publishers": [PUBLISHER],
                                                            "verified": False}
    assert "provenance" not in files["wheels/toydep-1.0-py3-none-any.whl"]
    code, stdout, _ = cli("inspect", bundle)
    assert "provenance (PEP 740, as the index stated it at lock time, unverified): 1 attested file(s)" in stdout
    assert f"  {ENGINE_FILE}: GitHub toy/toyengine, workflow release.yml, environment pypi" in stdout


MANIFEST_HEAD = b"""format = 2
engine = "toy"
version = "1.0"
variant = "cpu"
as-of = "2025-01-05T00:00:00Z"
serial = 1
recipe-sha256 = "%s"
lock-format = "requirements.txt"

[target]
python = "3.11"
platform = "x86_64-manylinux_2_28"

[builder]
lockbuild = "0.2.0"
uv = "0.9.0"

[install]
binary = "toy"
verify = ["toy"]
gpu-probe = "none"
uv = "tools/uv.whl"

[[files]]
path = "tools/uv.whl"
size = 1
sha256 = "%s"
kind = "tool"
origin = ""

[[files]]
path = "wheels/toy-1.0-py3-none-any.whl"
size = 1
sha256 = "%s"
kind = "wheel"
origin = "https://files.example/toy-1.0-py3-none-any.whl"
""" % (b"a" * 64, b"b" * 64, b"c" * 64)


def test_the_manifest_field_is_optional_round_trips_and_is_bounded() -> None:
    plain = parse_manifest(MANIFEST_HEAD)
    assert plain.provenance == () and b"provenance" not in plain.to_toml()  # old manifests read as before
    line = (b'provenance = { attestations = 1, publishers = [{ kind = "GitHub", repository = "toy/toy", '
            b'workflow = "release.yml", environment = "" }], verified = false }\n')
    attested = parse_manifest(MANIFEST_HEAD + line)
    assert attested.provenance == (
        ("wheels/toy-1.0-py3-none-any.whl", Provenance((Publisher("GitHub", "toy/toy", "release.yml", ""),), 1)),)
    assert parse_manifest(attested.to_toml()) == attested  # what stage.py and delta.py rewrite stays the same
    assert attested.to_toml().count(b"provenance = ") == 1

    bad = {
        b'provenance = { attestations = 1, publishers = [{ kind = "GitHub", repository = 5 }], verified = false }':
            "repository is int",
        b'provenance = { attestations = 1, publishers = [], verified = true }': "verified is not false",
        b'provenance = { attestations = -1, publishers = [], verified = false }': "is not a count of 0..64",
        b'provenance = { attestations = 1, publishers = [%s], verified = false }' % b", ".join(
            [b'{ kind = "GitHub" }'] * 9): "at most 8 tables",
        b'provenance = { attestations = 1, publishers = [{ kind = "GitHub", repository = "a\\u001b[2J" }], '
        b'verified = false }': "not plain text",
        b'provenance = { attestations = 1, publishers = [{ kind = "GitHub", extra = "x" }], verified = false }':
            "unknown key(s) extra",
        b'provenance = "GitHub"': "is not a table of attestations, publishers and verified",
    }
    for entry, expected in bad.items():
        with pytest.raises(IntegrityError) as err:
            parse_manifest(MANIFEST_HEAD + entry + b"\n")
        assert expected in err.value.message, (entry, err.value.message)
        assert "the manifest's provenance of wheels/toy-1.0-py3-none-any.whl" in err.value.message
    on_tool = MANIFEST_HEAD.replace(b'kind = "tool"\norigin = ""\n', b'kind = "tool"\norigin = ""\n' + line)
    with pytest.raises(IntegrityError, match="only wheels and sdists have one"):
        parse_manifest(on_tool)


def test_an_attested_bundle_is_bit_for_bit_reproducible(pv: FakeServer, recipe: Path, keys: Keys, tmp_path: Path) -> None:
    got = []
    for n in (1, 2):
        r = CliRunner().invoke(main, ["build", str(recipe), "--key", str(keys.secret), "--out", str(tmp_path / f"d{n}"),
                                      "--json"], env={"LOCKBUILD_CACHE_DIR": str(tmp_path / f"cache{n}")},
                               catch_exceptions=False)
        assert r.exit_code == 0, r.stderr
        got.append(json.loads(r.stdout)["bundles"][0])
    assert got[0]["sha256"] == got[1]["sha256"]
    manifest = parse_manifest(_manifest_bytes(Path(got[0]["bundle"])))
    assert [path for path, _ in manifest.provenance] == [f"wheels/{ENGINE_FILE}"]


def _manifest_bytes(bundle: Path) -> bytes:
    from lockbuild.limits import DEFAULT_LIMITS
    from lockbuild.site.sources import named_source

    with named_source(str(bundle), store=None) as source:
        return source.manifest_bytes(DEFAULT_LIMITS)
