"""Red-team findings on the landed trust path, node and builder (issues 11, 12, 18): one test per hole,
each failing when its defence is removed. docs/threat-model.md, section "Red team (H8)", names them."""

from __future__ import annotations

import datetime as dt
import os
import shutil
from pathlib import Path

import pytest
from conftest import Keys
from hostile import AS_OF, bundle_tar, compress, good_members, manifest
from test_trust import Signer, sign, signer, trust_dir, verify

from lockbuild.errors import IntegrityError
from lockbuild.trust import sign_bundle

NOW = AS_OF + dt.timedelta(days=3)


@pytest.fixture(scope="module")
def people(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Signer]:
    base = tmp_path_factory.mktemp("keys")
    return {name: signer(base, name) for name in ("alice", "bob")}


# --- the signed manifest digest covers the bytes the bundle carries ------------------------------


def _reworded_bundle(directory: Path) -> tuple[Path, bytes]:
    """A bundle whose bundle.toml says the same things as the builder's but in other bytes (a comment)."""
    m = manifest(good_members())
    raw = m.to_toml() + b"# the same manifest, other bytes\n"
    directory.mkdir(parents=True, exist_ok=True)
    bundle = directory / m.bundle_name
    bundle.write_bytes(compress(bundle_tar(listed=raw)))
    return bundle, raw


def test_the_manifest_digest_is_of_the_carried_bytes_not_a_reserialisation(
    tmp_path: Path, people: dict[str, Signer]
) -> None:
    """A statement signing sha256(to_toml()) of a manifest the bundle carries in other bytes is refused:
    the file mode checks the same bytes a store, a delta or a registry pull checks (one manifest, one
    digest). A co-signer's `sign` signs the carried bytes, so its signature verifies everywhere."""
    bundle, _ = _reworded_bundle(tmp_path / "dist")
    sign(bundle, manifest(good_members()), people["alice"])  # digest of the re-serialised manifest
    with pytest.raises(IntegrityError, match="manifest has sha256"):
        verify(bundle, trust_dir(tmp_path, people["alice"], people["bob"]))
    bundle.with_name(bundle.name + ".minisig").unlink()
    sign_bundle(bundle, people["bob"].key, now=NOW)
    got = verify(bundle, tmp_path / "trust")
    assert got.manifest_bytes == _reworded_bundle(tmp_path / "again")[1]
    assert got.extract() == got.manifest
    shutil.rmtree(tmp_path / "again")


# --- a manifest never carries credentials ------------------------------------------------------


@pytest.mark.parametrize(
    "origin",
    [
        "https://user:token@files.example.com/a.whl",
        "https://token@files.example.com/a.whl",
        "https://u%40x:p%3Ap@files.example.com/a.whl",  # percent-encoded userinfo
        "https://files.example.com\\@evil.example/a.whl",  # a backslash authority (WHATWG reads it as a path)
        "https://:@files.example.com/a.whl",
        "https://files.example.com/a.whl\n",
        "https://files.example.com/\u202ea.whl",  # a bidi override
        "ftp://files.example.com/a.whl",
        "/local/path/a.whl",
        "https://" + "a" * 5000 + ".example/a.whl",
    ],
)
def test_a_manifest_origin_with_credentials_or_controls_is_refused(origin: str) -> None:
    """Defence in depth for issue 11 item 4: the builder strips userinfo before it records a URL; a
    manifest whose origin still carries one (or a control character, or is no http(s) URL) was not made
    by this lockbuild and is refused by the parser, so `inspect` never shows it and pack never writes it."""
    from dataclasses import replace

    from lockbuild.bundle.manifest import parse_manifest

    members = good_members()
    members[-1] = replace(members[-1], origin=origin)
    with pytest.raises(IntegrityError, match="origin"):
        parse_manifest(manifest(members).to_toml())
    members[-1] = replace(members[-1], origin="https://files.example.com/p@1/a%40b.whl")  # '@' in the path is fine
    assert parse_manifest(manifest(members).to_toml()).members[-1].origin.endswith("a%40b.whl")


# --- issue 17: exclude-newer-package recorded in the manifest and the lock, shown by inspect -------


def test_exclude_newer_package_is_in_the_manifest_the_lock_and_inspect(
    env: object, keys: Keys, toy_recipe: Path, tmp_path: Path
) -> None:
    import json

    from click.testing import CliRunner

    from lockbuild.bundle.read import read_bundle
    from lockbuild.cli import main

    toy_recipe.write_text(
        toy_recipe.read_text() + 'exclude-newer-package = { Wheel = "2024-06-01T00:00:00Z", toyengine = false }\n'
    )
    r = CliRunner().invoke(
        main, ["build", str(toy_recipe), "--key", str(keys.secret), "--out", str(tmp_path / "d"), "--json"]
    )
    assert r.exit_code == 0, r.stderr
    bundle = Path(json.loads(r.stdout)["bundles"][0]["bundle"])
    want = (("toyengine", None), ("wheel", "2024-06-01T00:00:00Z"))
    out = tmp_path / "out"
    assert read_bundle(bundle, dest=out).exclude_newer_package == want
    lock = (out / "lock" / "requirements.txt").read_text()
    assert "# exclude-newer-package: wheel = 2024-06-01T00:00:00Z" in lock
    assert "# exclude-newer-package: toyengine = false" in lock
    r = CliRunner().invoke(main, ["inspect", str(bundle), "--json"])
    assert json.loads(r.stdout)["exclude_newer_package"] == {"toyengine": False, "wheel": "2024-06-01T00:00:00Z"}
    r = CliRunner().invoke(main, ["inspect", str(bundle)])
    assert "exclude-newer-package: wheel = 2024-06-01T00:00:00Z" in r.stdout


@pytest.mark.parametrize(
    "table",
    [
        "{ Wheel = false }",  # not normalised
        "{ wheel = true }",
        '{ wheel = "2024-06-01T00:00:00+00:00" }',  # not as the builder writes it
        "{ wheel = 2024-06-01T00:00:00Z }",  # a TOML datetime, not a string
        '{ wheel = "2024-06-01T00:00:00Z\\u001b[2J" }',
        "{ zz = false, aa = false }",  # out of order
        '"wheel"',
    ],
)
def test_a_manifest_exclude_newer_package_is_parsed_strictly(table: str) -> None:
    from lockbuild.bundle.manifest import parse_manifest

    text = (
        manifest(good_members())
        .to_toml()
        .replace(b"\n\n[target]", f"\nexclude-newer-package = {table}\n\n[target]".encode(), 1)
    )
    with pytest.raises(IntegrityError, match="exclude-newer-package"):
        parse_manifest(text)


# --- the trust directory belongs to this user or root alone ---------------------------------------

OTHER_UID = 54321


# attack: (which file, what changes: "o+w", "g+w", "owner" (needs root), "link" or "hard link" (needs root))
TRUST_ATTACKS = {
    "dir-world-writable": ("dir", "o+w"),
    "dir-group-writable": ("dir", "g+w"),
    "pub-group-writable": ("pub", "g+w"),
    "policy-world-writable": ("policy", "o+w"),
    "revoked-world-writable": ("revoked", "o+w"),
    "dir-foreign": ("dir", "owner"),
    "pub-foreign": ("pub", "owner"),
    "policy-foreign": ("policy", "owner"),
    "link-to-foreign-dir": ("dir", "link"),
    "pub-hard-link-to-foreign-file": ("pub", "hard link"),
}


@pytest.mark.parametrize("attack", list(TRUST_ATTACKS))
def test_a_trust_directory_another_user_could_write_is_refused(
    tmp_path: Path, people: dict[str, Signer], attack: str
) -> None:
    """A trust directory (or a .pub, revoked.txt or policy.toml in it) that another local user owns or can
    write lets that user add their key, drop a revocation or lower the threshold, and so have root install
    anything. Checked on the opened directory's descriptor (so a link to it is judged by what it points
    to) and on each opened file: refused, fail closed."""
    from lockbuild.errors import SignatureError
    from lockbuild.trust import load_store

    which, change = TRUST_ATTACKS[attack]
    if change in ("owner", "link", "hard link") and os.geteuid() != 0:
        pytest.skip("changing a file's owner needs root")
    trust = trust_dir(tmp_path, people["alice"], policy="threshold = 1\n", revoked="")
    assert load_store(trust).policy.threshold == 1
    target = {"dir": trust, "pub": trust / people["alice"].pub.name, "policy": trust / "policy.toml",
              "revoked": trust / "revoked.txt"}[which]  # fmt: skip
    named = trust
    if change == "owner":
        os.chown(target, OTHER_UID, OTHER_UID)
    elif change == "link":
        os.chown(trust, OTHER_UID, OTHER_UID)
        named = tmp_path / "keys-link"
        named.symlink_to(trust)
    elif change == "hard link":
        planted = tmp_path / "planted.pub"
        shutil.copyfile(people["bob"].pub, planted)
        os.chown(planted, OTHER_UID, OTHER_UID)
        os.link(planted, trust / "bob.pub")
    else:
        target.chmod(target.stat().st_mode | (0o002 if change == "o+w" else 0o020))
    with pytest.raises(SignatureError, match=r"refused .* (owned by uid 54321|writable by its group or by others)"):
        load_store(named)


def test_a_trust_directory_owned_by_root_or_this_user_and_read_only_to_others_is_accepted(
    tmp_path: Path, people: dict[str, Signer]
) -> None:
    from lockbuild.trust import load_store

    trust = trust_dir(tmp_path, people["alice"], people["bob"], policy="threshold = 2\n")
    trust.chmod(0o755)
    link = tmp_path / "keys-link"
    link.symlink_to(trust)  # a link the administrator made to a directory they own is followed
    assert load_store(link).policy.threshold == 2


# --- plain http: only this machine, named in a way no resolver sends to DNS ---------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://evil.localhost/simple",  # RFC 6761 says loopback, but glibc without systemd-resolved asks DNS
        "http://localhost./simple",  # a fully qualified name: DNS, not /etc/hosts
        "http://localhost.evil.com/simple",
        "http://127.0.0.1.nip.io/simple",
        "http://127.1/simple",  # not an address Python's ipaddress reads: treated as a name
        "http://0.0.0.0/simple",
        "http://[::ffff:8.8.8.8]/simple",
        "ftp://127.0.0.1/simple",
    ],
)
def test_plain_http_is_refused_to_every_look_alike_of_this_machine(url: str) -> None:
    from lockbuild.urls import InsecureTransportError, check_transport, is_secure

    assert not is_secure(url)
    with pytest.raises(InsecureTransportError):
        check_transport(url, what="LOCKBUILD_INDEX_URL", allow_insecure=False)


@pytest.mark.parametrize("url", ["http://127.0.0.1:8080/simple", "http://127.5.6.7/x", "http://[::1]:9/x",
                                 "http://localhost/x", "http://LOCALHOST:80/x", "https://evil.localhost/x"])  # fmt: skip
def test_plain_http_to_this_machine_is_allowed(url: str) -> None:
    from lockbuild.urls import is_secure

    assert is_secure(url)


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("https://user:p@ss@index.example/simple", "ss"),  # an unencoded @ in the password: userinfo ends at the last @
        ("https://user:p@s@s@index.example/simple", "s@s"),
        ("ERROR cannot reach https://tok:x@@h.io/a?b=c@d", "x@"),
        ("git+https://u:pw@github.com/o/r", "pw"),
    ],
)
def test_every_credential_in_a_printed_url_is_masked(text: str, secret: str) -> None:
    from lockbuild.text import for_terminal, mask_data

    for shown in (for_terminal(text), mask_data({"error": text})["error"]):
        authority = shown.split("://", 1)[1].split("/", 1)[0]
        assert authority.startswith("***@") and secret not in authority, shown
