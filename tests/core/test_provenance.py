"""PEP 740 provenance: the publisher each locked file's index states, recorded in the lock, the
manifest and the SBOM; a changed or vanished publisher is reported by the next lock (never a gate); an
index without provenance still locks; a hostile answer is bounded and refused; inspect shows it offline."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from conftest import PLATFORM, PY, TOY_RECIPE, Keys, day, publish_toy
from servers import FakeServer, github_publisher, in_toto_statement, make_wheel, provenance_doc

from lockbuild.bundle.lockfiles import bundle_requirements
from lockbuild.bundle.manifestparse import parse_manifest
from lockbuild.cli import main
from lockbuild.errors import IntegrityError, RemoteError, ResolveError
from lockbuild.fetch.attestations import NO_PREVIOUS, fetch_provenance, report, with_provenance
from lockbuild.fetch.index import Index
from lockbuild.lock import LockedFile, parse_requirements_lock
from lockbuild.provenance import MAX_ANSWER_BYTES, MAX_RECORD_BYTES, Provenance, Publisher, Recorded, record_json

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
    srv.provenance[("primary", ENGINE_FILE)] = provenance_doc(
        github_publisher("toy/toyengine"), attestations=2, statement=in_toto_statement(ENGINE_FILE, engine_sha(srv))
    )
    monkeypatch.setenv("LOCKBUILD_INDEX_URL", srv.index_url())
    monkeypatch.setenv("LOCKBUILD_GITHUB_API", srv.github_api)
    monkeypatch.setenv("LOCKBUILD_GITHUB_DOWNLOAD", srv.github_download)
    return srv


def engine_sha(srv: FakeServer) -> str:
    data = srv.files[f"/files/primary/{ENGINE_FILE}"].data
    assert isinstance(data, bytes)
    return hashlib.sha256(data).hexdigest()


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


def test_a_lock_records_the_publisher_in_json_text_and_the_lock_dir(
    pv: FakeServer, recipe: Path, tmp_path: Path
) -> None:
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
        "version": "1.0",
        "file": ENGINE_FILE,
        "status": "attested",
        "attestations": 2,
        "publishers": [PUBLISHER],
        "verified": False,
    }
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
    said = (
        "provenance: toyengine's publisher changed since the previous lock (1.0 was published by GitHub "
        "toy/toyengine, workflow release.yml, environment pypi; 1.0 by GitHub someone-else/toyengine, "
        "workflow ci.yml, environment pypi)"
    )
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


def test_an_index_without_provenance_still_locks_with_nothing_recorded(pv: FakeServer, tmp_path: Path) -> None:
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
    assert record["packages"]["pvtorch"] == {
        "version": "1.0",
        "file": "pvtorch-1.0-py3-none-any.whl",
        "status": "not-offered",
    }


def _deep(n: int) -> bytes:
    return b"[" * n + b"]" * n


HOSTILE = {
    "huge": (
        b'{"version": 1, "attestation_bundles": [], "pad": "' + b"x" * MAX_ANSWER_BYTES + b'"}',
        f"sent more than {MAX_ANSWER_BYTES} bytes",
    ),
    "deep": (_deep(200_000), "nested too deeply"),
    "not json": (b"<html>hello</html>", "did not answer valid JSON"),
    "no version": (b'{"attestation_bundles": []}', "is not a PEP 740 provenance object"),
    "bundles not a list": (b'{"version": 1, "attestation_bundles": "x"}', "has no attestation_bundles list"),
    "repository a number": (
        provenance_doc({"kind": "GitHub", "repository": 5, "workflow": "r.yml"}),
        "publisher.repository is int; expected a string",
    ),
    "kind with a newline": (provenance_doc({"kind": "Git\nHub", "repository": "a/b"}), "is not a plain word"),
    "control in workflow": (provenance_doc(github_publisher("a/b", "r\x1b[2J.yml")), "is not plain text"),
    # U+2028 is no category C character, but str.splitlines (and so a reader of the lock's comments) breaks at it
    "line separator": (provenance_doc(github_publisher("a/b\u2028c")), "is not plain text"),
    "paragraph separator": (provenance_doc(github_publisher("a/b", environment="p\u2029q")), "is not plain text"),
    # shown to operators as who published the file: a Cyrillic "у" in numpy/numpу, or describe()'s own separator
    "homoglyph": (provenance_doc(github_publisher("numpy/nump\u0443")), "holds a character other than ASCII"),
    "separator in repository": (
        provenance_doc(github_publisher("a/b, workflow release.yml")),
        "holds a character other than ASCII",
    ),
    "statement not base64": (
        provenance_doc(github_publisher("a/b"), statement="%%%"),
        "envelope.statement is not base64 of an in-toto statement",
    ),
    "statement without subject": (
        provenance_doc(github_publisher("a/b"), statement="e30="),  # {}
        "envelope.statement is not base64 of an in-toto statement",
    ),
    "attestation of another file": (
        provenance_doc(github_publisher("a/b"), statement=in_toto_statement("numpy-2.0.whl", "0" * 64)),
        "attestation_bundles[0].attestations[0] names another file (sha256 0000",
    ),
    "long repository": (provenance_doc(github_publisher("a/" + "b" * 300)), "is not plain text of at most 256"),
    "too many bundles": (
        provenance_doc(*[github_publisher(f"a/{i}") for i in range(9)]),
        "has 9 attestation bundles; expected at most 8",
    ),
    "too many attestations": (provenance_doc(github_publisher("a/b"), attestations=65), "more than 64 attestations"),
    "attestation not an object": (
        b'{"version": 1, "attestation_bundles": [{"publisher": {"kind": "GitHub"}, "attestations": [1]}]}',
        "holds something other than objects",
    ),
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
            fetch_provenance(client, listed, project="pvhost", sha256=listed.sha256)
    assert expected in err.value.message, err.value.message
    assert "pvhost-1.0-py3-none-any.whl" in err.value.message and "\n" not in err.value.message


def test_an_attestation_of_the_locked_file_is_recorded(srv: FakeServer) -> None:
    srv.pep740.add("primary")
    filename, data = make_wheel("pvok", "1.0")
    srv.publish(filename, data)
    sha = hashlib.sha256(data).hexdigest()
    srv.provenance[("primary", filename)] = provenance_doc(
        github_publisher("a/b"), statement=in_toto_statement(filename, sha.upper())
    )
    with httpx.Client() as client:
        (listed,) = Index(srv.index_url(), client).release("pvok", "1.0")
        got = fetch_provenance(client, listed, project="pvok", sha256=sha)
    assert got == Provenance((Publisher("GitHub", "a/b", "release.yml", "pypi"),), 1)


def test_a_lock_whose_attestation_names_another_file_fails(pv: FakeServer, recipe: Path, tmp_path: Path) -> None:
    """A mirror serving a trojaned file cannot borrow the genuine file's provenance (its statement names the
    genuine file's digest): the lock is refused, naming the file."""
    pv.provenance[("primary", ENGINE_FILE)] = provenance_doc(
        github_publisher("toy/toyengine"), statement=in_toto_statement(ENGINE_FILE, "ab" * 32)
    )
    code, stdout, _ = cli("lock", str(recipe), "--out", str(tmp_path / "out"), "--json")
    err = json.loads(stdout)["error"]
    assert code != 0 and err["type"] == "RemoteError", err
    assert "names another file" in err["message"] and ENGINE_FILE in err["message"]
    assert not (tmp_path / "out" / "1.0-cpu").exists()


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
        "lockbuild:provenance:attestations": "2",
        "lockbuild:provenance:verified": "false",
        "lockbuild:provenance:publisher:kind": "GitHub",
        "lockbuild:provenance:publisher:repository": "toy/toyengine",
        "lockbuild:provenance:publisher:workflow": "release.yml",
        "lockbuild:provenance:publisher:environment": "pypi",
    }

    code, stdout, stderr = cli("build", str(recipe), "--key", str(keys.secret), "--out", str(tmp_path / "d"), "--json")
    assert code == 0, stderr
    bundle = json.loads(stdout)["bundles"][0]["bundle"]
    pv.reset()  # inspect asks no server: what it shows is the manifest's
    code, stdout, _ = cli("inspect", bundle, "--json")
    assert code == 0
    files = {f["path"]: f for f in json.loads(stdout)["files"]}
    assert files[f"wheels/{ENGINE_FILE}"]["provenance"] == {
        "attestations": 2,
        "publishers": [PUBLISHER],
        "verified": False,
    }
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
    line = (
        b'provenance = { attestations = 1, publishers = [{ kind = "GitHub", repository = "toy/toy", '
        b'workflow = "release.yml", environment = "" }], verified = false }\n'
    )
    attested = parse_manifest(MANIFEST_HEAD + line)
    assert attested.provenance == (
        ("wheels/toy-1.0-py3-none-any.whl", Provenance((Publisher("GitHub", "toy/toy", "release.yml", ""),), 1)),
    )
    assert parse_manifest(attested.to_toml()) == attested  # what stage.py and delta.py rewrite stays the same
    assert attested.to_toml().count(b"provenance = ") == 1

    bad = {
        b'provenance = { attestations = 1, publishers = [{ kind = "GitHub", repository = 5 }], verified = false }': "repository is int",
        b"provenance = { attestations = 1, publishers = [], verified = true }": "verified is not false",
        b"provenance = { attestations = -1, publishers = [], verified = false }": "is not a count of 0..64",
        b"provenance = { attestations = 1, publishers = [%s], verified = false }"
        % b", ".join([b'{ kind = "GitHub" }'] * 9): "at most 8 tables",
        b'provenance = { attestations = 1, publishers = [{ kind = "GitHub", repository = "a\\u001b[2J" }], '
        b"verified = false }": "not plain text",
        b'provenance = { attestations = 1, publishers = [{ kind = "GitHub", extra = "x" }], verified = false }': "unknown key(s) extra",
        b'provenance = "GitHub"': "is not a table of attestations, publishers and verified",
        b'provenance = { attestations = 1, publishers = [{ kind = "Git Hub" }], verified = false }': "is not a plain word",
        b'provenance = { attestations = 1, publishers = [{ kind = "GitHub", repository = "a/b\\u2028c" }], '
        b"verified = false }": "not plain text",
        b"provenance = { attestations = 1, publishers = [], verified = false, extra = 1 }": "is not a table of attestations, publishers and verified",
    }
    for entry, expected in bad.items():
        with pytest.raises(IntegrityError) as err:
            parse_manifest(MANIFEST_HEAD + entry + b"\n")
        assert expected in err.value.message, (entry, err.value.message)
        assert "the manifest's provenance of wheels/toy-1.0-py3-none-any.whl" in err.value.message
    on_tool = MANIFEST_HEAD.replace(b'kind = "tool"\norigin = ""\n', b'kind = "tool"\norigin = ""\n' + line)
    with pytest.raises(IntegrityError, match="only wheels and sdists have one"):
        parse_manifest(on_tool)


def test_an_attested_bundle_is_bit_for_bit_reproducible(
    pv: FakeServer, recipe: Path, keys: Keys, tmp_path: Path
) -> None:
    got = []
    for n in (1, 2):
        r = CliRunner().invoke(
            main,
            ["build", str(recipe), "--key", str(keys.secret), "--out", str(tmp_path / f"d{n}"), "--json"],
            env={"LOCKBUILD_CACHE_DIR": str(tmp_path / f"cache{n}")},
            catch_exceptions=False,
        )
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


# the lock's text: a comment carrying a publisher never becomes a pin ------------------------------
def test_a_line_separator_in_a_lock_comment_is_no_pin() -> None:
    """uv reads lines up to "\\n"; a U+2028 (or U+0085, a form feed) inside a comment must not start a line
    that lockbuild's reader (install/sdists.py trusts its pins) sees and uv does not."""
    evil = "evil==6.6 --hash=sha256:" + "b" * 64 + " #"
    for sep in ("\u2028", "\u2029", "\x85", "\x0c", "\x1c"):
        text = f"toy==1.0 \\\n    --hash=sha256:{'a' * 64}\n    # wheels/toy.whl (published by GitHub a/b{sep}{evil})\n"
        assert [p.name for p in parse_requirements_lock(text)] == ["toy"], repr(sep)
    hidden = Provenance((Publisher("GitHub", "a/b\u2028" + evil),), 1)  # as if a check above were gone
    locked = LockedFile(
        "toy", "1.0", "toy-1.0-py3-none-any.whl", "https://x/t.whl", "a" * 64, 1, "primary", provenance=hidden
    )
    assert [p.name for p in parse_requirements_lock(bundle_requirements([locked]))] == ["toy"]
    assert [p.name for p in parse_requirements_lock(f"toy==1.0 --hash=sha256:{'a' * 64}\r\n")] == ["toy"]
    with pytest.raises(ResolveError, match="carriage return inside a line"):
        parse_requirements_lock(f"toy==1.0 --hash=sha256:{'a' * 64} #\rx==1 --hash=sha256:{'b' * 64}\n")


# the provenance URL: from the page's origin, without credentials -----------------------------------
def _page_with_provenance(srv: FakeServer, url: str) -> None:
    srv.publish(*make_wheel("pvurl", "1.0"))
    page = json.loads(srv._project_page("primary", "pvurl") or b"")
    page["files"][0]["provenance"] = url
    srv.raw_pages["/primary/simple/pvurl/"] = json.dumps(page).encode()


@pytest.mark.parametrize(
    "where",
    [
        "https://genuine-index.invalid/integrity/pvurl/1.0/x/provenance",
        "http://localhost:{port}/x",
        "https://127.0.0.1:{port}/x",
        "http://127.0.0.1:1/x",
    ],
)
def test_a_provenance_url_of_another_origin_is_refused(srv: FakeServer, where: str) -> None:
    """A mirror serving a trojaned file cannot point its provenance at the genuine file's on PyPI."""
    _page_with_provenance(srv, where.format(port=srv.httpd.server_address[1]))
    with httpx.Client() as client, pytest.raises(RemoteError) as err:
        Index(srv.index_url(), client).release("pvurl", "1.0")
    assert "another origin than the page's" in err.value.message and "pvurl-1.0" in err.value.message


def test_a_provenance_url_is_recorded_without_credentials(srv: FakeServer) -> None:
    port = srv.httpd.server_address[1]
    _page_with_provenance(srv, f"http://user:s3cret@127.0.0.1:{port}/primary/integrity/pvurl/provenance")
    with httpx.Client() as client:
        (listed,) = Index(srv.index_url(), client).release("pvurl", "1.0")
    assert listed.provenance_url == f"http://127.0.0.1:{port}/primary/integrity/pvurl/provenance"


def test_a_direct_file_is_never_asked_for_provenance(srv: FakeServer) -> None:
    """A file from a recipe's URL has no index entry of its own, even when an index lists its name."""
    srv.pep740.add("primary")
    filename, data = make_wheel("pvdirect", "1.0")
    srv.publish(filename, data)
    srv.provenance[("primary", filename)] = provenance_doc(github_publisher("a/b"))
    with httpx.Client() as client, ThreadPoolExecutor(1) as pool:
        (listed,) = Index(srv.index_url(), client).release("pvdirect", "1.0")
        direct = LockedFile("pvdirect", "1.0", filename, "https://x/w.whl", listed.sha256 or "", 1, "direct", index="")
        (got,) = with_provenance(client, [direct], lambda _f: [listed], pool)
        (indexed,) = with_provenance(client, [dataclasses.replace(direct, origin="primary")], lambda _f: [listed], pool)
    assert got.provenance is None and indexed.provenance is not None
    assert [p for p in srv.requests if "/integrity/" in p] == [f"/primary/integrity/pvdirect/1.0/{filename}/provenance"]


# the comparison with the previous lock --------------------------------------------------------------
def test_a_first_lock_says_there_was_nothing_to_compare_with(pv: FakeServer, recipe: Path, tmp_path: Path) -> None:
    doc = lock_json(recipe, tmp_path / "out")
    assert doc["locks"][0]["provenance_note"] == NO_PREVIOUS  # type: ignore[index]
    assert lock_json(recipe, tmp_path / "out")["locks"][0]["provenance_note"] is None  # type: ignore[index]
    code, stdout, stderr = cli("lock", str(recipe), "--out", str(tmp_path / "text"))
    assert code == 0, stderr
    assert f"provenance: {NO_PREVIOUS}" in stdout


@pytest.mark.parametrize("which", ["build dir", "out dir", "record"])
def test_a_previous_record_others_could_write_is_not_compared(
    pv: FakeServer, recipe: Path, tmp_path: Path, which: str
) -> None:
    """The store and trust rule (fsio.owner_problem): a record a group could rewrite could hide a change."""
    lock_json(recipe, tmp_path / "out")
    target = {
        "build dir": tmp_path / "out" / "1.0-cpu",
        "out dir": tmp_path / "out",
        "record": tmp_path / "out" / "1.0-cpu" / "provenance.json",
    }[which]
    target.chmod(target.stat().st_mode | 0o020)
    pv.provenance[("primary", ENGINE_FILE)] = provenance_doc(github_publisher("someone-else/toyengine"))
    doc = lock_json(recipe, tmp_path / "out")
    (warning,) = doc["locks"][0]["warnings"]  # type: ignore[index]
    assert warning.startswith(f"provenance: {target} is writable by its group or by others"), warning
    assert "not compared" in warning and "publisher changed" not in warning
    assert doc["locks"][0]["provenance_note"] == NO_PREVIOUS  # type: ignore[index]


def _locked(repository: str) -> LockedFile:
    return LockedFile(
        "toy",
        "1.0",
        "toy-1.0-py3-none-any.whl",
        "https://x/t.whl",
        "a" * 64,
        1,
        "primary",
        provenance=Provenance((Publisher("GitHub", repository, "r.yml"),), 1),
    )


def _previous(tmp_path: Path, doc: object) -> Path:
    d = tmp_path / "prev" / "1.0-cpu"
    d.mkdir(parents=True)
    (d / "provenance.json").write_text(json.dumps(doc))
    return d


def _record(**entry: object) -> dict[str, object]:
    doc = record_json(
        "toy",
        "1.0-cpu",
        [Recorded("toy", "1.0", "toy-1.0-py3-none-any.whl", Provenance((Publisher("GitHub", "toy/toy", "r.yml"),), 1))],
    )
    doc["packages"]["toy"].update(entry)  # type: ignore[index]
    return doc


def test_the_previous_record_is_compared_only_for_the_same_engine_and_build(tmp_path: Path) -> None:
    prev = _previous(tmp_path, _record())
    assert (
        report("toy", "1.0-cpu", prev, [_locked("someone-else/toy")])
        .warnings[0]
        .startswith("provenance: toy's publisher changed")
    )
    for engine, build in (("other", "1.0-cpu"), ("toy", "2.0-cpu")):
        got = report(engine, build, prev, [_locked("someone-else/toy")])
        assert got.warnings == () and got.note is not None and got.note.startswith(NO_PREVIOUS), got


BAD_RECORDS = {
    "kind not a word": (
        _record(publishers=[{"kind": "Git Hub", "repository": "toy/toy", "workflow": "r.yml", "environment": ""}]),
        "is not a plain word",
    ),
    "an extra key": (_record(signed=True), "is not a table of attestations, publishers and verified"),
    "status and publishers disagree": (_record(status="none"), "status says none, its publishers say attested"),
    "a package name with a control character": (
        {**_record(), "packages": {"toy\x1b[2J": _record()["packages"]["toy"]}},  # type: ignore[index]
        "a package name 'toy\\x1b[2J' is not plain text",
    ),
    "a line separator in the version": (_record(version="1.0\u2028x"), "packages.toy.version"),
}


@pytest.mark.parametrize("case", sorted(BAD_RECORDS))
def test_a_previous_record_lockbuild_cannot_read_is_said_once_and_not_compared(tmp_path: Path, case: str) -> None:
    doc, expected = BAD_RECORDS[case]
    got = report("toy", "1.0-cpu", _previous(tmp_path, doc), [_locked("someone-else/toy")])
    assert len(got.warnings) == 1 and expected in got.warnings[0], got.warnings
    assert got.warnings[0].endswith("this lock is not compared with it") and got.note == NO_PREVIOUS


def test_the_previous_record_is_read_bounded_and_never_through_a_link(tmp_path: Path) -> None:
    prev = _previous(tmp_path, _record())
    with (prev / "provenance.json").open("r+b") as f:
        f.truncate(MAX_RECORD_BYTES + 1)  # sparse: nothing is written, and read_regular reads nothing of it
    (warning,) = report("toy", "1.0-cpu", prev, [_locked("someone-else/toy")]).warnings
    assert warning.startswith("provenance: the provenance record of the previous lock "), warning  # read_regular's
    assert f"is {MAX_RECORD_BYTES + 1} bytes: expected at most {MAX_RECORD_BYTES}" in warning, warning
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps(_record()))
    (prev / "provenance.json").unlink()
    (prev / "provenance.json").symlink_to(elsewhere)
    (warning,) = report("toy", "1.0-cpu", prev, [_locked("someone-else/toy")]).warnings
    assert "link" in warning and warning.startswith("provenance: the provenance record of the previous lock "), warning
