"""Locking a build-on-node sdist whose metadata is dynamic: its build backend never has the network.

The backend's hooks run only in the sandbox with no network (``sdist/metahook.py``), from the sdist
lockbuild checked and its hashed build dependencies; uv, which needs the network, is given the result as
static metadata (``dependency-metadata`` in a ``uv.toml``) and runs no backend. The sandboxed compile
gets the user's CA settings, so a private CA (or a TLS-inspecting proxy's) given by ``SSL_CERT_FILE`` works.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import ipaddress
import json
import re
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import PLATFORM, PY, build_on_node_recipe, day, publish_toy
from sdistkit import BACKEND, backend_wheel
from servers import FakeServer, make_tar_gz

from lockbuild.cli import main
from lockbuild.errors import ResolveError
from lockbuild.lock import LockedFile
from lockbuild.resolution.resolve import compile_lock
from lockbuild.sdist.locking import resolve_with_sdists
from lockbuild.sdist.metadata import SdistMetadata, parse_metadata, static_metadata, uv_config
from lockbuild.target import Target

# A backend whose hooks try to reach the network (each port given, on 127.0.0.1) and look for a secret
# in every environment and every file they can read outside the system's; the metadata hook fails the
# lock, saying what it reached, if anything was. Its METADATA names the dependencies in REQUIRES.
PROBE = """
import json as _json, os as _os, socket as _socket


def _search(canary):
    c = canary.encode()
    for k, v in _os.environ.items():
        if canary in v:
            return "environ " + k
    for p in _os.listdir("/proc"):
        if p.isdigit():
            try:
                with open("/proc/%s/environ" % p, "rb") as f:
                    if c in f.read():
                        return "/proc/%s/environ" % p
            except OSError:
                pass
    for top in ("/tmp", "/build", "/lock", _os.path.expanduser("~"), _os.getcwd()):
        for root, dirs, files in _os.walk(top):
            for n in files:
                path = _os.path.join(root, n)
                try:
                    if _os.path.getsize(path) < (1 << 20):
                        with open(path, "rb") as f:
                            if c in f.read():
                                return path
                except OSError:
                    pass
    return ""


def _probe(hook):
    with open("PROBE.json") as f:
        a = _json.load(f)
    reached = []
    for port in a.get("ports", []):
        try:
            s = _socket.create_connection(("127.0.0.1", port), timeout=3)
            s.sendall(("backend " + hook + " connected").encode())
            s.close()
            reached.append("127.0.0.1:%d" % port)
        except OSError:
            pass
    if a.get("canary_hex"):  # the secret looked for, not itself in the sdist
        where = _search(bytes.fromhex(a["canary_hex"]).decode())
        if where:
            reached.append("the credential in " + where)
    return reached


def get_requires_for_build_wheel(config_settings=None):
    reached = _probe("get_requires_for_build_wheel")
    if reached:
        raise SystemExit("BACKEND REACHED " + ", ".join(reached))
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    reached = _probe("prepare_metadata_for_build_wheel")
    if reached:
        raise SystemExit("BACKEND REACHED " + ", ".join(reached))
    name, version = _meta()
    info = name.replace("-", "_") + "-" + version + ".dist-info"
    _os.makedirs(_os.path.join(metadata_directory, info))
    requires = open("REQUIRES").read().split() if _os.path.exists("REQUIRES") else []
    with open(_os.path.join(metadata_directory, info, "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\\nName: %s\\nVersion: %s\\n" % (name, version))
        for r in requires:
            f.write("Requires-Dist: %s\\n" % r)
    return info
"""


def dynamic_sdist(
    name: str, probe: dict[str, object], requires: str = "toydep", backend: str = PROBE
) -> tuple[str, bytes]:
    """``name`` 1.0 as an sdist with dynamic metadata (PKG-INFO 2.1) and its own backend (backend-path)."""
    pyproject = b'[build-system]\nrequires = []\nbuild-backend = "probe"\nbackend-path = ["."]\n'
    return f"{name}-1.0.tar.gz", make_tar_gz(
        {
            f"{name}-1.0/PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
            f"{name}-1.0/pyproject.toml": pyproject,
            f"{name}-1.0/probe.py": BACKEND.encode() + backend.encode(),
            f"{name}-1.0/PROBE.json": json.dumps(probe).encode(),
            f"{name}-1.0/REQUIRES": requires.encode(),
            f"{name}-1.0/{name}/__init__.py": b"def main():\n    pass\n",
        }
    )


class Listener:
    """A TCP server on 127.0.0.1 that records every connection it is given."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port: int = self.sock.getsockname()[1]
        self.seen: list[bytes] = []
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    self.seen.append(conn.recv(200) or b"(connected)")
                except OSError:
                    self.seen.append(b"(connected)")

    def close(self) -> None:
        self._stop = True
        self._thread.join(timeout=5)
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    got = Listener()
    yield got
    got.close()


def cli(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def lock(tmp_path: Path, name: str) -> tuple[int, str, str, Path]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    recipe = tmp_path / f"{name}.toml"
    recipe.write_text(build_on_node_recipe(name))
    out = tmp_path / "locks"
    code, stdout, stderr = cli("lock", str(recipe), "--out", str(out))
    return code, stdout, stderr, out


def locked_text(out: Path) -> str:
    return "".join(p.read_text() for p in sorted(out.rglob("requirements.txt")))


def test_a_dynamic_sdist_locks_and_its_backend_reaches_no_network_and_no_credential(
    env: FakeServer, listener: Listener, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The backend's hooks try to connect to a server on the builder's 127.0.0.1 and look for the index's
    password everywhere they can read: the lock succeeds with the dependencies the backend named, the
    server saw nothing, and the password was nowhere in the backend's reach (its hook would have failed
    the lock, naming where). Before, the hooks ran under uv with the host's network and the netrc."""
    secret = "canary-index-password-4711"
    host = env.url.removeprefix("http://")
    monkeypatch.setenv("LOCKBUILD_INDEX_URL", f"http://lbuser:{secret}@{host}/primary/simple")
    monkeypatch.setattr(env, "require_auth", "Basic " + base64.b64encode(f"lbuser:{secret}".encode()).decode())
    if not env.projects.get(("primary", "lkprobe")):
        env.publish(
            *dynamic_sdist("lkprobe", {"ports": [listener.port], "canary_hex": secret.encode().hex()}), uploaded=day(1)
        )
    code, _, stderr, out = lock(tmp_path, "lkprobe")
    assert code == 0, stderr
    assert listener.seen == []
    text = locked_text(out)
    assert "lkprobe==1.0" in text and "toydep==1.0" in text  # the backend's Requires-Dist reached uv
    assert secret not in text + stderr


def test_a_dynamic_sdist_with_build_dependencies_from_the_index(env: FakeServer, tmp_path: Path) -> None:
    """Its backend (toybackend, from the index, no metadata hook: PEP 517's build_wheel fallback) is locked at
    the cut-off and installed offline by hash into the sandbox's throw-away environment."""
    if not env.projects.get(("primary", "lkdynbe")):
        files = {
            "lkdynbe-1.0/PKG-INFO": b"Metadata-Version: 2.1\nName: lkdynbe\nVersion: 1.0\n",
            "lkdynbe-1.0/pyproject.toml": b'[build-system]\nrequires = ["toybackend"]\nbuild-backend = "toybackend"\n',
            "lkdynbe-1.0/lkdynbe/__init__.py": b"def main():\n    pass\n",
        }
        env.publish("lkdynbe-1.0.tar.gz", make_tar_gz(files), uploaded=day(1))
        if not env.projects.get(("primary", "toybackend")):
            env.publish(*backend_wheel("1.0"), uploaded=day(1))
    code, _, stderr, out = lock(tmp_path, "lkdynbe")
    assert code == 0, stderr
    assert "lkdynbe==1.0" in locked_text(out)


def test_uv_is_given_the_metadata_and_runs_no_backend(env: FakeServer, listener: Listener, tmp_path: Path) -> None:
    """compile_lock with a dynamic sdist: uv takes the metadata given (its Requires-Dist is in the lock) or,
    for a version not read, the stand-in "no dependencies"; the backend, which would connect to the
    listener from uv's networked sandbox, never runs."""
    name, data = dynamic_sdist("lkuvmeta", {"ports": [listener.port]})
    if not env.projects.get(("primary", "lkuvmeta")):
        env.publish(name, data, uploaded=day(1))
    sha = hashlib.sha256(data).hexdigest()
    target = Target.of(PY, PLATFORM)
    texts = []
    for n, given in enumerate(((SdistMetadata("lkuvmeta", "1.0", ("toydep",), None, (), sha),), ())):
        work = tmp_path / f"w{n}"
        work.mkdir()
        got = compile_lock(
            ["lkuvmeta==1.0"],
            target,
            day(10),
            index_url=env.index_url(),
            workdir=work,
            cache_dir=tmp_path / f"uv-cache{n}",
            inherit={"PATH": "/usr/local/bin:/usr/bin:/bin"},
            sdists_allowed=["lkuvmeta"],
            sdist_metadata=given,
        )
        texts.append(got.text)
    assert listener.seen == []
    assert f"lkuvmeta==1.0 \\\n    --hash=sha256:{sha}" in texts[0] and "toydep==1.0" in texts[0]
    assert "lkuvmeta==1.0" in texts[1] and "toydep" not in texts[1]


def test_metadata_that_cannot_be_produced_refuses_the_lock_naming_the_package(
    env: FakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = (
        "\ndef prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):\n"
        "    raise SystemExit('this backend needs a compiler it cannot find')\n"
    )
    if not env.projects.get(("primary", "lkbroken")):
        env.publish(*dynamic_sdist("lkbroken", {}, backend=broken), uploaded=day(1))
    code, _, stderr, out = lock(tmp_path, "lkbroken")
    assert code == ResolveError.exit_code
    assert "ERROR cannot lock lkbroken 1.0: its sdist's dependency metadata is dynamic" in stderr
    assert "this backend needs a compiler it cannot find" in stderr and "TIP " in stderr
    assert locked_text(out) == ""

    from lockbuild.sdist import metahook

    monkeypatch.setattr(metahook, "find_host_python", lambda _version, _inherit: None)
    code, _, stderr, _ = lock(tmp_path / "nopy", "lkbroken")
    assert code == ResolveError.exit_code
    assert "cannot lock lkbroken 1.0" in stderr and f"this builder has no Python {PY}" in stderr


# TLS with a private CA -----------------------------------------------------------------------------------
def make_ca_and_server_cert(base: Path) -> tuple[Path, Path, Path]:
    """A throw-away CA and a certificate for 127.0.0.1 that it signs: (ca.pem, cert.pem, key.pem)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "lockbuild test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = base / "ca.pem", base / "cert.pem", base / "key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


@pytest.fixture(scope="module")
def tls_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FakeServer, Path]]:
    """The toy index, served over TLS on 127.0.0.1 with a certificate of a private CA, and the dynamic sdist."""
    base = tmp_path_factory.mktemp("tls")
    ca, cert, key = make_ca_and_server_cert(base)
    server = FakeServer()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    server.httpd.socket = ctx.wrap_socket(server.httpd.socket, server_side=True)
    publish_toy(server)
    server.publish(*dynamic_sdist("lktls", {}), uploaded=day(1))
    yield server, ca
    server.close()


def test_a_dynamic_sdist_locks_against_an_https_index_with_a_private_ca(
    tls_index: tuple[FakeServer, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SSL_CERT_FILE names the CA: lockbuild's own requests and uv's, in the sandbox, trust it. Without it,
    the lock fails saying "certificate", and the tip says to set SSL_CERT_FILE."""
    server, ca = tls_index
    monkeypatch.setenv("LOCKBUILD_INDEX_URL", server.index_url().replace("http://", "https://"))
    monkeypatch.delenv("UV_NATIVE_TLS", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    code, _, stderr, _ = lock(tmp_path / "untrusted", "lktls")
    assert code != 0 and "certificate" in stderr.lower()
    assert "TIP " in stderr and "set SSL_CERT_FILE" in stderr.split("TIP ", 1)[1]
    assert "Check the network" not in stderr

    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    code, _, stderr, out = lock(tmp_path / "trusted", "lktls")
    assert code == 0, stderr
    text = locked_text(out)
    assert "lktls==1.0" in text and "toydep==1.0" in text


def test_uv_in_the_sandbox_without_the_ca_says_certificate(tls_index: tuple[FakeServer, Path], tmp_path: Path) -> None:
    """The compile itself (uv in the sandbox): a TLS failure is named as such, with the SSL_CERT_FILE tip."""
    server, ca = tls_index
    url = server.index_url().replace("http://", "https://")
    meta = (SdistMetadata("lktls", "1.0", ("toydep",)),)
    with pytest.raises(ResolveError) as exc:
        compile_lock(
            ["lktls==1.0"],
            Target.of(PY, PLATFORM),
            day(10),
            index_url=url,
            workdir=tmp_path,
            cache_dir=tmp_path / "uv-cache",
            inherit={"PATH": "/usr/bin:/bin"},
            sdists_allowed=["lktls"],
            sdist_metadata=meta,
        )
    assert "certificate" in exc.value.message and exc.value.tip is not None and "SSL_CERT_FILE" in exc.value.tip
    work = tmp_path / "trusted"
    work.mkdir()
    got = compile_lock(
        ["lktls==1.0"],
        Target.of(PY, PLATFORM),
        day(10),
        index_url=url,
        workdir=work,
        cache_dir=tmp_path / "uv-cache2",
        inherit={"PATH": "/usr/bin:/bin", "SSL_CERT_FILE": str(ca)},
        sdists_allowed=["lktls"],
        sdist_metadata=meta,
    )
    assert "toydep==1.0" in got.text


# the pure parts ------------------------------------------------------------------------------------------
def test_static_metadata_is_pkg_info_2_2_without_dynamic_dependency_fields() -> None:
    base = b"Name: a\nVersion: 1.0\nRequires-Dist: b>=1\nRequires-Python: >=3.9\nProvides-Extra: Fast\n"
    got = static_metadata(b"Metadata-Version: 2.2\n" + base, "a", "1.0", "x" * 64)
    assert got == SdistMetadata("a", "1.0", ("b>=1",), ">=3.9", ("fast",), "x" * 64)
    assert static_metadata(b"Metadata-Version: 2.1\n" + base, "a", "1.0", "") is None
    assert static_metadata(b"Metadata-Version: 2.2\nDynamic: Requires-Dist\n" + base, "a", "1.0", "") is None
    assert static_metadata(b"Metadata-Version: 2.4\nDynamic: Summary\n" + base, "a", "1.0", "") is not None


@pytest.mark.parametrize(
    ("field", "why"),
    [
        (b"Requires-Dist: evil @ https://example.com/evil.whl\n", "requires a URL"),
        (b"Requires-Dist: not a requirement!!\n", "invalid Requires-Dist"),
        (b"Requires-Dist: b; python_version > '\xc3\xa9'\n", "not short printable ASCII"),
        (b"Requires-Python: >=3.9 or so\n", "invalid Requires-Python"),
        (b"Provides-Extra: a]b\n", "invalid Provides-Extra"),
    ],
)
def test_metadata_uv_could_not_take_as_given_is_refused(field: bytes, why: str) -> None:
    raw = b"Metadata-Version: 2.1\nName: a\nVersion: 1.0\n" + field
    with pytest.raises(ResolveError, match=why):
        parse_metadata(raw, "a", "1.0", "", what="its METADATA")


def test_metadata_of_another_package_is_refused() -> None:
    with pytest.raises(ResolveError, match=re.escape("names 'b' '1.0'")):
        parse_metadata(b"Metadata-Version: 2.1\nName: b\nVersion: 1.0\n", "a", "1.0", "", what="its METADATA")
    with pytest.raises(ResolveError, match=re.escape("names 'a' '2.0'")):
        parse_metadata(b"Metadata-Version: 2.1\nName: a\nVersion: 2.0\n", "a", "1.0", "", what="its METADATA")


def test_the_uv_config_states_every_version() -> None:
    import tomllib

    text = uv_config([SdistMetadata("a", "1.0", ('b; extra == "x"',), ">=3.9", ("x",))], ["A", "c"])
    entries = tomllib.loads(text)["dependency-metadata"]
    assert entries == [
        {
            "name": "a",
            "version": "1.0",
            "requires-dist": ['b; extra == "x"'],
            "requires-python": ">=3.9",
            "provides-extras": ["x"],
        },
        {"name": "a", "requires-dist": []},
        {"name": "c", "requires-dist": []},
    ]


def _file(name: str, version: str, sha: str = "s") -> LockedFile:
    return LockedFile(name, version, f"{name}-{version}.tar.gz", "u", sha, 1, "primary")


def test_the_resolution_is_repeated_until_each_sdist_was_resolved_with_its_own_metadata() -> None:
    """The first round (stand-ins only) picks a 2.0, whose metadata then pins b, so a 1.0 is chosen: read
    too; the third round locks a 1.0 with the metadata it was given."""
    rounds: list[tuple[SdistMetadata, ...]] = []

    def resolve(known: tuple[SdistMetadata, ...]) -> tuple[str, tuple[LockedFile, ...]]:
        rounds.append(known)
        return "r", (_file("a", "2.0") if not known else _file("a", "1.0"),)

    read: list[str] = []

    def meta(f: LockedFile) -> SdistMetadata:
        read.append(f.version)
        return SdistMetadata(f.name, f.version, sha256=f.sha256)

    got = resolve_with_sdists(resolve, meta)
    assert got == ("r", (_file("a", "1.0"),)) and read == ["2.0", "1.0"] and len(rounds) == 3

    with pytest.raises(ResolveError, match="its metadata was read from another file"):
        resolve_with_sdists(lambda known: ("r", (_file("a", "1.0", "other" if known else "s"),)), meta)


def test_only_the_compile_that_runs_no_backend_keeps_the_network_in_the_sandbox() -> None:
    """Every sandbox.Spec in lockbuild is made without network, except the one of sdist/uvsandbox.py's
    compile, which is given every sdist's metadata and runs no backend: a new networked sandbox (for a
    build backend, an engine, a recipe's command) fails here."""
    import ast

    import lockbuild

    package = Path(lockbuild.__file__).parent
    networked = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            for kw in node.keywords:
                if (
                    name == "Spec"
                    and kw.arg == "network"
                    and not (isinstance(kw.value, ast.Constant) and kw.value.value is False)
                ):
                    networked.append(str(path.relative_to(package)))
    assert networked == ["sdist/uvsandbox.py"]
