"""push and pull against a REAL registry (CNCF distribution, Debian's docker-registry) on 127.0.0.1.

The registry's own access log proves what was requested: an untrusted artifact is refused before any
blob is fetched, a second version fetches only its new blobs, and a blob corrupted in the registry's
storage is refused on pull.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import Keys, make_keys
from registrykit import RealRegistry, binary
from sitekit import cli, make_bundle

from lockbuild.registry.api import OCI_MANIFEST

pytestmark = pytest.mark.skipif(
    binary() is None,
    reason="docker-registry (CNCF distribution) is not installed: apt-get install docker-registry "
    "(scripts/test installs it)",
)


@pytest.fixture(scope="module")
def reg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealRegistry]:
    r = RealRegistry(tmp_path_factory.mktemp("registry"))
    yield r
    r.close()


@pytest.fixture(scope="module")
def signer(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    return make_keys(tmp_path_factory.mktemp("reg-keys"))


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory, signer: Keys) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("reg-bundles")
    return {v: make_bundle(out, [signer.secret], version=v) for v in ("1.0", "1.1")}


def _ok(*args: str | Path) -> dict[str, object]:
    r = cli(*args, "--json")
    assert r.exit_code == 0, r.output
    return dict(json.loads(r.stdout))


def _push(bundle: Path, keys: Keys, target: str) -> dict[str, object]:
    return _ok("push", bundle, target, "--trust", keys.trust)


def _digests(bundle_members: list[tuple[str, bytes, str]]) -> set[str]:
    return {"sha256:" + hashlib.sha256(d).hexdigest() for _, d, _ in bundle_members}


def test_push_then_pull_into_an_empty_store(
    tmp_path: Path, reg: RealRegistry, bundles: dict[str, Path], signer: Keys
) -> None:
    target = reg.ref("site/toyengine", "1.0-cpu")
    pushed = _push(bundles["1.0"], signer, target)
    assert pushed["uploaded"] == pushed["blobs"] == 5
    again = _push(bundles["1.0"], signer, target)
    assert again["uploaded"] == 0  # nothing is uploaded twice
    store = tmp_path / "store"
    pulled = _ok("pull", target, "--store", store, "--trust", signer.trust)
    assert pulled["build"] == "toyengine/1.0-cpu" and pulled["fetched"] == 5
    assert cli("store", "verify", "--store", store).exit_code == 0
    local = tmp_path / "local"
    _ok("import", bundles["1.0"], "--trust", signer.trust, "--store", local)
    for sub in ("blobs/sha256", "builds/toyengine/1.0-cpu"):  # the same store as an import makes
        assert {p.name: p.read_bytes() for p in (store / sub).iterdir()} == {
            p.name: p.read_bytes() for p in (local / sub).iterdir()
        }
    again_pull = _ok("pull", target, "--store", store, "--trust", signer.trust)
    assert again_pull["fetched"] == 0


def test_a_second_version_moves_only_its_new_blobs(
    tmp_path: Path, reg: RealRegistry, bundles: dict[str, Path], signer: Keys
) -> None:
    from sitekit import files_for

    t10, t11 = reg.ref("site/second", "1.0-cpu"), reg.ref("site/second", "1.1-cpu")
    _push(bundles["1.0"], signer, t10)
    reg.mark()
    pushed = _push(bundles["1.1"], signer, t11)
    new = _digests(files_for("1.1")) - _digests(files_for("1.0"))
    assert pushed["uploaded"] == len(new) == 3
    uploads = {
        r.path.rsplit("=", 1)[-1].replace("%3A", ":")
        for r in reg.requests()
        if r.method == "PUT" and "/blobs/uploads/" in r.path
    }
    assert new <= uploads and not (uploads & _digests(files_for("1.0")))
    store = tmp_path / "store"
    _ok("pull", t10, "--store", store, "--trust", signer.trust)
    reg.mark()
    pulled = _ok("pull", t11, "--store", store, "--trust", signer.trust)
    assert pulled["fetched"] == 3
    gets = reg.blob_gets()
    config = [g for g in gets if g not in new]
    assert set(gets) - set(config) == new and len(config) == 1  # the 1.1 manifest, then only new members
    assert not set(gets) & _digests(files_for("1.0"))


def test_an_untrusted_artifact_is_refused_before_any_blob_is_requested(
    tmp_path: Path, reg: RealRegistry, bundles: dict[str, Path], signer: Keys
) -> None:
    target = reg.ref("site/untrusted", "1.0-cpu")
    _push(bundles["1.0"], signer, target)
    stranger = make_keys(tmp_path / "stranger")
    reg.mark()
    r = cli("pull", target, "--store", tmp_path / "store", "--trust", stranger.trust)
    assert r.exit_code == 3 and "signature policy not met" in r.output
    requests = reg.requests()
    assert [q.method for q in requests] == ["GET"] and "/manifests/" in requests[0].path
    assert reg.blob_gets() == []


def test_an_artifact_pointing_at_another_manifest_is_refused_before_any_blob(
    tmp_path: Path, reg: RealRegistry, bundles: dict[str, Path], signer: Keys
) -> None:
    t10, t11 = reg.ref("site/mixed", "1.0-cpu"), reg.ref("site/mixed", "1.1-cpu")
    _push(bundles["1.0"], signer, t10)
    _push(bundles["1.1"], signer, t11)
    url = f"http://{reg.host}/v2/site/mixed/manifests/"
    old = httpx.get(url + "1.0-cpu", headers={"Accept": OCI_MANIFEST}).json()
    new = httpx.get(url + "1.1-cpu", headers={"Accept": OCI_MANIFEST}).json()
    old["config"] = new["config"]  # 1.0's signatures, 1.1's manifest and members
    old["layers"] = new["layers"]
    put = httpx.put(url + "evil", content=json.dumps(old), headers={"Content-Type": OCI_MANIFEST})
    assert put.status_code == 201
    reg.mark()
    r = cli("pull", reg.ref("site/mixed", "evil"), "--store", tmp_path / "store", "--trust", signer.trust)
    assert r.exit_code == 4 and "its signatures sign" in r.output
    assert reg.blob_gets() == []


def test_a_blob_corrupted_in_the_registry_is_refused(
    tmp_path: Path, reg: RealRegistry, bundles: dict[str, Path], signer: Keys
) -> None:
    from sitekit import files_for

    target = reg.ref("site/corrupt", "1.0-cpu")
    _push(bundles["1.0"], signer, target)
    path, data, _ = files_for("1.0")[-1]
    blob = reg.blob_data("sha256:" + hashlib.sha256(data).hexdigest())
    damaged = bytearray(blob.read_bytes())
    damaged[7] ^= 1
    blob.write_bytes(bytes(damaged))
    store = tmp_path / "store"
    digest = hashlib.sha256(data).hexdigest()
    try:
        r = cli("pull", target, "--store", store, "--trust", signer.trust)
        assert r.exit_code == 4 and f"the registry's blob for {path} is damaged" in r.output
        assert cli("store", "list", "--store", store, "--json").stdout.count('"build"') == 0
        # the damaged blob leaves no partial; another blob's, stopped by the failure, may stay to resume
        assert not (store / "tmp" / f"{digest}.partial").exists()
        assert not (store / "blobs" / "sha256" / digest).exists()
    finally:
        blob.write_bytes(data)  # repaired in the registry (the module's other tests share it)
    # the next pull completes, fetching only what is missing
    pulled = _ok("pull", target, "--store", store, "--trust", signer.trust)
    assert pulled["fetched"] >= 1
    assert cli("store", "verify", "--store", store).exit_code == 0


def test_an_interrupted_pull_resumes(tmp_path: Path, reg: RealRegistry, bundles: dict[str, Path], signer: Keys) -> None:
    from sitekit import files_for

    target = reg.ref("site/resume", "1.0-cpu")
    _push(bundles["1.0"], signer, target)
    store = tmp_path / "store"
    _ok("pull", target, "--store", store, "--trust", signer.trust)
    _, data, _ = files_for("1.0")[-1]
    digest = hashlib.sha256(data).hexdigest()
    (store / "blobs" / "sha256" / digest).unlink()
    (store / "tmp" / f"{digest}.partial").write_bytes(data[: len(data) // 2])  # what a broken pull leaves
    pulled = _ok("pull", target, "--store", store, "--trust", signer.trust)
    assert pulled["fetched"] == 1
    assert cli("store", "verify", "--store", store).exit_code == 0
    # a partial that is not a prefix of the blob (a bad mirror's) is caught by the digest, discarded, and the
    # blob fetched once more from byte 0 in the same pull: a good registry is not blamed
    (store / "blobs" / "sha256" / digest).unlink()
    (store / "tmp" / f"{digest}.partial").write_bytes(b"X" * 100)
    pulled = _ok("pull", target, "--store", store, "--trust", signer.trust)
    assert pulled["fetched"] == 1
    assert not (store / "tmp" / f"{digest}.partial").exists()
    assert cli("store", "verify", "--store", store).exit_code == 0


def test_credentials_are_sent_only_when_asked_and_never_printed(
    tmp_path: Path, reg: RealRegistry, bundles: dict[str, Path], signer: Keys
) -> None:
    target = reg.ref("site/creds", "1.0-cpu")
    _push(bundles["1.0"], signer, target)
    from click.testing import CliRunner

    from lockbuild.cli import main

    r = CliRunner().invoke(
        main,
        [
            "pull",
            target,
            "--store",
            str(tmp_path / "s"),
            "--trust",
            str(signer.trust),
            "--username",
            "alice",
            "--password-stdin",
            "-v",
        ],
        input="s3cret-pw\n",
    )
    assert r.exit_code == 0, r.output
    assert "s3cret-pw" not in r.output
    assert "s3cret-pw" not in "".join(p.read_text(errors="replace") for p in (tmp_path / "s").rglob("*") if p.is_file())


def test_a_registry_that_needs_a_password(tmp_path: Path, bundles: dict[str, Path], signer: Keys) -> None:
    from click.testing import CliRunner

    from lockbuild.cli import main

    locked = RealRegistry(tmp_path / "locked", htpasswd=True)
    try:
        target = locked.ref("site/locked", "1.0-cpu")
        r = cli("push", bundles["1.0"], target, "--trust", signer.trust)
        assert r.exit_code == 1 and "the registry needs credentials" in r.output and "--password-stdin" in r.output
        runner = CliRunner()
        args = ["--trust", str(signer.trust), "--username", "alice", "--password-stdin", "--json"]
        r = runner.invoke(main, ["push", str(bundles["1.0"]), target, *args], input="wrong\n")
        assert r.exit_code == 1 and "HTTP 401" in r.output and "wrong" not in r.output
        r = runner.invoke(main, ["push", str(bundles["1.0"]), target, *args], input="s3cret-pw\n")
        assert r.exit_code == 0, r.output
        store = tmp_path / "store"
        r = runner.invoke(main, ["pull", target, "--store", str(store), *args], input="s3cret-pw\n")
        assert r.exit_code == 0 and json.loads(r.stdout)["fetched"] == 5
        assert "s3cret-pw" not in r.output
        stored = b"".join(p.read_bytes() for p in store.rglob("*") if p.is_file())
        assert b"s3cret-pw" not in stored and b"alice" not in stored
    finally:
        locked.close()


def test_a_large_blob_is_uploaded_in_chunks(
    tmp_path: Path, reg: RealRegistry, bundles: dict[str, Path], signer: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    import lockbuild.registry.api

    monkeypatch.setattr(lockbuild.registry.api, "CHUNK_UPLOAD", 1000)  # the members are a few KB: several PATCHes each
    target = reg.ref("site/chunked", "1.0-cpu")
    reg.mark()
    assert _push(bundles["1.0"], signer, target)["uploaded"] == 5
    assert sum(1 for q in reg.requests() if q.method == "PATCH" and q.status == 202) >= 4
    pulled = _ok("pull", target, "--store", tmp_path / "store", "--trust", signer.trust)
    assert pulled["fetched"] == 5
    assert cli("store", "verify", "--store", tmp_path / "store").exit_code == 0


def test_a_co_signature_is_published_by_pushing_again(
    tmp_path: Path, reg: RealRegistry, bundles: dict[str, Path], signer: Keys
) -> None:
    from lockbuild.minisign import read_secret_key
    from lockbuild.trust import InMemorySigner, sign_bundle

    target = reg.ref("site/cosigned", "1.0-cpu")
    _push(bundles["1.0"], signer, target)
    second = make_keys(tmp_path / "second", "second")
    both = tmp_path / "both"
    both.mkdir()
    for key in (signer, second):
        (both / key.public.name).write_bytes(key.public.read_bytes())
    (both / "policy.toml").write_text("threshold = 2\n")
    store = tmp_path / "store"
    r = cli("pull", target, "--store", store, "--trust", both)
    assert r.exit_code == 3 and "needed 2" in r.output  # one signature, a site that demands two
    cosigned = tmp_path / "co" / bundles["1.0"].name
    cosigned.parent.mkdir()
    cosigned.write_bytes(bundles["1.0"].read_bytes())
    Path(f"{cosigned}.minisig").write_bytes(Path(f"{bundles['1.0']}.minisig").read_bytes())
    sign_bundle(cosigned, InMemorySigner(read_secret_key(second.secret, lambda: "")))
    # push keeps the blocks that count under its --trust: a co-signer's key must be trusted there
    assert _ok("push", cosigned, target, "--trust", both)["uploaded"] == 0  # only the OCI manifest changes
    pulled = _ok("pull", target, "--store", store, "--trust", both)
    assert len(pulled["signers"]) == 2  # type: ignore[arg-type]


def test_a_tls_registry_with_the_sites_ca_file(tmp_path: Path, bundles: dict[str, Path], signer: Keys) -> None:
    from registrykit import self_signed

    cert, key = self_signed(tmp_path / "tls")
    secure = RealRegistry(tmp_path / "secure", tls=(cert, key))
    try:
        target = secure.ref("site/tls", "1.0-cpu")
        assert _ok("push", bundles["1.0"], target, "--trust", signer.trust, "--ca-file", cert)["uploaded"] == 5
        pulled = _ok("pull", target, "--store", tmp_path / "store", "--trust", signer.trust, "--ca-file", cert)
        assert pulled["fetched"] == 5
        other, _ = self_signed(tmp_path / "other-ca")  # a CA that did not sign the registry's certificate
        r = cli("pull", target, "--store", tmp_path / "store2", "--trust", signer.trust, "--ca-file", other)
        assert r.exit_code == 1 and "ConnectError" in r.output and "certificate verify failed" in r.output
    finally:
        secure.close()


def test_a_different_build_under_a_name_the_store_holds_is_refused_before_any_member(
    tmp_path: Path, reg: RealRegistry, bundles: dict[str, Path], signer: Keys
) -> None:
    target = reg.ref("site/rebuilt", "1.0-cpu")
    rebuilt = make_bundle(tmp_path / "rebuilt", [signer.secret], version="1.0", serial_days=3)
    _push(rebuilt, signer, target)
    store = tmp_path / "store"
    _ok("import", bundles["1.0"], "--trust", signer.trust, "--store", store)
    reg.mark()
    r = cli("pull", target, "--store", store, "--trust", signer.trust)
    assert r.exit_code == 4 and "already holds a different toyengine/1.0-cpu; nothing was fetched" in r.output
    assert len(reg.blob_gets()) == 1  # the signed manifest only


@pytest.mark.parametrize("kind", ["lbz", "parts", "delta", "store"])
def test_push_takes_every_source(
    kind: str, tmp_path: Path, reg: RealRegistry, bundles: dict[str, Path], signer: Keys
) -> None:
    store = tmp_path / "store"
    _ok("import", bundles["1.0"], "--trust", signer.trust, "--store", store)
    if kind == "lbz":
        source: tuple[str | Path, ...] = (bundles["1.1"],)
    elif kind == "parts":
        source = (str(_ok("split", bundles["1.1"], "--size", "300", "--out", tmp_path / "p")["part_list"]),)
    elif kind == "delta":
        delta = _ok(
            "delta", bundles["1.1"], "--base", bundles["1.0"], "--out", tmp_path / "d", "--trust", signer.trust
        )["delta"]
        source = (str(delta), "--store", store)
    else:
        _ok("import", bundles["1.1"], "--trust", signer.trust, "--store", store)
        source = ("toyengine/1.1-cpu", "--store", store)
    target = reg.ref(f"every/{kind}", "1.1-cpu")
    pushed = _ok("push", *source, target, "--trust", signer.trust)
    assert pushed["build"] == "toyengine/1.1-cpu" and pushed["blobs"] == 5
    pulled = _ok("pull", target, "--store", tmp_path / "pulled", "--trust", signer.trust)
    assert pulled["build"] == "toyengine/1.1-cpu" and pulled["fetched"] == 5


def test_push_from_a_store_refuses_a_damaged_blob_and_an_untrusted_build(
    tmp_path: Path, reg: RealRegistry, bundles: dict[str, Path], signer: Keys
) -> None:
    """push checks what it uploads: the signatures against --trust and every blob against the signed
    manifest; a damaged blob never goes up under its signed digest."""
    store = tmp_path / "store"
    _ok("import", bundles["1.0"], "--trust", signer.trust, "--store", store)
    stranger = make_keys(tmp_path / "stranger")
    target = reg.ref("damaged/toyengine", "1.0-cpu")
    r = cli("push", "toyengine/1.0-cpu", "--store", store, target, "--trust", stranger.trust)
    assert r.exit_code == 3 and "signature policy not met" in r.output
    blob = sorted((store / "blobs" / "sha256").iterdir(), key=lambda p: -p.stat().st_size)[0]
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 1
    blob.chmod(0o644)
    blob.write_bytes(bytes(data))
    r = cli("push", "toyengine/1.0-cpu", "--store", store, target, "--trust", signer.trust)
    assert r.exit_code == 4 and "has sha256" in r.output, r.output
    got = httpx.head(f"http://{reg.host}/v2/damaged/toyengine/blobs/sha256:{blob.name}")
    assert got.status_code == 404  # never uploaded


# -- memory stays flat -------------------------------------------------------------------------------

BIG = 200 << 20
GROWTH_BOUND_KB = 120 << 10
PEAK_OF = """
import sys
def hwm():  # this process's peak RSS in kB (VmHWM: unlike ru_maxrss, not inherited from the parent)
    return int(next(x for x in open("/proc/self/status") if x.startswith("VmHWM:")).split()[1])
from lockbuild.cli import main
base = hwm()
try:
    main(sys.argv[1:])
finally:
    print(f"peak-growth-kb {hwm() - base}", file=sys.stderr)
"""


def _peak_growth_kb(*args: str | Path) -> int:
    """Run `lockbuild ARGS` in a child; how far its peak RSS rose over its own baseline (lockbuild imported)."""
    proc = subprocess.run([sys.executable, "-c", PEAK_OF, *map(str, args)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return int(proc.stderr.rsplit("peak-growth-kb ", 1)[1].split()[0])


def _big_bundle(out: Path, keys: Keys) -> Path:
    """A signed bundle whose wheel is BIG bytes (a sparse file: made at once, read as zeros)."""
    from hostile import UV_MEMBER
    from hostile import manifest as hostile_manifest

    from lockbuild.bundle.manifest import Member
    from lockbuild.bundle.write import Entry, write_bundle
    from lockbuild.minisign import read_secret_key
    from lockbuild.trust import InMemorySigner, sign_bundle

    out.mkdir(parents=True)
    wheel = out / "torch.whl"
    with wheel.open("wb") as f:
        f.truncate(BIG)
    h = hashlib.sha256()
    with wheel.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    recipe = b'[engine]\nname = "toyengine"\n'
    small = [
        ("recipe.toml", recipe, "recipe"),
        ("lock/requirements.txt", b"toyengine==1.0\n", "lock"),
        (UV_MEMBER, b"PK uv wheel bytes " * 50, "tool"),
    ]
    members = [Member(p, len(d), hashlib.sha256(d).hexdigest(), k, f"https://example.invalid/{p}") for p, d, k in small]
    big = Member("wheels/torch-2.0-py3-none-any.whl", BIG, h.hexdigest(), "wheel", "https://example.invalid/torch")
    manifest = hostile_manifest((*members, big), recipe_sha256=hashlib.sha256(recipe).hexdigest())
    path = out / manifest.bundle_name
    with path.open("wb") as f:
        write_bundle(
            f,
            manifest,
            [*(Entry(m, d) for m, (_, d, _) in zip(members, small, strict=True)), Entry(big, wheel)],
            threads=1,
        )
    sign_bundle(path, InMemorySigner(read_secret_key(keys.secret, lambda: "")))
    return path


@pytest.mark.slow
def test_push_and_pull_of_a_large_member_keep_memory_flat(tmp_path: Path, reg: RealRegistry, signer: Keys) -> None:
    """A 200 MB member goes up (in PATCH chunks) and comes down without its size showing in the
    process's peak RSS: every body is streamed, none is held whole."""
    bundle = _big_bundle(tmp_path / "big", signer)
    target = reg.ref("flat/toyengine", "1.0-cpu")
    reg.mark()
    pushed = _peak_growth_kb("push", bundle, target, "--trust", signer.trust)
    assert pushed < GROWTH_BOUND_KB, f"push: peak RSS rose {pushed >> 10} MB"
    assert any(q.method == "PATCH" for q in reg.requests())  # the chunked path was the one measured
    pulled = _peak_growth_kb("pull", target, "--store", tmp_path / "store", "--trust", signer.trust)
    assert pulled < GROWTH_BOUND_KB, f"pull: peak RSS rose {pulled >> 10} MB"
