"""Red-team findings on the landed trust path, node and builder (12, 18): one test per hole,
each failing when its defence is removed. docs/threat-model.md, section "Second review", names them."""

from __future__ import annotations

import datetime as dt
import os
import shutil
from pathlib import Path

import pytest
from conftest import Keys
from hostile import AS_OF, bundle_tar, compress, good_members, manifest
from test_trust import Signer, sign, signer, trust_dir, verify

from lockbuild.errors import IntegrityError, ResolveError
from lockbuild.trust import InMemorySigner, sign_bundle

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
    sign_bundle(bundle, InMemorySigner(people["bob"].key), now=NOW)
    got = verify(bundle, tmp_path / "trust")
    assert got.manifest_bytes == _reworded_bundle(tmp_path / "again")[1]
    assert got.extract().manifest == got.manifest
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
    """Defence in depth: the builder strips userinfo before it records a URL; a
    manifest whose origin still carries one (or a control character, or is no http(s) URL) was not made
    by this lockbuild and is refused by the parser, so `inspect` never shows it and pack never writes it."""
    from dataclasses import replace

    from lockbuild.bundle.manifestparse import parse_manifest

    members = good_members()
    members[-1] = replace(members[-1], origin=origin)
    with pytest.raises(IntegrityError, match="origin"):
        parse_manifest(manifest(members).to_toml())
    members[-1] = replace(members[-1], origin="https://files.example.com/p@1/a%40b.whl")  # '@' in the path is fine
    assert parse_manifest(manifest(members).to_toml()).members[-1].origin.endswith("a%40b.whl")


# --- exclude-newer-package recorded in the manifest and the lock, shown by inspect -------


def test_exclude_newer_package_is_in_the_manifest_the_lock_and_inspect(
    env: object, keys: Keys, toy_recipe: Path, tmp_path: Path
) -> None:
    import json

    from click.testing import CliRunner

    from lockbuild.cli import main
    from lockbuild.trust.sign import read_unverified

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
    assert read_unverified(bundle, dest=out).exclude_newer_package == want
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
    from lockbuild.bundle.manifestparse import parse_manifest

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
    from lockbuild.trust import load_trust_store

    which, change = TRUST_ATTACKS[attack]
    if change in ("owner", "link", "hard link") and os.geteuid() != 0:
        pytest.skip("changing a file's owner needs root")
    trust = trust_dir(tmp_path, people["alice"], policy="threshold = 1\n", revoked="")
    assert load_trust_store(trust).policy.threshold == 1
    target = {
        "dir": trust,
        "pub": trust / people["alice"].pub.name,
        "policy": trust / "policy.toml",
        "revoked": trust / "revoked.txt",
    }[which]
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
        load_trust_store(named)


def test_a_trust_directory_owned_by_root_or_this_user_and_read_only_to_others_is_accepted(
    tmp_path: Path, people: dict[str, Signer]
) -> None:
    from lockbuild.trust import load_trust_store

    trust = trust_dir(tmp_path, people["alice"], people["bob"], policy="threshold = 2\n")
    trust.chmod(0o755)
    link = tmp_path / "keys-link"
    link.symlink_to(trust)  # a link the administrator made to a directory they own is followed
    assert load_trust_store(link).policy.threshold == 2


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
    from lockbuild.wire.urls import InsecureTransportError, check_transport, is_secure

    assert not is_secure(url)
    with pytest.raises(InsecureTransportError):
        check_transport(url, what="LOCKBUILD_INDEX_URL", allow_insecure=False)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/simple",
        "http://127.5.6.7/x",
        "http://[::1]:9/x",
        "http://localhost/x",
        "http://LOCALHOST:80/x",
        "https://evil.localhost/x",
    ],
)
def test_plain_http_to_this_machine_is_allowed(url: str) -> None:
    from lockbuild.wire.urls import is_secure

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


# --- --root below a directory another user can write --------------------------------------------


@pytest.mark.parametrize(
    "attack", ["parent-world-writable", "grandparent-group-writable", "parent-foreign", "link-into-world-writable"]
)
def test_a_root_below_a_directory_another_user_can_write_is_refused(tmp_path: Path, attack: str) -> None:
    """--root itself passed the ownership rule, but a directory above it that another user can write lets
    that user rename --root away and put their own tree (or a link) in its place between the installer's
    checks and its writes: every check made by name is then judged on the wrong tree. Refused before
    anything is created; a sticky directory (like /tmp) is fine, since no one may rename another's entry."""
    from lockbuild.errors import InstallError
    from lockbuild.install.places import prepare

    base = tmp_path / "site"
    (base / "shared").mkdir(parents=True)
    base.chmod(0o755)
    (base / "shared").chmod(0o755)
    root = base / "shared" / "engines"
    if attack == "parent-world-writable":
        (base / "shared").chmod(0o777)
    elif attack == "grandparent-group-writable":
        base.chmod(0o775)
    elif attack == "parent-foreign":
        if os.geteuid() != 0:
            pytest.skip("changing a file's owner needs root")
        os.chown(base / "shared", OTHER_UID, OTHER_UID)
    else:
        (base / "open").mkdir()
        (base / "open").chmod(0o777)
        (base / "shared").rmdir()
        (base / "shared").symlink_to(base / "open")
    with pytest.raises(InstallError, match=r"refused --root .* the directory .* above it"):
        prepare(root, "toyengine")
    assert not os.path.lexists(root)  # refused before anything was made there
    (base / "sticky").mkdir()
    (base / "sticky").chmod(0o1777)
    base.chmod(0o755)
    assert prepare(base / "sticky" / "engines", "toyengine").is_dir()


def test_a_root_below_a_link_to_a_safe_directory_is_judged_by_the_link_s_target_and_accepted(tmp_path: Path) -> None:
    """A link above --root (``/srv/engines -> /data/engines``) has mode 0777 of its own, yet no one can
    write through it: it is judged by what it points to, so a link in a safe directory to a safe directory
    is fine, and the root is made through it."""
    from lockbuild.install.places import prepare

    base = tmp_path / "site"
    (base / "data").mkdir(parents=True)
    base.chmod(0o755)
    (base / "data").chmod(0o755)
    (base / "srv").symlink_to(base / "data")
    made = prepare(base / "srv" / "engines", "toyengine")
    assert made.is_dir()
    assert (base / "data" / "engines").is_dir()


# --- the index's credentials, as uv holds them, stay on the index's origin -------------------------


def _wheel() -> bytes:
    import io
    import zipfile

    b = io.BytesIO()
    with zipfile.ZipFile(b, "w") as z:
        z.writestr("lkpkg/__init__.py", "")
        z.writestr("lkpkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: lkpkg\nVersion: 1.0\n")
        z.writestr(
            "lkpkg-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        z.writestr("lkpkg-1.0.dist-info/RECORD", "")
    return b.getvalue()


def test_uv_never_hands_the_index_password_to_another_port_or_scheme_of_its_host(tmp_path: Path) -> None:
    """A plain-http link on the index's host (another port here, as port 80 would be) that answers 401:
    uv answers a netrc host's challenge on any port or scheme, so a network attacker on that http link
    would get the password. lockbuild gives uv the credentials in the index URL (kept to its origin) and
    no ~/.netrc at all, so the other port never sees them."""
    import base64
    import hashlib
    import http.server
    import json
    import threading

    from lockbuild.resolution.resolve import compile_lock
    from lockbuild.settings import IndexCredentials
    from lockbuild.target import Target

    wheel = _wheel()
    seen: list[tuple[int, str, str | None]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            port = self.server.server_address[1]
            seen.append((port, self.path, self.headers.get("Authorization")))
            if not self.headers.get("Authorization"):
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="files"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if self.path.startswith("/simple/lkpkg"):
                body = json.dumps(
                    {
                        "meta": {"api-version": "1.0"},
                        "name": "lkpkg",
                        "files": [
                            {
                                "filename": "lkpkg-1.0-py3-none-any.whl",
                                "hashes": {"sha256": hashlib.sha256(wheel).hexdigest()},
                                "upload-time": "2024-01-01T00:00:00Z",
                                "url": f"http://127.0.0.1:{other.server_address[1]}/f/lkpkg-1.0-py3-none-any.whl",
                            }
                        ],
                    }
                ).encode()
                kind = "application/vnd.pypi.simple.v1+json"
            else:
                body, kind = wheel, "application/octet-stream"
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_HEAD = do_GET  # uv asks HEAD first (range requests for the wheel's metadata)

    index = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    for server in (index, other):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    home = tmp_path / "home"
    home.mkdir()
    (home / ".netrc").write_text("machine 127.0.0.1 login netrcuser password FROM-HOME-NETRC\n")
    (home / ".netrc").chmod(0o600)
    (tmp_path / "w").mkdir()
    try:
        with pytest.raises(ResolveError) as refused:  # the file host refuses without credentials: uv gives up
            compile_lock(
                ["lkpkg==1.0"],
                Target.of("3.11", "x86_64-manylinux_2_28"),
                AS_OF,
                index_url=f"http://127.0.0.1:{index.server_address[1]}/simple",
                workdir=tmp_path / "w",
                cache_dir=tmp_path / "uv-cache",
                inherit={"PATH": os.environ["PATH"], "HOME": str(home)},
                credentials=IndexCredentials("lbuser", "IDX-PASSWORD"),
            )
    finally:
        for server in (index, other):
            server.shutdown()
            server.server_close()
    basic = "Basic " + base64.b64encode(b"lbuser:IDX-PASSWORD").decode()
    assert any(port == index.server_address[1] and auth == basic for port, _, auth in seen)  # the index got them
    to_other = [auth for port, _, auth in seen if port == other.server_address[1]]
    assert to_other and all(auth is None for auth in to_other), (seen, refused.value.message)


# --- the reader reopens the bundle by name: only as a regular, bounded file ------------------------


@pytest.mark.parametrize("kind", ["link", "fifo", "too-large"])
def test_the_bundle_reader_opens_only_a_regular_bounded_file(tmp_path: Path, kind: str) -> None:
    """The opener hashes the bundle from a checked descriptor, but the reader (manifest, members) opens it
    again by name: a bundle swapped for a link or a FIFO in between is refused at once (a FIFO would hang
    the install), whatever the member digests would later say."""
    from hostile import good_bundle

    from lockbuild.bundle.read import read_head
    from lockbuild.limits import Limits
    from lockbuild.trust.sign import read_unverified

    real = tmp_path / "real.lbz"
    real.write_bytes(good_bundle())
    path, limits = tmp_path / "b.lbz", Limits()
    if kind == "link":
        path.symlink_to(real)
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path, limits = real, Limits(max_bundle=100)
    for read in (lambda: read_unverified(path, limits=limits), lambda: read_head(path, limits)):
        with pytest.raises(IntegrityError, match=r"symbolic link|FIFO|expected at most 100"):
            read()


def test_sign_never_writes_a_signature_file_every_reader_refuses(tmp_path: Path) -> None:
    """A .minisig already holding 64 blocks (the readers' limit): a 65th would make the bundle refused on
    every node. `sign` refuses and leaves the file as it was."""
    from test_trust import make_bundle

    from lockbuild.errors import SignatureError
    from lockbuild.minisign import generate_secret_key
    from lockbuild.trust import Statement, digest_signed_file, sign_statement, signature_path

    bundle, m = make_bundle(tmp_path / "dist")
    d = digest_signed_file(bundle)
    st = Statement.of(m, name=bundle.name, sha256=d.sha256, size=d.size, expires=None, frames_sha256=d.frames_sha256)
    blocks = "".join(sign_statement(generate_secret_key(), st, d.blake2b) for _ in range(64))
    signature_path(bundle).write_text(blocks)
    with pytest.raises(SignatureError, match="would hold 65 signature blocks"):
        sign_bundle(bundle, InMemorySigner(generate_secret_key()), now=NOW)
    assert signature_path(bundle).read_text() == blocks


@pytest.mark.parametrize("kind", ["fifo", "deep-json"])
def test_a_planted_marker_never_hangs_or_crashes_list(tmp_path: Path, kind: str) -> None:
    """`list` and `doctor` read every environment's marker: one that is a FIFO (no writer) hung the open,
    and JSON nested a million deep raised RecursionError (a traceback). Either is just "not installed"."""
    import signal

    from lockbuild.install.marker import MARKER, read_marker

    env = tmp_path / "toyengine" / "1.0-cpu"
    env.mkdir(parents=True)
    if kind == "fifo":
        os.mkfifo(env / MARKER)
    else:
        (env / MARKER).write_text("[" * 500_000 + "]" * 500_000)

    def timeout(*_: object) -> None:
        raise TimeoutError("read_marker hung on a planted marker")

    old = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(10)
    try:
        assert read_marker(env) is None
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_deeply_nested_answers_and_policies_are_lockbuild_errors(tmp_path: Path) -> None:
    """JSON from any server (not only index pages: the release API too) and a policy.toml nested far
    too deep raised RecursionError, a raw traceback; each is now lockbuild's own error."""
    import httpx

    from lockbuild.errors import RemoteError, SignatureError
    from lockbuild.fetch.http import get_json, make_client
    from lockbuild.trust.truststore import parse_policy

    deep = b"[" * 200_000 + b"]" * 200_000
    client = make_client()
    # streamed as a server's answer is (a body given as bytes would count as read already, and the client
    # reads bodies as received, iter_raw)
    client._transport = httpx.MockTransport(lambda _req: httpx.Response(200, content=iter([deep])))
    with pytest.raises(RemoteError, match="nested too deeply"):
        get_json(client, "https://api.github.example/repos/o/r/releases/tags/v1", what="asking the release API")
    with pytest.raises(SignatureError, match="nested too deeply"):
        parse_policy("threshold = " + "[" * 100_000 + "]" * 100_000 + "\n")


def test_a_statement_with_a_field_twice_never_counts(tmp_path: Path, people: dict[str, Signer]) -> None:
    """`sha256=OTHER ... sha256=THIS`: a reader that keeps the last value and one that keeps the first
    would disagree about what was signed. A trusted key's block carrying any field twice is not a
    statement at all: it does not count (and does not veto the others)."""
    from test_trust import make_bundle

    from lockbuild.errors import SignatureError
    from lockbuild.minisign import sign_prehashed
    from lockbuild.trust import Statement, digest_signed_file, signature_path

    bundle, m = make_bundle(tmp_path / "dist")
    d = digest_signed_file(bundle)
    comment = Statement.of(
        m, name=bundle.name, sha256=d.sha256, size=d.size, expires=None, frames_sha256=d.frames_sha256
    ).to_comment()
    twice = comment.replace(f" sha256={d.sha256}", f" sha256={'0' * 64} sha256={d.sha256}")
    assert twice != comment
    block = sign_prehashed(people["alice"].key, d.blake2b, twice, untrusted_comment="x")
    signature_path(bundle).write_text(block)
    with pytest.raises(SignatureError, match="duplicated trusted comment field 'sha256'"):
        verify(bundle, trust_dir(tmp_path, people["alice"], people["bob"]))
    good = sign_prehashed(people["bob"].key, d.blake2b, comment, untrusted_comment="y")
    signature_path(bundle).write_text(block + good)
    assert [k.key_id for k in verify(bundle, tmp_path / "trust").signers] == [people["bob"].key.key_id]
