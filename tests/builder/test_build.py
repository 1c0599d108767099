"""lockbuild build: reproducible bytes, all-or-nothing output, several signers, minisign interop, SBOM."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import TOY_RECIPE, Keys, make_keys

from lockbuild.cli import main
from lockbuild.minisign import read_public_key

minisign = shutil.which("minisign")
needs_minisign = pytest.mark.skipif(minisign is None, reason="the minisign binary is not installed")


def cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def sig_count(bundle: Path) -> int:
    return sum(line.startswith("trusted comment: ") for line in Path(str(bundle) + ".minisig").read_text().splitlines())


def build(recipe: Path, key: Path, out: Path, *extra: str, env: dict[str, str] | None = None) -> Path:
    code, stdout, stderr = cli("build", str(recipe), "--key", str(key), "--out", str(out), "--json", *extra, env=env)
    assert code == 0, stderr
    return Path(json.loads(stdout)["bundles"][0]["bundle"])


def test_rebuilds_are_bit_for_bit_identical(env, keys: Keys, toy_recipe: Path, tmp_path: Path) -> None:
    cold = build(
        toy_recipe, keys.secret, tmp_path / "a", "--threads", "1", env={"LOCKBUILD_CACHE_DIR": str(tmp_path / "cache1")}
    )
    warm = build(
        toy_recipe, keys.secret, tmp_path / "b", "--threads", "4", env={"LOCKBUILD_CACHE_DIR": str(tmp_path / "cache1")}
    )
    other = build(
        toy_recipe, keys.secret, tmp_path / "c", "--threads", "2", env={"LOCKBUILD_CACHE_DIR": str(tmp_path / "cache2")}
    )
    assert cold.read_bytes() == warm.read_bytes() == other.read_bytes()


def test_failed_build_leaves_the_output_dir_empty(env, keys: Keys, tmp_path: Path) -> None:
    recipe = tmp_path / "r.toml"
    recipe.write_text(TOY_RECIPE.replace("toyengine==1.0", "toyengine==9.9"))
    out = tmp_path / "dist"
    code, _, stderr = cli("build", str(recipe), "--key", str(keys.secret), "--out", str(out))
    assert code == 1 and "ERROR" in stderr
    assert not out.exists() or list(out.iterdir()) == []


def test_two_signers_and_a_threshold(env, keys: Keys, toy_recipe: Path, tmp_path: Path) -> None:
    bundle = build(toy_recipe, keys.secret, tmp_path / "d")
    second = make_keys(tmp_path / "k2", "second")
    trust = tmp_path / "trust"
    trust.mkdir()
    shutil.copy(keys.public, trust / "release.pub")
    shutil.copy(second.public, trust / "second.pub")

    code, _, stderr = cli("verify", str(bundle), "--trust", str(trust), "--threshold", "2")
    assert code == 3 and "needed 2" in stderr

    code, stdout, stderr = cli("sign", str(bundle), "--key", str(keys.secret))  # renews, never duplicates
    assert code == 0 and "re-signed" in stdout, stderr
    assert sig_count(bundle) == 1

    code, _, stderr = cli("sign", str(bundle), "--key", str(second.secret))
    assert code == 0, stderr
    assert sig_count(bundle) == 2
    code, stdout, stderr = cli("verify", str(bundle), "--trust", str(trust), "--threshold", "2", "--json")
    assert code == 0, stderr
    assert sorted(json.loads(stdout)["signers"]) == sorted(
        read_public_key(k).key_id_hex for k in (keys.public, second.public)
    )
    if minisign:  # the first signature stays verifiable by stock minisign
        proc = subprocess.run([minisign, "-Vm", str(bundle), "-p", str(keys.public)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr


@needs_minisign
def test_stock_minisign_verifies_and_its_keys_sign(env, toy_recipe: Path, tmp_path: Path) -> None:
    assert minisign is not None
    pub, sec = tmp_path / "m.pub", tmp_path / "m.key"
    subprocess.run([minisign, "-G", "-W", "-p", str(pub), "-s", str(sec)], check=True, capture_output=True)
    bundle = build(toy_recipe, sec, tmp_path / "d")
    proc = subprocess.run([minisign, "-Vm", str(bundle), "-p", str(pub)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert f"file={bundle.name}" in proc.stdout
    trust = tmp_path / "trust"
    trust.mkdir()
    shutil.copy(pub, trust / "m.pub")
    assert cli("verify", str(bundle), "--trust", str(trust))[0] == 0


@pytest.mark.parametrize(
    ("attack", "expected_code", "expected"),
    [
        ("flip", 4, "does not have the sha256 its signed frame table lists"),  # a frame, before it is decompressed
        ("comment", 3, "does not verify"),
        ("untrusted", 3, "not in the trust store"),
        ("other-bundle", 4, "is incomplete (or it is not the file that was signed)"),
        ("empty-trust", 3, "holds no *.pub files"),
        ("renamed", 3, "named"),
    ],
)
def test_verify_refuses(
    attack: str, expected_code: int, expected: str, env, keys: Keys, toy_recipe: Path, tmp_path: Path
) -> None:
    bundle = build(toy_recipe, keys.secret, tmp_path / "d")
    sig = Path(str(bundle) + ".minisig")
    trust = keys.trust
    if attack == "flip":
        data = bytearray(bundle.read_bytes())
        data[len(data) // 3] ^= 0x01
        bundle.write_bytes(bytes(data))
    elif attack == "comment":
        sig.write_text(sig.read_text().replace("engine=toyengine", "engine=toyengin3"))
    elif attack == "untrusted":
        trust = make_keys(tmp_path / "k", "stranger").trust
    elif attack == "other-bundle":
        other = tmp_path / "other.toml"
        other.write_text(toy_recipe.read_text() + 'as-of = "2025-01-25T00:00:00Z"\n')
        other_bundle = build(other, keys.secret, tmp_path / "o")
        shutil.copy(Path(str(other_bundle) + ".minisig"), sig)
    elif attack == "empty-trust":
        trust = tmp_path / "empty"
        trust.mkdir()
    elif attack == "renamed":
        renamed = bundle.with_name("toyengine-1.0-gpu-x86_64-manylinux_2_28.lbz")
        bundle.rename(renamed)
        sig.rename(str(renamed) + ".minisig")
        bundle = renamed
    code, _, stderr = cli("verify", str(bundle), "--trust", str(trust))
    if attack == "other-bundle" and code == 3:  # the other bundle is the larger file: its statement does not verify
        assert "does not verify: it signs a file of" in stderr, stderr
        return
    assert code == expected_code, stderr
    assert expected in stderr


@pytest.mark.slow  # over 5 s
def test_sbom_is_valid_cyclonedx(env, keys: Keys, toy_recipe: Path, tmp_path: Path) -> None:
    pytest.importorskip("cyclonedx")
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    out = tmp_path / "f"
    code, _, stderr = cli("fetch", str(toy_recipe), "--out", str(out))
    assert code == 0, stderr
    bundle = build(toy_recipe, keys.secret, tmp_path / "d")
    root = tmp_path / "x"
    code, _, stderr = cli("install", str(bundle), "--root", str(root), "--trust", str(keys.trust))
    assert code == 0, stderr
    sbom = (root / "toyengine" / "1.0-cpu" / "lockbuild" / "sbom.cdx.json").read_text()
    assert JsonStrictValidator(SchemaVersion.V1_5).validate_str(sbom) is None
    doc = json.loads(sbom)
    purls = {c.get("purl", "") for c in doc["components"]}
    assert any(p.startswith("pkg:pypi/toydep@1.0") for p in purls)
    assert all(c["hashes"][0]["alg"] == "SHA-256" for c in doc["components"])


def test_failure_while_packing_leaves_nothing(
    env, keys: Keys, toy_recipe: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import lockbuild.builder.pack as pack_module
    from lockbuild.errors import IntegrityError

    def broken(out, manifest, entries, **kw):  # type: ignore[no-untyped-def]
        out.write(b"partial bytes")
        raise IntegrityError("simulated: a cached file changed while packing")

    monkeypatch.setattr(pack_module, "write_bundle", broken)
    out = tmp_path / "dist"
    code, _, stderr = cli("build", str(toy_recipe), "--key", str(keys.secret), "--out", str(out))
    assert code == 4 and "simulated" in stderr
    assert list(out.iterdir()) == []


def test_an_output_error_is_a_lockbuild_error_and_leaves_nothing(
    env, keys: Keys, toy_recipe: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bundle is written on a thread of its own: a full disk there still stops the build with an
    ERROR that says what to do (not a traceback), and the output directory keeps nothing."""
    import errno

    import lockbuild.builder.pack as pack_module
    from lockbuild.digest import HashingWriter

    class FullDisk:
        def __init__(self, raw: object) -> None:
            self.raw = raw

        def write(self, data: bytes) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pack_module, "HashingWriter", lambda raw: HashingWriter(FullDisk(raw)))  # type: ignore[arg-type]
    out = tmp_path / "dist"
    code, _, stderr = cli("build", str(toy_recipe), "--key", str(keys.secret), "--out", str(out))
    assert code == 1, stderr
    assert "ERROR cannot write the bundle" in stderr and "No space left on device" in stderr
    assert "TIP Check the free space" in stderr
    assert list(out.iterdir()) == []


def test_keygen_encrypts_and_build_reads_the_passphrase_from_the_environment(
    env, toy_recipe: Path, tmp_path: Path
) -> None:
    code, _, stderr = cli("keygen", str(tmp_path / "k"), env={"LOCKBUILD_KEY_PASSWORD": "correct horse"})
    assert code == 0, stderr
    secret = tmp_path / "k.key"
    assert secret.stat().st_mode & 0o777 == 0o600
    assert "encrypted" in secret.read_text().splitlines()[0]
    code, _, stderr = cli("keygen", str(tmp_path / "k"), env={"LOCKBUILD_KEY_PASSWORD": "x"})
    assert code != 0 and "exists" in stderr
    out = tmp_path / "d"
    code, _, stderr = cli(
        "build", str(toy_recipe), "--key", str(secret), "--out", str(out), env={"LOCKBUILD_KEY_PASSWORD": "wrong"}
    )
    assert code == 3 and "passphrase" in stderr
    assert not out.exists() or list(out.iterdir()) == []
    build(toy_recipe, secret, out, env={"LOCKBUILD_KEY_PASSWORD": "correct horse"})


def test_sign_checks_before_it_signs(env, keys: Keys, toy_recipe: Path, tmp_path: Path) -> None:
    """From the command line: a co-signer's `sign --trust` reports the signatures present,
    refuses a bundle whose trusted signature does not verify (exit 3) and a damaged bundle (exit 4)."""
    bundle = build(toy_recipe, keys.secret, tmp_path / "d")
    second = make_keys(tmp_path / "k2", "second")
    code, stdout, stderr = cli("sign", str(bundle), "--key", str(second.secret), "--trust", str(keys.trust), "--json")
    assert code == 0, stderr
    data = json.loads(stdout)
    assert data["existing"]["signatures"][0]["counts"] and data["members"] > 0 and not data["replaced"]
    sig = Path(str(bundle) + ".minisig")
    good = sig.read_text()
    lines = good.splitlines(keepends=True)
    lines[1] = lines[1][:60] + ("A" if lines[1][60] != "A" else "B") + lines[1][61:]  # in the signature bytes
    sig.write_text("".join(lines))
    code, _, stderr = cli("sign", str(bundle), "--key", str(second.secret), "--trust", str(keys.trust))
    assert code == 3 and "does not verify" in stderr
    sig.write_text(good)
    data_bytes = bytearray(bundle.read_bytes())
    data_bytes[len(data_bytes) // 2] ^= 1
    bundle.write_bytes(bytes(data_bytes))
    code, _, stderr = cli("sign", str(bundle), "--key", str(second.secret))
    assert code == 4, stderr
    assert sig.read_text() == good  # nothing was added


def test_verify_json_says_who_counted(env, keys: Keys, toy_recipe: Path, tmp_path: Path) -> None:
    bundle = build(toy_recipe, keys.secret, tmp_path / "d")
    code, stdout, stderr = cli("verify", str(bundle), "--trust", str(keys.trust), "--json")
    assert code == 0, stderr
    data = json.loads(stdout)
    assert data["size"] == bundle.stat().st_size and data["policy"]["met"]
    assert data["policy"]["signatures"] == [
        {"index": 1, "key_id": read_public_key(keys.public).key_id_hex, "counts": True, "reason": ""}
    ]


def test_keygen_prompt_names_the_key_and_says_why_it_asks_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The prompt names the key file; an empty passphrase is refused with a reason, then asked again."""
    import sys
    import types

    import lockbuild.commands.signing as cli_module

    fake_sys = types.SimpleNamespace(**{**vars(sys), "stdin": types.SimpleNamespace(isatty=lambda: True)})
    monkeypatch.setattr(cli_module, "sys", fake_sys)
    monkeypatch.delenv("LOCKBUILD_KEY_PASSWORD", raising=False)
    r = CliRunner().invoke(main, ["keygen", str(tmp_path / "k")], input="\npw one\npw one\n", catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert f"Passphrase for the new key {tmp_path / 'k.key'}" in r.output
    assert "an empty passphrase is not allowed (pass --no-password" in r.output
    assert "encrypted" in (tmp_path / "k.key").read_text().splitlines()[0]


def test_the_trust_dir_comes_from_the_environment_through_the_cli(
    env, keys: Keys, toy_recipe: Path, tmp_path: Path
) -> None:
    """LOCKBUILD_TRUST_DIR is read by the CLI (the library reads no environment); --trust wins over it."""
    bundle = build(toy_recipe, keys.secret, tmp_path / "d")
    assert cli("verify", str(bundle), env={"LOCKBUILD_TRUST_DIR": str(keys.trust)})[0] == 0
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, stderr = cli("verify", str(bundle), "--trust", str(empty), env={"LOCKBUILD_TRUST_DIR": str(keys.trust)})
    assert code == 3 and "holds no *.pub files" in stderr


def test_a_truncated_bundle_is_an_incomplete_copy_for_verify_and_install(
    env, keys: Keys, toy_recipe: Path, tmp_path: Path
) -> None:
    """A short copy says how much arrived and to copy it again (exit 4), not 'the file was altered'."""
    bundle = build(toy_recipe, keys.secret, tmp_path / "d")
    size = bundle.stat().st_size
    with bundle.open("r+b") as f:
        f.truncate(size * 2 // 5)
    for args in (["verify", str(bundle)], ["install", str(bundle), "--root", str(tmp_path / "root")]):
        code, _, stderr = cli(*args, "--trust", str(keys.trust))
        assert code == 4, stderr
        assert f"the file has {size * 2 // 5 / 1e6:.1f} MB of {size / 1e6:.1f} MB: the copy of {bundle.name}" in stderr
        assert "TIP Copy the bundle again" in stderr and "altered" not in stderr


def test_a_rebuild_keeps_or_reports_the_co_signatures(env, keys: Keys, toy_recipe: Path, tmp_path: Path) -> None:
    """Rebuilding into the same --out keeps a co-signer's block when the bundle is byte-identical,
    and says whose signatures were dropped when it is not (never silently)."""
    out = tmp_path / "d"
    bundle = build(toy_recipe, keys.secret, out)
    second = make_keys(tmp_path / "k2", "second")
    second_id = read_public_key(second.public).key_id_hex
    assert cli("sign", str(bundle), "--key", str(second.secret))[0] == 0
    code, stdout, stderr = cli("build", str(toy_recipe), "--key", str(keys.secret), "--out", str(out))
    assert code == 0, stderr
    assert f"kept the signatures of {second_id}: the bundle is byte-identical" in stdout
    assert sig_count(bundle) == 2
    trust = tmp_path / "trust"
    trust.mkdir()
    shutil.copy(keys.public, trust / "release.pub")
    shutil.copy(second.public, trust / "second.pub")
    assert cli("verify", str(bundle), "--trust", str(trust), "--threshold", "2")[0] == 0
    changed = tmp_path / "changed.toml"
    changed.write_text(toy_recipe.read_text() + 'as-of = "2025-01-25T00:00:00Z"\n')
    code, stdout, stderr = cli("build", str(changed), "--key", str(keys.secret), "--out", str(out), "--json")
    assert code == 0, stderr
    assert json.loads(stdout)["bundles"][0]["dropped_signers"] == [second_id]
    assert sig_count(bundle) == 1


def test_keygen_refuses_a_secret_key_that_git_would_track(tmp_path: Path) -> None:
    """A secret key inside a git work tree that does not ignore it is refused unless --force."""
    repo = tmp_path / "repo"
    (repo / "keys").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    code, _, stderr = cli("keygen", str(repo / "keys" / "release"), "--no-password")
    assert code == 1 and "git does not ignore it" in stderr and "TIP" in stderr
    assert not (repo / "keys" / "release.key").exists()
    assert cli("keygen", str(repo / "keys" / "release"), "--no-password", "--force")[0] == 0
    (repo / ".gitignore").write_text("*.key\n")
    assert cli("keygen", str(repo / "keys" / "other"), "--no-password")[0] == 0  # ignored: allowed
    assert cli("keygen", str(tmp_path / "outside"), "--no-password")[0] == 0


def test_warm_build_hashes_in_the_pack_and_refetches_a_damaged_entry(
    env, keys: Keys, toy_recipe: Path, tmp_path: Path
) -> None:
    """A warm build checks cache hits by size only and leaves the digest to the bundle writer, which hashes
    every byte it packs (each byte hashed once). A cache entry damaged in place (same size) is therefore
    caught while packing: removed, fetched again, and the bundle is byte-identical to a clean build."""
    cache = tmp_path / "cache"
    clean = build(toy_recipe, keys.secret, tmp_path / "a", env={"LOCKBUILD_CACHE_DIR": str(cache)})
    entries = sorted((cache / "sha256").rglob("*"), key=lambda p: p.name)
    wheel = next(p for p in entries if p.is_file() and p.stat().st_size > 1000)
    data = bytearray(wheel.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size: only a digest finds it
    wheel.chmod(0o600)
    wheel.write_bytes(bytes(data))
    code, stdout, stderr = cli(
        "build",
        str(toy_recipe),
        "--key",
        str(keys.secret),
        "--out",
        str(tmp_path / "b"),
        "--json",
        env={"LOCKBUILD_CACHE_DIR": str(cache)},
    )
    assert code == 0, stderr
    again = Path(json.loads(stdout)["bundles"][0]["bundle"])
    assert again.read_bytes() == clean.read_bytes()
    assert wheel.read_bytes() != bytes(data)  # the entry was replaced by a good download


@pytest.mark.slow  # over 5 s
def test_cold_build_bytes_do_not_depend_on_arrival_order(env, keys: Keys, toy_recipe: Path, tmp_path: Path) -> None:
    """A cold build packs members in manifest order while the downloads complete: a file that arrives
    last (its server answers 500 twice first) changes nothing in the bundle, at any thread count."""
    hits = {p: f.hits for p, f in env.files.items()}
    first = build(
        toy_recipe, keys.secret, tmp_path / "a", "--threads", "1", env={"LOCKBUILD_CACHE_DIR": str(tmp_path / "c1")}
    )
    # A wheel this build fetches (the session's server also holds other tests' wheels).
    wheels = sorted(p for p in env.files if p.endswith(".whl") and env.files[p].hits > hits.get(p, 0))
    late = wheels[0]
    before = env.files[late].hits
    env.files[late].fail_first = 2
    again = build(
        toy_recipe,
        keys.secret,
        tmp_path / "b",
        "--threads",
        "4",
        "--jobs",
        "4",
        env={"LOCKBUILD_CACHE_DIR": str(tmp_path / "c2")},
    )
    assert env.files[late].hits - before >= 3  # two refusals, then the file
    assert again.read_bytes() == first.read_bytes()


def test_build_never_writes_through_a_link_planted_in_its_output_directory(
    env, keys: Keys, toy_recipe: Path, tmp_path: Path
) -> None:
    """Another user who can write --out (a shared dist directory) plants links at the names a build once
    wrote its temporary bundle and signature to (fixed: a dot, the name, the process id). The bundle and its
    .minisig are made as new files under unguessable names and renamed into place; the links' targets
    are untouched."""
    import os

    out = tmp_path / "dist"
    out.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    name = "toyengine-1.0-cpu-x86_64-manylinux_2_28.lbz"
    for planted in (f".{name}.{os.getpid()}.partial", f".{name}.minisig.{os.getpid()}.partial", f"{name}.minisig"):
        (out / planted).symlink_to(victim)
    bundle = build(toy_recipe, keys.secret, out)
    assert bundle.name == name
    assert victim.read_text() == "precious\n"
    assert not Path(f"{bundle}.minisig").is_symlink()
    code, _, stderr = cli("verify", str(bundle), "--trust", str(keys.trust))
    assert code == 0, stderr


def test_a_build_removes_what_a_killed_build_of_the_same_bundle_left(
    env, keys: Keys, toy_recipe: Path, tmp_path: Path
) -> None:
    """A build killed while writing leaves its hidden temporary bundle in --out (gigabytes for a real
    engine). The next build of that bundle removes such files once they are an hour old (a build still
    writing touches its own every MiB), and nothing else: not a fresh one, not a directory, not another
    bundle's, not a link of that name nor what it points at."""
    import os
    import time

    out = tmp_path / "dist"
    out.mkdir()
    name = "toyengine-1.0-cpu-x86_64-manylinux_2_28.lbz"
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    old, fresh, link, folder, other = (
        out / f".{name}.{'a' * 16}.partial",
        out / f".{name}.{'b' * 16}.partial",
        out / f".{name}.{'c' * 16}.partial",
        out / f".{name}.{'d' * 16}.partial",
        out / f".other.lbz.{'e' * 16}.partial",
    )
    for f in (old, fresh, other):
        f.write_bytes(b"half a bundle")
    link.symlink_to(victim)
    folder.mkdir()
    hours_ago = time.time() - 7200
    for f in (old, other, folder):
        os.utime(f, (hours_ago, hours_ago))
    os.utime(link, (hours_ago, hours_ago), follow_symlinks=False)
    build(toy_recipe, keys.secret, out)
    assert not old.exists()
    assert (
        fresh.exists()
        and link.is_symlink()
        and folder.is_dir()
        and other.exists()
        and victim.read_text() == "precious\n"
    )


def test_a_command_leaves_no_progress_thread_behind(env, keys: Keys, toy_recipe: Path, tmp_path: Path) -> None:
    """The heartbeat thread of a command's progress ends with the command, not with the process (many
    commands run in one process: tests, or a program that calls lockbuild's CLI in-process)."""
    import threading

    bundle = build(toy_recipe, keys.secret, tmp_path / "d")
    before = set(threading.enumerate())  # another test's progress may still be ending: only this command's count
    code, _, stderr = cli("verify", str(bundle), "--members", "--trust", str(keys.trust))  # progress on stderr
    assert code == 0, stderr
    assert "lockbuild:" in stderr  # the progress was on, so its heartbeat thread was started
    assert [t.name for t in set(threading.enumerate()) - before if t.name == "lockbuild-progress"] == []


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_sign_reads_the_key_only_in_the_signing_process(env, keys: Keys, toy_recipe: Path, tmp_path: Path) -> None:
    """`lockbuild sign`, traced: the command's own process never opens the secret key file; the signing
    process (a child) does, and the bundle gets its signature all the same."""
    import os
    import sys

    bundle = build(toy_recipe, keys.secret, tmp_path / "d")
    second = make_keys(tmp_path / "k2", "second")
    log = tmp_path / "trace"
    run_env = {k: v for k, v in os.environ.items() if k != "LOCKBUILD_KEY_PASSWORD"}
    argv = [sys.executable, "-m", "lockbuild", "sign", str(bundle), "--key", str(second.secret)]
    strace = ["strace", "-f", "-qq", "-e", "trace=open,openat,openat2", "-o", str(log)]
    proc = subprocess.run([*strace, *argv], capture_output=True, text=True, env=run_env, check=False)
    assert proc.returncode == 0, proc.stderr
    assert sig_count(bundle) == 2
    lines = log.read_text().splitlines()
    command_pid = lines[0].split()[0]  # the traced command is the first process strace reports
    openers = {line.split()[0] for line in lines if f'"{second.secret}"' in line}
    assert openers, "the key was never opened: the trace sees nothing"
    assert command_pid not in openers, "the command's own process opened the secret key"
