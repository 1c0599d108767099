"""The site store: import checks a bundle as install does, keeps members once, survives a kill,
and verify / gc / hostile layouts behave as a site administrator sees them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import Keys, make_keys
from sitekit import cli, make_bundle, run_killed, sha

from lockbuild.errors import BusyError
from lockbuild.site.storage import Store
from lockbuild.site.storemodel import StoreError, parse_build_ref


@pytest.fixture(scope="module")
def signer(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    return make_keys(tmp_path_factory.mktemp("site-keys"))


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory, signer: Keys) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("site-bundles")
    return {v: make_bundle(out, [signer.secret], version=v) for v in ("1.0", "1.1")}


def _import(bundle: Path, keys: Keys, store: Path) -> dict[str, object]:
    r = cli("import", bundle, "--trust", keys.trust, "--store", store, "--json")
    assert r.exit_code == 0, r.output
    return dict(json.loads(r.stdout))


def _list(store: Path) -> list[dict[str, object]]:
    r = cli("store", "list", "--store", store, "--json")
    assert r.exit_code == 0, r.output
    return list(json.loads(r.stdout)["builds"])


def test_import_keeps_each_member_once_and_lists_the_build(
    tmp_path: Path, bundles: dict[str, Path], signer: Keys
) -> None:
    store = tmp_path / "store"
    first = _import(bundles["1.0"], signer, store)
    assert first["build"] == "toyengine/1.0-cpu" and first["added_blobs"] == 5
    second = _import(bundles["1.1"], signer, store)
    assert second["added_blobs"] == 3  # the shared torch wheel is kept once
    again = _import(bundles["1.1"], signer, store)
    assert again["added_blobs"] == 0
    rows = _list(store)
    assert [(r["build"], r["complete"]) for r in rows] == [("toyengine/1.0-cpu", True), ("toyengine/1.1-cpu", True)]
    assert len(list((store / "blobs" / "sha256").iterdir())) == 8
    r = cli("store", "verify", "--store", store)
    assert r.exit_code == 0 and "8 blobs re-hashed" in r.output
    text = cli("store", "list", "--store", store)
    assert "toyengine/1.0-cpu" in text.output and "2 build(s), 8 blob(s)" in text.output


def test_import_refuses_an_untrusted_bundle_and_writes_nothing(tmp_path: Path, bundles: dict[str, Path]) -> None:
    other = make_keys(tmp_path / "other")
    store = tmp_path / "store"
    r = cli("import", bundles["1.0"], "--trust", other.trust, "--store", store)
    assert r.exit_code == 3 and "signature policy not met" in r.output
    assert list((store / "blobs" / "sha256").iterdir()) == []
    assert _list(store) == []


def test_import_refuses_a_damaged_bundle(tmp_path: Path, bundles: dict[str, Path], signer: Keys) -> None:
    bad = tmp_path / bundles["1.0"].name
    data = bytearray(bundles["1.0"].read_bytes())
    data[len(data) // 2] ^= 1
    bad.write_bytes(bytes(data))
    (tmp_path / (bad.name + ".minisig")).write_bytes(Path(str(bundles["1.0"]) + ".minisig").read_bytes())
    r = cli("import", bad, "--trust", signer.trust, "--store", tmp_path / "store")
    assert r.exit_code == 4 and "does not have the sha256 its signed frame table lists" in r.output
    assert list((tmp_path / "store" / "blobs" / "sha256").iterdir()) == []


@pytest.mark.parametrize(
    ("module", "cls", "method", "after"),
    [
        ("lockbuild.site.storage", "Store", "adopt_at", 0),  # before the first blob lands
        ("lockbuild.site.storage", "Store", "adopt_at", 2),  # half of the blobs in place
        ("lockbuild.site.storage", "Store", "put_build", 0),  # every blob in place, no build yet
        ("lockbuild.site.storage", "Store", "_write_new", 1),  # the build's manifest staged, not its signatures
    ],
)
def test_a_killed_import_leaves_a_valid_store_and_the_next_import_completes_it(
    tmp_path: Path, bundles: dict[str, Path], signer: Keys, module: str, cls: str, method: str, after: int
) -> None:
    store = tmp_path / "store"
    args = ["import", bundles["1.0"], "--trust", signer.trust, "--store", store]
    assert run_killed(args, module=module, cls=cls, method=method, after=after) == -9
    assert cli("store", "verify", "--store", store).exit_code == 0  # whole blobs or none; no half build
    assert _list(store) == []
    _import(bundles["1.0"], signer, store)
    assert [r["complete"] for r in _list(store)] == [True]
    assert cli("store", "verify", "--store", store).exit_code == 0
    assert list((store / "tmp").iterdir()) == []


def test_store_verify_names_a_damaged_and_a_missing_blob(
    tmp_path: Path, bundles: dict[str, Path], signer: Keys
) -> None:
    store = tmp_path / "store"
    _import(bundles["1.0"], signer, store)
    blobs = sorted((store / "blobs" / "sha256").iterdir())
    assert blobs[0].stat().st_mode & 0o777 == 0o444  # kept read-only
    blobs[0].chmod(0o644)  # damage, as a careless admin or a failing disk would
    blobs[0].write_bytes(blobs[0].read_bytes() + b"x")
    blobs[1].unlink()
    r = cli("store", "verify", "--store", store)
    assert r.exit_code == 4
    assert f"blobs/sha256/{blobs[0].name}: its content has sha256" in r.output
    assert f"missing blob {blobs[1].name}" in r.output
    assert [row["complete"] for row in _list(store)] == [False]
    r = cli("store", "verify", "--store", store, "--remove-damaged")
    assert r.exit_code == 4 and "the damaged blobs were removed" in r.output
    assert not blobs[0].exists()
    _import(bundles["1.0"], signer, store)  # puts back only what is missing
    assert cli("store", "verify", "--store", store).exit_code == 0


def test_gc_removes_only_unreferenced_blobs(tmp_path: Path, bundles: dict[str, Path], signer: Keys) -> None:
    store = tmp_path / "store"
    _import(bundles["1.0"], signer, store)
    stray = store / "blobs" / "sha256" / sha(b"stray")
    stray.write_bytes(b"stray")
    r = cli("store", "gc", "--store", store)
    assert r.exit_code == 0 and "removed 1 unreferenced blob" in r.output
    assert not stray.exists()
    assert cli("store", "verify", "--store", store).exit_code == 0


def test_gc_waits_for_or_refuses_during_an_import(tmp_path: Path, bundles: dict[str, Path], signer: Keys) -> None:
    store = tmp_path / "store"
    _import(bundles["1.0"], signer, store)
    stray = store / "blobs" / "sha256" / sha(b"in flight")
    stray.write_bytes(b"in flight")  # as an import would leave it, just before recording its build
    with Store(store) as s, s.lock(exclusive=True):
        r = cli("store", "gc", "--store", store)
        assert r.exit_code == 5 and "another lockbuild process holds the store" in r.output
        assert stray.exists()
        with pytest.raises(BusyError), Store(store) as s2, s2.lock(exclusive=True):  # an import waits the same way
            pass


def test_hostile_store_layouts_are_refused(tmp_path: Path, bundles: dict[str, Path], signer: Keys) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    # a directory inside the store that is a symbolic link
    store = tmp_path / "store"
    _import(bundles["1.0"], signer, store)
    blobs = store / "blobs" / "sha256"
    blobs.rename(tmp_path / "moved")
    blobs.symlink_to(outside)
    r = cli("store", "verify", "--store", store)
    assert r.exit_code == 1 and "is a symbolic link" in r.output
    r = cli("import", bundles["1.1"], "--trust", signer.trust, "--store", store)
    assert r.exit_code == 1 and "is a symbolic link" in r.output
    assert list(outside.iterdir()) == []
    # a blob that is a symbolic link (to a file holding the right bytes, even)
    store2 = tmp_path / "store2"
    _import(bundles["1.0"], signer, store2)
    victim = sorted((store2 / "blobs" / "sha256").iterdir())[0]
    target = outside / "copy"
    target.write_bytes(victim.read_bytes())
    victim.unlink()
    victim.symlink_to(target)
    r = cli("store", "verify", "--store", store2)
    assert r.exit_code == 4 and "is a link or not a plain file" in r.output
    r = cli("import", bundles["1.0"], "--trust", signer.trust, "--store", store2)
    assert r.exit_code == 4 and "is a link or not a plain file" in r.output
    # a blob that is a directory
    victim.unlink()
    victim.mkdir()
    r = cli("store", "verify", "--store", store2)
    assert r.exit_code == 4 and "is a link or not a plain file" in r.output
    # an engine directory that is a symbolic link
    store3 = tmp_path / "store3"
    _import(bundles["1.0"], signer, store3)
    (store3 / "builds" / "toyengine").rename(outside / "toyengine")
    (store3 / "builds" / "toyengine").symlink_to(outside / "toyengine")
    assert cli("store", "list", "--store", store3).exit_code == 1
    # names with '..' or '/' never become paths
    for ref in ("../x/1.0-cpu", "toyengine/../../etc-x", "toyengine/1.0-..", "toyengine/1.0"):
        with pytest.raises(StoreError):
            parse_build_ref(ref)
    # a directory that is not a store is not made into one
    busy = tmp_path / "home"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    r = cli("import", bundles["1.0"], "--trust", signer.trust, "--store", busy)
    assert r.exit_code == 1 and "is not a lockbuild store" in r.output
    assert sorted(os.listdir(busy)) == ["notes.txt"]


def test_a_different_build_under_the_same_name_is_refused(
    tmp_path: Path, bundles: dict[str, Path], signer: Keys
) -> None:
    store = tmp_path / "store"
    _import(bundles["1.0"], signer, store)
    rebuilt = make_bundle(tmp_path / "rebuilt", [signer.secret], version="1.0", serial_days=3)
    r = cli("import", rebuilt, "--trust", signer.trust, "--store", store)
    assert r.exit_code == 4 and "already holds a different toyengine/1.0-cpu" in r.output


def test_a_co_signature_is_added_and_never_removed(tmp_path: Path, bundles: dict[str, Path], signer: Keys) -> None:
    from lockbuild.minisign import parse_signatures, read_secret_key
    from lockbuild.trust import InMemorySigner, sign_bundle

    store = tmp_path / "store"
    _import(bundles["1.0"], signer, store)
    cosigned = tmp_path / "co" / bundles["1.0"].name
    cosigned.parent.mkdir()
    cosigned.write_bytes(bundles["1.0"].read_bytes())
    Path(f"{cosigned}.minisig").write_bytes(Path(f"{bundles['1.0']}.minisig").read_bytes())
    second = make_keys(tmp_path / "second", "second")
    sign_bundle(cosigned, InMemorySigner(read_secret_key(second.secret, lambda: "")))
    sigs = store / "builds" / "toyengine" / "1.0-cpu" / "bundle.toml.minisig"
    _import(cosigned, signer, store)  # the second key is not trusted here: its block is not kept
    assert len(parse_signatures(sigs.read_bytes())) == 1
    both = tmp_path / "trust-both"
    both.mkdir()
    for k in (signer, second):
        (both / k.public.name).write_bytes(k.public.read_bytes())
    _import(cosigned, Keys(signer.secret, signer.public, both), store)
    assert len(parse_signatures(sigs.read_bytes())) == 2
    _import(bundles["1.0"], signer, store)  # the older .minisig, with one signature
    assert len(parse_signatures(sigs.read_bytes())) == 2


def test_junk_blocks_from_untrusted_keys_never_reach_the_store(
    tmp_path: Path, bundles: dict[str, Path], signer: Keys
) -> None:
    """Two accepted imports must not wedge a build: only blocks that count are kept, one per key, so the
    store's .minisig stays within what every reader accepts."""
    from lockbuild.minisign import parse_signatures, read_secret_key
    from lockbuild.trust import InMemorySigner, sign_bundle

    store = tmp_path / "store"
    sigs = store / "builds" / "toyengine" / "1.0-cpu" / "bundle.toml.minisig"
    for i in range(3):
        junk = tmp_path / f"junk{i}" / bundles["1.0"].name
        junk.parent.mkdir()
        junk.write_bytes(bundles["1.0"].read_bytes())
        Path(f"{junk}.minisig").write_bytes(Path(f"{bundles['1.0']}.minisig").read_bytes())
        for j in range(20):  # 20 untrusted co-signers beside the one trusted signature
            other = make_keys(tmp_path / f"k{i}-{j}", f"k{i}x{j}")
            sign_bundle(junk, InMemorySigner(read_secret_key(other.secret, lambda: "")))
        _import(junk, signer, store)
        assert len(parse_signatures(sigs.read_bytes())) == 1
    r = cli("verify", "toyengine/1.0-cpu", "--store", store, "--trust", signer.trust)
    assert r.exit_code == 0, r.output


# --- a store's parents, and an import that works by descriptor --------------------------------------------


@pytest.mark.parametrize("mode", [0o777, 0o775])
def test_a_store_under_a_directory_others_can_write_is_refused(
    tmp_path: Path, bundles: dict[str, Path], signer: Keys, mode: int
) -> None:
    """--root is held to this rule; a store is too: another user who can write a directory above the store
    (not sticky) could rename it away and put a tree of theirs in its place while an import writes into it
    or a node installs from it."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(mode)
    store = shared / "deep" / "store"
    r = cli("import", bundles["1.0"], "--trust", signer.trust, "--store", store)
    assert r.exit_code == 1, r.output
    assert (
        f"refused the store {store}: the directory {shared} above it is writable by its group or by others and "
        f"not sticky (mode {mode:04o})"
    ) in r.output
    assert f"chmod +t {shared}" in r.output and "Traceback" not in r.output
    assert list(shared.iterdir()) == []  # nothing made
    # a store made while the directory was safe is refused once it is not, by every command
    shared.chmod(0o755)
    _import(bundles["1.0"], signer, store)
    shared.chmod(mode)
    for args in (["store", "list"], ["store", "verify"], ["store", "gc"]):
        r = cli(*args, "--store", store)
        assert r.exit_code == 1 and "above it is writable by its group or by others" in r.output, args
    r = cli("install", "toyengine/1.0-cpu", "--store", store, "--root", tmp_path / "root", "--trust", signer.trust)
    assert r.exit_code != 0 and "above it is writable by its group or by others" in r.output
    shared.chmod(mode | 0o1000)  # sticky, like /tmp: no one may rename another's entry
    assert [b["build"] for b in _list(store)] == ["toyengine/1.0-cpu"]


def test_a_store_under_a_directory_of_another_user_is_refused(
    tmp_path: Path, bundles: dict[str, Path], signer: Keys
) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give a directory to another user")
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    r = cli("import", bundles["1.0"], "--trust", signer.trust, "--store", theirs / "store")
    assert r.exit_code == 1 and f"the directory {theirs} above it is owned by uid 65534" in r.output, r.output
    assert "chmod +t" not in r.output and list(theirs.iterdir()) == []


def test_an_ordinary_user_is_held_to_the_same_rule(tmp_path: Path) -> None:
    """As uid 65534: a store under a root-owned 0777 directory is refused, one under a sticky one is made."""
    import shutil
    import subprocess
    import sys
    import tempfile

    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run as uid 65534")
    base = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        base.chmod(0o755)
        code = (
            "import sys; from pathlib import Path; from lockbuild.site.storage import Store, StoreError\n"
            "try:\n    Store(Path(sys.argv[1]), create=True).close(); print('made')\n"
            "except StoreError as e:\n    print(e.message)\n"
        )
        for mode, expected in (
            (0o777, "above it is writable by its group or by others and not sticky"),
            (0o1777, "made"),
        ):
            shared = base / f"shared-{mode:o}"
            shared.mkdir()
            shared.chmod(mode)
            run = subprocess.run(
                [
                    "setpriv",
                    "--reuid",
                    "65534",
                    "--regid",
                    "65534",
                    "--clear-groups",
                    sys.executable,
                    "-c",
                    code,
                    str(shared / "store"),
                ],
                capture_output=True,
                text=True,
                env={"PATH": "/usr/bin:/bin", "HOME": str(base)},
            )
            if "No module named" in run.stderr or "Permission denied" in run.stderr:
                pytest.skip(f"uid 65534 cannot run this venv: {run.stderr.strip()[-200:]}")
            assert expected in run.stdout, (run.stdout, run.stderr)
            assert (shared / "store").exists() == (expected == "made")
    finally:
        shutil.rmtree(base)


def test_a_tmp_swapped_for_a_link_mid_import_redirects_nothing(
    tmp_path: Path, bundles: dict[str, Path], signer: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Right after the signatures are judged, tmp/ is renamed away and a link to a directory of the
    attacker's is put in its place. The import reaches its work directory and every rename into blobs/
    by descriptor: nothing is written through the link, and the blobs land in the store."""
    from lockbuild.site import importer

    store = tmp_path / "store"
    with Store(store, create=True):
        pass
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    real_open_source = importer.open_source

    def swapping(*args: object, **kwargs: object) -> object:
        trusted = real_open_source(*args, **kwargs)  # type: ignore[arg-type]
        (store / "tmp").rename(store / "tmp-moved")
        (store / "tmp").symlink_to(elsewhere)
        return trusted

    monkeypatch.setattr(importer, "open_source", swapping)
    with Store(store) as s:
        done = importer.import_bundle(s, bundles["1.0"], trust_dir=signer.trust)
    assert done.added == 5
    assert list(elsewhere.rglob("*")) == []  # nothing written through the link
    assert len(list((store / "blobs" / "sha256").iterdir())) == 5
    assert list((store / "tmp-moved").iterdir()) == []  # the work directory removed by descriptor


def test_directories_made_for_a_new_store_are_held_to_the_rule_too(
    tmp_path: Path, bundles: dict[str, Path], signer: Keys
) -> None:
    """With umask 002, `import --store NEW/deep/store` makes NEW/deep group-writable on the way: the check
    made again once the directories exist refuses it (the one before could not see them)."""
    old = os.umask(0o002)
    try:
        r = cli("import", bundles["1.0"], "--trust", signer.trust, "--store", tmp_path / "new" / "deep" / "store")
    finally:
        os.umask(old)
    assert (
        r.exit_code == 1 and f"the directory {tmp_path / 'new' / 'deep'} above it is writable by its group" in r.output
    ), r.output
