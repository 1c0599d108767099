"""lockbuild image: an engine as one reproducible squashfs image, mounted read-only."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import PY as PY_X_Y
from conftest import TOY_RECIPE, Keys, make_keys
from servers import FakeServer

from lockbuild.cli import main

PREFIX = "/opt/lockbuild-test/toyengine-1.0"
HAVE_TOOLS = all(shutil.which(t) for t in ("mksquashfs", "unsquashfs", "bwrap"))
pytestmark = pytest.mark.skipif(not HAVE_TOOLS, reason="needs squashfs-tools and bubblewrap")


def cli(*args: str | Path, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, [str(a) for a in args], env=env, catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def build(recipe_text: str, tmp: Path, keys: Keys, name: str) -> Path:
    recipe = tmp / f"{name}.toml"
    recipe.write_text(recipe_text)
    code, stdout, stderr = cli("build", recipe, "--key", keys.secret, "--out", tmp / f"dist-{name}", "--json")
    assert code == 0, stderr
    return Path(json.loads(stdout)["bundles"][0]["bundle"])


@pytest.fixture(scope="module")
def bundles(server: FakeServer, keys: Keys, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    tmp = tmp_path_factory.mktemp("image-bundles")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOCKBUILD_INDEX_URL", server.index_url())
        mp.setenv("LOCKBUILD_CACHE_DIR", str(tmp / "cache"))
        failing = TOY_RECIPE.replace('verify = ["toyengine", "--version"]', 'verify = ["toyengine", "--fail"]')
        yield {"toy": build(TOY_RECIPE, tmp, keys, "toy"), "failing": build(failing, tmp, keys, "failing")}


def image(bundle: Path, out: Path, keys: Keys, *extra: str | Path) -> tuple[int, str, str]:
    return cli("image", bundle, "--trust", keys.trust, "--prefix", PREFIX, "--out", out, *extra)


@pytest.fixture(scope="module")
def built(bundles: dict[str, Path], keys: Keys, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("images") / "toyengine-1.0.sqfs"
    code, _, stderr = image(bundles["toy"], out, keys, "--json", "--modulefiles", out.parent / "modules")
    assert code == 0, stderr
    return out


def test_an_image_writes_the_module_file_for_its_prefix(built: Path) -> None:
    engine_dir = built.parent / "modules" / "toyengine"
    text = (engine_dir / "1.0-cpu.lua").read_text()
    assert f'prepend_path("PATH", "{PREFIX}/bin")' in text and f'whatis("Installed at: {PREFIX}")' in text
    assert os.readlink(engine_dir / "default") == "1.0-cpu.lua"
    assert sorted(p.name for p in engine_dir.iterdir()) == ["1.0-cpu.lua", "default"]


def test_an_image_and_its_record(built: Path, bundles: dict[str, Path]) -> None:
    record = json.loads((built.parent / (built.name + ".json")).read_text())
    assert sorted(record) == sorted(
        [
            "image_sha256",
            "image_size",
            "bundle_sha256",
            "manifest_sha256",
            "signers",
            "prefix",
            "interpreter",
            "lockbuild",
        ]
    )
    data = built.read_bytes()
    assert record["image_sha256"] == hashlib.sha256(data).hexdigest() and record["image_size"] == len(data)
    assert record["bundle_sha256"] == hashlib.sha256(bundles["toy"].read_bytes()).hexdigest()
    assert record["prefix"] == PREFIX
    assert not (built.parent / (built.name + ".minisig")).exists()  # image signs nothing


def test_the_same_bundle_gives_the_same_image(
    built: Path, bundles: dict[str, Path], keys: Keys, tmp_path: Path
) -> None:
    again = tmp_path / "again" / built.name
    again.parent.mkdir()
    code, _, stderr = image(bundles["toy"], again, keys)
    assert code == 0, stderr
    assert again.read_bytes() == built.read_bytes()
    assert (again.parent / (again.name + ".json")).read_bytes() == (built.parent / (built.name + ".json")).read_bytes()
    assert sorted(p.name for p in again.parent.iterdir()) == [again.name, again.name + ".json"]  # nothing else


def _listing(image_file: Path) -> str:
    return subprocess.run(["unsquashfs", "-lln", str(image_file)], capture_output=True, text=True, check=True).stdout


def test_the_tree_is_built_for_the_prefix_with_normal_owners_modes_times_and_bytecode(built: Path) -> None:
    cfg = subprocess.run(
        ["unsquashfs", "-cat", str(built), "pyvenv.cfg"], capture_output=True, text=True, check=True
    ).stdout
    assert "relocatable = true" in cfg
    listing = _listing(built)
    lines = [line for line in listing.splitlines() if "squashfs-root" in line]
    assert all(" 0/0 " in line for line in lines)
    assert all(" 2025-01-06 00:00 " in line for line in lines)  # the bundle's cut-off, every file
    assert not any(line[0] in "-d" and line[1:10] not in ("rwxr-xr-x", "rw-r--r--") for line in lines)
    assert "site-packages/toyengine/__pycache__/__init__.cpython-" in listing
    assert "lockbuild.json" in listing


def _run_from_mount(image_file: Path, script: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    """``script`` in a fresh mount namespace (no network) where the image is mounted read-only at PREFIX:
    with squashfuse where /dev/fuse can be opened here, else unpacked with unsquashfs and bound read-only."""
    from lockbuild.image import view

    empty = tmp / "mountpoint"
    empty.mkdir()
    fuse = os.access("/dev/fuse", os.R_OK | os.W_OK) and shutil.which("squashfuse") is not None
    if fuse:
        mounts = view.mounts(empty, Path(PREFIX))
        head = (
            f"squashfuse -f {image_file} {PREFIX} & pid=$!\n"
            f"for i in $(seq 100); do [ -e {PREFIX}/bin ] && break; sleep 0.05; done\n"
        )
        tail = "\nrc=$?; kill $pid; exit $rc\n"
    else:
        print("no usable /dev/fuse here: the image is unpacked with unsquashfs and bound read-only instead")
        unpacked = tmp / "unsquashed"
        subprocess.run(["unsquashfs", "-q", "-d", str(unpacked), str(image_file)], check=True, capture_output=True)
        mounts = [*view.mounts(empty, Path(PREFIX))[:-3], "--ro-bind", str(unpacked), PREFIX]
        head, tail = "", ""
    argv = [
        "bwrap",
        "--unshare-user",
        "--unshare-pid",
        "--unshare-net",
        "--die-with-parent",
        "--cap-add",
        "ALL",
        *mounts,
        "--",
        "sh",
        "-c",
        head + "(\n" + script + "\n)" + tail,
    ]
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp / "home")}
    )


def test_the_engine_runs_from_the_read_only_mount_with_no_network_and_writes_nothing(
    built: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    before = hashlib.sha256(built.read_bytes()).hexdigest()
    script = (
        f"{PREFIX}/bin/toyengine --version && {PREFIX}/bin/toyengine\n"
        f"{PREFIX}/bin/python -v -c 'import toyengine, toydep' 2>&1 | grep 'code object from' | grep {PREFIX}\n"
        f"python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 80), timeout=2)' 2>/dev/null"
        f" && echo NETWORK || echo no-network\n"
        f"touch {PREFIX}/new 2>/dev/null && echo WRITABLE || echo read-only"
    )
    ran = _run_from_mount(built, script, tmp_path)
    assert ran.returncode == 0, ran.stderr
    out = ran.stdout.splitlines()
    assert out[:2] == ["toyengine 1.0", "toyengine serving"], ran.stdout
    imported = [line for line in out if line.startswith("# code object from")]
    # every module of the environment came from its checked-hash .pyc: nothing compiled on the mount
    assert len(imported) >= 2 and all(line.endswith(".pyc'") for line in imported), imported
    assert "no-network" in out and "read-only" in out
    assert list(home.iterdir()) == []
    assert hashlib.sha256(built.read_bytes()).hexdigest() == before


@pytest.fixture(scope="module")
def signed(built: Path, keys: Keys, tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("signed") / built.name
    shutil.copyfile(built, copy)
    shutil.copyfile(built.parent / (built.name + ".json"), copy.parent / (copy.name + ".json"))
    code, stdout, stderr = cli("sign", copy, "--key", keys.secret, "--json")
    assert code == 0, stderr
    assert json.loads(stdout)["signature"] == str(copy) + ".minisig"
    return copy


def test_a_signed_image_verifies(signed: Path, keys: Keys) -> None:
    code, stdout, stderr = cli("verify", signed, "--trust", keys.trust, "--json")
    assert code == 0, stderr
    done = json.loads(stdout)
    assert done["build"] == "toyengine/1.0-cpu" and done["prefix"] == PREFIX
    block = (signed.parent / (signed.name + ".minisig")).read_text()
    assert "file=toyengine-1.0.sqfs" in block  # one lockbuild statement, in the minisign format
    if shutil.which("minisign"):
        subprocess.run(["minisign", "-Vm", str(signed), "-p", str(keys.public)], check=True, capture_output=True)


def _copy(signed: Path, dest: Path) -> Path:
    dest.mkdir()
    for suffix in ("", ".json", ".minisig"):
        shutil.copyfile(signed.parent / (signed.name + suffix), dest / (signed.name + suffix))
    return dest / signed.name


def test_a_flipped_byte_in_the_image_fails_verify(signed: Path, keys: Keys, tmp_path: Path) -> None:
    copy = _copy(signed, tmp_path / "c")
    data = bytearray(copy.read_bytes())
    data[len(data) // 2] ^= 1
    copy.write_bytes(bytes(data))
    code, _, stderr = cli("verify", copy, "--trust", keys.trust)
    assert code == 3 and "does not verify" in stderr and "altered" in stderr, stderr


def test_an_edited_record_fails_verify(signed: Path, keys: Keys, tmp_path: Path) -> None:
    copy = _copy(signed, tmp_path / "c")
    rec = copy.parent / (copy.name + ".json")
    rec.write_text(rec.read_text().replace(PREFIX, "/opt/elsewhere"))
    code, _, stderr = cli("verify", copy, "--trust", keys.trust)
    assert code == 4 and f"the record {copy.name}.json has sha256" in stderr and "the signatures sign" in stderr, stderr


def _resign(copy: Path, keys: Keys, record: dict[str, object] | None = None, **signed: object) -> None:
    """Write ``record`` (default: as it stands) beside ``copy`` and sign, with ``keys``, a statement over the
    image and that record as `sign` would, with the fields in ``signed`` changed: a signed image whose one
    disagreement is the one a check must catch."""
    import dataclasses

    from lockbuild.image.judge import statement_of
    from lockbuild.image.record import image_marker
    from lockbuild.minisign import read_secret_key
    from lockbuild.trust import digest_signed_file, sign_statement

    rec = copy.parent / (copy.name + ".json")
    data = record if record is not None else json.loads(rec.read_text())
    raw = (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()
    rec.write_bytes(raw)
    digests = digest_signed_file(copy)
    statement = dataclasses.replace(statement_of(copy, digests, raw, image_marker(copy), None), **signed)
    block = sign_statement(read_secret_key(keys.secret, lambda: ""), statement, digests.blake2b)
    (copy.parent / (copy.name + ".minisig")).write_text(block)


def test_a_resigned_image_verifies(signed: Path, keys: Keys, tmp_path: Path) -> None:
    """The helper below signs as `sign` does: with nothing changed, the image verifies (so each refusal
    after it is the one check's)."""
    copy = _copy(signed, tmp_path / "c")
    _resign(copy, keys)
    code, _, stderr = cli("verify", copy, "--trust", keys.trust)
    assert code == 0, stderr


def test_an_untrusted_image_is_refused_before_a_byte_of_it_is_hashed(
    signed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one decision's first step: no trusted statement names the image, so it is refused before it
    is read (an image is gigabytes: hashing it whole for a stranger's signature is the attacker's price)."""
    from lockbuild import digest

    other = make_keys(tmp_path / "other", "other")
    hashed: list[int] = []
    for cls in (digest.BackgroundHash, digest.TwinHasher):
        real = cls.update

        def update(self: object, data: bytes, _real: object = real) -> None:
            hashed.append(len(data))
            _real(self, data)  # type: ignore[operator]

        monkeypatch.setattr(cls, "update", update)
    import lockbuild.trust.source as port

    real_digest = port.digest_exactly

    def digest_exactly(f: object, size: int, *args: object, **kw: object) -> object:
        hashed.append(size)  # the one pass over a signed file: the image's bytes would be hashed here
        return real_digest(f, size, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(port, "digest_exactly", digest_exactly)
    code, _, stderr = cli("verify", signed, "--trust", other.trust)
    assert code == 3 and "not in the trust store" in stderr, stderr
    assert hashed == [], f"{sum(hashed)} bytes of an untrusted image were hashed"


def test_the_sites_dates_apply_to_an_image(signed: Path, keys: Keys, tmp_path: Path) -> None:
    trust = tmp_path / "trust"
    trust.mkdir()
    (trust / keys.public.name).write_bytes(keys.public.read_bytes())
    (trust / "policy.toml").write_text("not-after = 2025-01-01T00:00:00Z\n")
    code, _, stderr = cli("verify", signed, "--trust", trust)
    assert code == 3 and "is after the site's not-after 2025-01-01" in stderr, stderr


def test_an_image_whose_marker_is_not_the_signed_build_fails_verify(signed: Path, keys: Keys, tmp_path: Path) -> None:
    """Signed: this image, this record, but another version than the marker inside says."""
    copy = _copy(signed, tmp_path / "c")
    _resign(copy, keys, version="9.9")
    code, _, stderr = cli("verify", copy, "--trust", keys.trust)
    assert code == 4 and "the marker inside" in stderr and "toyengine 9.9-cpu" in stderr, stderr


def test_a_record_that_describes_another_image_fails_verify_even_when_signed(
    signed: Path, keys: Keys, tmp_path: Path
) -> None:
    """Signed: this image and a record whose image digest is another image's."""
    copy = _copy(signed, tmp_path / "c")
    record = json.loads((copy.parent / (copy.name + ".json")).read_text())
    record["image_sha256"] = "1" * 64
    _resign(copy, keys, record)
    code, _, stderr = cli("verify", copy, "--trust", keys.trust)
    assert code == 4 and "its record says" in stderr and "1" * 64 in stderr, stderr


def test_an_image_signed_by_an_untrusted_key_fails_verify(signed: Path, tmp_path: Path) -> None:
    other = make_keys(tmp_path / "other", "other")
    code, _, stderr = cli("verify", signed, "--trust", other.trust)
    assert code == 3 and "not in the trust store" in stderr, stderr


def test_a_marker_that_names_another_bundle_fails_verify_even_when_signed(
    signed: Path, keys: Keys, tmp_path: Path
) -> None:
    """The marker check is real: a record naming another bundle, signed as it stands, is refused."""
    from lockbuild.image.judge import statement_of
    from lockbuild.image.record import image_marker
    from lockbuild.minisign import read_secret_key
    from lockbuild.trust import digest_signed_file, sign_statement

    copy = _copy(signed, tmp_path / "c")
    rec = copy.parent / (copy.name + ".json")
    data = json.loads(rec.read_text())
    data["bundle_sha256"] = "0" * 64
    raw = (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()
    rec.write_bytes(raw)
    digests = digest_signed_file(copy)
    statement = statement_of(copy, digests, raw, image_marker(copy), None)
    block = sign_statement(read_secret_key(keys.secret, lambda: ""), statement, digests.blake2b)
    (copy.parent / (copy.name + ".minisig")).write_text(block)
    code, _, stderr = cli("verify", copy, "--trust", keys.trust)
    assert code == 4 and "the marker inside" in stderr and "0" * 64 in stderr, stderr
    code, _, stderr = cli("sign", copy, "--key", keys.secret)  # and sign refuses to sign it
    assert code == 4 and "the marker inside" in stderr, stderr


def test_list_images_shows_what_each_holds(signed: Path) -> None:
    code, stdout, stderr = cli("list", "--images", signed.parent, "--json")
    assert code == 0, stderr
    (row,) = json.loads(stdout)["images"]
    assert (row["engine"], row["version"], row["variant"]) == ("toyengine", "1.0", "cpu")
    assert row["signature_file"] == "present (not verified)" and "signed" not in row
    assert row["record"]["prefix"] == PREFIX
    code, stdout, _ = cli("list", "--images", signed.parent)
    assert "toyengine" in stdout and PREFIX in stdout and "signature file present (not verified)" in stdout


def _planted_image(folder: Path, marker_size: int | None = None) -> Path:
    """FILE.sqfs (a real squashfs whose lockbuild.json is a sparse file of ``marker_size`` bytes, or just the
    magic), a well-formed record, and a .minisig of garbage beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    sqfs = folder / "planted.sqfs"
    if marker_size is None:
        sqfs.write_bytes(b"hsqs" + bytes(4092))
    else:
        tree = folder.parent / "tree"
        tree.mkdir()
        with (tree / "lockbuild.json").open("wb") as f:
            f.truncate(marker_size)
        subprocess.run(["mksquashfs", str(tree), str(sqfs), "-quiet", "-noappend"], check=True, capture_output=True)
    digest = "0" * 64
    (folder / "planted.sqfs.json").write_text(
        json.dumps(
            {
                "image_sha256": digest,
                "image_size": 4096,
                "bundle_sha256": digest,
                "manifest_sha256": digest,
                "signers": [],
                "prefix": "/opt/x",
                "interpreter": "/usr/bin/python3",
                "lockbuild": "0",
            }
        )
    )
    (folder / "planted.sqfs.minisig").write_text("not a signature at all\n")
    return sqfs


def test_list_images_reads_a_marker_bounded_and_kills_unsquashfs_past_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unverified image whose marker is endless: unsquashfs is stopped at the bound, at once, and the
    listing says so; a .minisig of garbage beside it is reported as a file present, never as signed."""
    import time

    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "unsquashfs").write_text("#!/bin/sh\nhead -c 8000000 /dev/zero; sleep 60\n")
    (fake / "unsquashfs").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    folder = tmp_path / "images"
    _planted_image(folder)
    started = time.monotonic()
    code, stdout, stderr = cli("list", "--images", folder, "--json")
    assert code == 0, stderr
    assert time.monotonic() - started < 20
    (row,) = json.loads(stdout)["images"]
    assert "is over 1048576 bytes (unsquashfs was stopped there)" in row["problem"]
    assert row["signature_file"] == "present (not verified)" and "signed" not in row


def test_list_images_escapes_what_an_image_and_its_name_say(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An image named with an escape sequence and a line feed, whose (unverified) marker names its engine
    with them too: each listed row is one line, escaped."""
    fake = tmp_path / "bin"
    fake.mkdir()
    marker = {
        "engine": "evil\x1b[2J\nchose x",
        "version": "1",
        "variant": "v",
        "binary": "b",
        "requirements": [],
        "exclude_newer": "",
        "uv": "0",
        "installed": "",
        "bundle": "b.lbz",
        "bundle_sha256": "0" * 64,
        "serial": 1,
        "signers": [],
        "python": "3.12",
        "platform": "p",
        "lockbuild": "0",
    }
    (fake / "unsquashfs").write_text(f"#!/bin/sh\nprintf '%s' '{json.dumps(marker)}'\n")
    (fake / "unsquashfs").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    folder = tmp_path / "images"
    sqfs = _planted_image(folder)
    for name in ("a\x1b]0;owned\x07\nforged line.sqfs", "b.sqfs"):
        for suffix in ("", ".json"):
            shutil.copyfile(folder / (sqfs.name + suffix), folder / (name + suffix))
    code, stdout, stderr = cli("list", "--images", folder)
    assert code == 0, stderr
    assert "\x1b" not in stdout and "\x07" not in stdout, stdout
    assert not any(line.startswith(("forged", "chose")) for line in stdout.splitlines()), stdout
    assert "evil\\x1b[2J\\x0achose x" in stdout and "owned\\x07\\x0aforged line.sqfs" in stdout, stdout


@pytest.mark.skipif(shutil.which("mksquashfs") is None, reason="needs squashfs-tools")
def test_a_real_image_whose_marker_is_a_huge_sparse_file_is_listed_with_the_bound(tmp_path: Path) -> None:
    folder = tmp_path / "images"
    _planted_image(folder, marker_size=64 << 20)
    code, stdout, stderr = cli("list", "--images", folder)
    assert code == 0, stderr
    assert "planted.sqfs: the lockbuild.json at the root of" in stdout and "is over 1048576 bytes" in stdout


def test_mksquashfs_writes_only_into_a_directory_no_one_else_can_write(
    bundles: dict[str, Path], keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mksquashfs opens its output by path. That path is in this run's own 0700 work directory, so another
    user who can write --out's directory cannot swap it for a link between its creation and mksquashfs's
    open; the image is renamed into place afterwards. A link planted at the old fixed temporary name (a
    dot, the name, the process id) is left alone and does not stop the build."""
    real = shutil.which("mksquashfs")
    assert real is not None
    bin_dir, seen = tmp_path / "bin", tmp_path / "seen"
    bin_dir.mkdir()
    wrapper = bin_dir / "mksquashfs"
    wrapper.write_text(f'#!/bin/sh\nstat -c "%a %u %n" "$(dirname "$2")" > {seen}\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    out_dir = tmp_path / "shared"
    out_dir.mkdir()
    out_dir.chmod(0o777)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (out_dir / f".x.sqfs.{os.getpid()}.partial").symlink_to(victim)
    (out_dir / f".x.sqfs.json.{os.getpid()}.partial").symlink_to(victim)
    code, _, stderr = image(bundles["toy"], out_dir / "x.sqfs", keys)
    assert code == 0, stderr
    mode, uid, where = seen.read_text().split(maxsplit=2)
    assert (mode, int(uid)) == ("700", os.geteuid()) and Path(where.strip()).parent == out_dir
    assert victim.read_text() == "precious\n"
    assert (out_dir / "x.sqfs").is_file() and not (out_dir / "x.sqfs").is_symlink()


def _nothing_left(
    bundle: Path, keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trust: Path | None = None
) -> str:
    import tempfile

    out_dir, tmpdir = tmp_path / "out", tmp_path / "tmpdir"
    out_dir.mkdir()
    tmpdir.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmpdir))
    monkeypatch.setattr(tempfile, "tempdir", str(tmpdir))
    code, _, stderr = cli(
        "image", bundle, "--trust", trust or keys.trust, "--prefix", PREFIX, "--out", out_dir / "x.sqfs"
    )
    assert code != 0
    assert list(out_dir.iterdir()) == [] and list(tmpdir.iterdir()) == []
    return stderr


def test_a_failing_verify_command_leaves_no_image_and_no_temporary_file(
    bundles: dict[str, Path], keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stderr = _nothing_left(bundles["failing"], keys, tmp_path, monkeypatch)
    assert "the verify command (toyengine --fail) failed (exit 3)" in stderr


def test_a_bad_signature_leaves_no_image_and_no_temporary_file(
    bundles: dict[str, Path], keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = make_keys(tmp_path / "other", "other")
    stderr = _nothing_left(bundles["toy"], keys, tmp_path, monkeypatch, trust=other.trust)
    assert "signature policy not met" in stderr


@pytest.mark.parametrize("prefix", ["relative/path", "/", "/usr", "/opt/a/../b"])
def test_a_prefix_that_is_not_plain_or_covers_the_system_is_refused(
    prefix: str, bundles: dict[str, Path], keys: Keys, tmp_path: Path
) -> None:
    code, _, stderr = cli(
        "image", bundles["toy"], "--trust", keys.trust, "--prefix", prefix, "--out", tmp_path / "x.sqfs"
    )
    assert code == 1 and "--prefix" in stderr, stderr
    assert list(tmp_path.iterdir()) == []


def test_an_out_that_is_not_a_sqfs_is_refused(bundles: dict[str, Path], keys: Keys, tmp_path: Path) -> None:
    code, _, stderr = cli(
        "image", bundles["toy"], "--trust", keys.trust, "--prefix", PREFIX, "--out", tmp_path / "x.img"
    )
    assert code == 1 and "FILE.sqfs" in stderr, stderr


@pytest.fixture(scope="module")
def py_bundle(server: FakeServer, keys: Keys, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The toy engine with this machine's Python packed as a python-build-standalone archive."""
    from standalone import archive_name, make_tree, pack

    tmp = tmp_path_factory.mktemp("image-py")
    name = archive_name("20251014")
    server.add_release("astral-sh/python-build-standalone", "20251014", {name: pack(make_tree(tmp / "pbs"))})
    with pytest.MonkeyPatch.context() as mp:
        for var, value in (
            ("LOCKBUILD_INDEX_URL", server.index_url()),
            ("LOCKBUILD_GITHUB_API", server.github_api),
            ("LOCKBUILD_GITHUB_DOWNLOAD", server.github_download),
            ("LOCKBUILD_CACHE_DIR", str(tmp / "cache")),
        ):
            mp.setenv(var, value)
        return build(TOY_RECIPE + f'interpreter = {{ tag = "20251014", file = "{name}" }}\n', tmp, keys, "py")


@pytest.mark.slow
def test_the_bundles_interpreter_goes_inside_the_image(py_bundle: Path, keys: Keys, tmp_path: Path) -> None:
    out = tmp_path / "py.sqfs"
    code, stdout, stderr = image(py_bundle, out, keys, "--json")
    assert code == 0, stderr
    interpreter = json.loads(stdout)["interpreter"]
    assert interpreter.startswith(f"{PREFIX}/.python/") and interpreter.endswith("/bin/python" + PY_X_Y)
    (tmp_path / "home").mkdir()
    script = (
        f"{PREFIX}/bin/toyengine --version\n"
        f"{PREFIX}/bin/python -c 'import sys; print(sys.base_prefix)'\n"
        f"{PREFIX}/bin/python -v -c 'import json' 2>&1 | grep 'code object from' | grep {PREFIX}/.python"
    )
    ran = _run_from_mount(out, script, tmp_path)
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert lines[0] == "toyengine 1.0" and lines[1] == interpreter.removesuffix("/bin/python" + PY_X_Y)
    stdlib = [line for line in lines if line.startswith("# code object from")]
    assert stdlib and all(line.endswith(".pyc'") for line in stdlib), stdlib  # the stdlib's bytecode, in the image


def test_the_sign_hint_names_the_image_as_the_user_gave_it(
    bundles: dict[str, Path], keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--out images/toy.sqfs`` from where the user stands: the hint is a command that works from there."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "images").mkdir()
    code, stdout, stderr = image(bundles["toy"], Path("images/toy.sqfs"), keys)
    assert code == 0, stderr
    assert stdout.rstrip().endswith("not signed: lockbuild sign images/toy.sqfs --key KEY"), stdout
