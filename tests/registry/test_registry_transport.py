"""The registry transport against hostile registries: small scripted servers on 127.0.0.1 for
what a real registry never does (drip, flood, nest, send credentials elsewhere, break), and the real
one (Debian's docker-registry) for resuming a pull whose last blob was complete.

Each test fails when the check it is named after is removed from lockbuild/registry/api.py or _fetch.
"""

from __future__ import annotations

import hashlib
import io
import json
import resource
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from conftest import Keys, make_keys
from registrykit import RealRegistry, binary
from sitekit import cli, files_for, make_bundle

import lockbuild.registry.api as oci
from lockbuild.registry.api import (
    OCI_MANIFEST,
    Registry,
    RegistryCredentials,
    RegistryError,
    Transport,
    parse_auth_realm,
    parse_ref,
    realm_refusal,
)
from lockbuild.site.storage import Store

needs_registry = pytest.mark.skipif(binary() is None, reason="docker-registry is not installed (scripts/test does)")
FAST = Transport(request_seconds=2.0, blob_seconds=2.0, min_rate=1e6, io_seconds=30.0)
MANIFEST = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST}).encode()


# -- a scripted registry ------------------------------------------------------------------------------


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Fake

    def log_message(self, *args: object) -> None:
        pass

    def _any(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length and self.server.read_body:
            self.rfile.read(length)
        self.server.seen.append(Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))
        try:
            self.server.script(self)
        except OSError:  # the client hung up (as it should, on a hostile answer)
            self.close_connection = True

    do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = _any

    def answer(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


Script = Callable[[_Handler], None]


class Fake(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, script: Script) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script = script
        self.seen: list[Seen] = []
        self.sent = 0  # body bytes a flooding script got out before the client hung up
        self.read_body = True  # False: the script reads the request body itself
        self.host = f"127.0.0.1:{self.server_address[1]}"
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def ref(self, repo: str = "site/x", tag: str = "1") -> str:
        return f"oci://{self.host}/{repo}:{tag}"


@contextmanager
def fake(script: Script) -> Iterator[Fake]:
    server = Fake(script)
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def registry(server: Fake, **kw: object) -> Registry:
    kw.setdefault("transport", FAST)
    return Registry(parse_ref(server.ref()), **kw)  # type: ignore[arg-type]


def drip(h: _Handler, data: bytes, every: float) -> None:
    for b in data:
        h.wfile.write(bytes([b]))
        h.wfile.flush()
        time.sleep(every)


# -- 1. an overall deadline, with a minimum rate --------------------------------------------------------


@pytest.mark.parametrize("where", ["body", "headers"])
def test_a_registry_that_sends_one_byte_every_2_s_fails_on_time(where: str) -> None:
    def script(h: _Handler) -> None:
        head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(MANIFEST)}\r\n\r\n".encode()
        if where == "headers":
            drip(h, head + MANIFEST, 2.0)
        else:
            h.wfile.write(head)
            drip(h, MANIFEST, 2.0)

    with fake(script) as server, registry(server, transport=Transport(request_seconds=1.0)) as reg:
        t0 = time.monotonic()
        with pytest.raises(RegistryError) as exc:
            reg.get_manifest("1")
        took = time.monotonic() - t0
    assert took < 2.5  # the 1 s deadline, not the 30 s per-read timeout (which never trips here)
    assert server.host in exc.value.message and "did not finish within its 1 s deadline" in exc.value.message
    assert exc.value.tip is not None and "1 MB/s" in exc.value.tip and "run the same command again" in exc.value.tip


def test_the_blob_deadline_grows_with_its_size_at_the_minimum_rate() -> None:
    t = Transport(blob_seconds=60.0, min_rate=1_000_000.0)
    assert t.blob_deadline(0) == 60.0 and t.blob_deadline(10**9) == 1060.0
    assert oci.DEFAULT_TRANSPORT.request_seconds == 60.0 and oci.DEFAULT_TRANSPORT.min_rate == 1e6


def test_a_slow_blob_fails_on_time_and_a_fast_one_of_the_same_size_passes() -> None:
    blob = b"x" * 3000

    def script(h: _Handler) -> None:
        h.wfile.write(f"HTTP/1.1 200 OK\r\nContent-Length: {len(blob)}\r\n\r\n".encode())
        if "slow" in h.path:
            drip(h, blob, 0.01)  # 100 B/s: 30 s for the blob; the deadline is 1 s + 3000 B at 1 MB/s
        else:
            h.wfile.write(blob)

    slow = Transport(blob_seconds=1.0, min_rate=1e6)
    with fake(script) as server, registry(server, transport=slow) as reg:
        with reg.get_blob("sha256:fast", size=len(blob)) as (chunks, _):
            assert b"".join(chunks) == blob
        t0 = time.monotonic()
        with (
            pytest.raises(RegistryError, match="did not finish within its 1 s deadline"),
            reg.get_blob("sha256:slow", size=len(blob)) as (chunks, _),
        ):
            b"".join(chunks)
        assert time.monotonic() - t0 < 2.5


def test_a_blob_read_on_after_its_deadline_has_passed_fails_on_time() -> None:
    """The registry sends fast, but the reader takes the next chunk only after the deadline has passed (a
    slow disk): the next socket read is refused at once as past the deadline, with the same message, not
    started with a negative timeout."""
    blob = b"y" * (4 << 20)

    def script(h: _Handler) -> None:
        h.wfile.write(f"HTTP/1.1 200 OK\r\nContent-Length: {len(blob)}\r\n\r\n".encode())
        try:
            h.wfile.write(blob)
        except OSError:
            return

    quick = Transport(blob_seconds=1.0, min_rate=1e9)
    with (
        fake(script) as server,
        registry(server, transport=quick) as reg,
        pytest.raises(RegistryError, match="did not finish within its 1 s deadline"),
        reg.get_blob("sha256:late", size=len(blob)) as (chunks, _),
    ):
        for n, _ in enumerate(chunks):
            if n == 0:
                time.sleep(1.2)


def test_an_upload_to_a_registry_that_reads_slowly_fails_on_time() -> None:
    def script(h: _Handler) -> None:
        if h.command == "POST":
            h.answer(202, headers={"Location": "/v2/site/x/blobs/uploads/1"})
            return
        left = int(h.headers["Content-Length"])
        while left > 0:  # ~6 MB/s: 32 MiB take 5 s, yet each socket write returns well within its timeout
            left -= len(h.rfile.read(min(64 << 10, left)))
            time.sleep(0.01)
        h.answer(201)

    quick = Transport(request_seconds=5.0, blob_seconds=1.0, min_rate=1e9)
    with fake(script) as server, registry(server, transport=quick) as reg:
        server.read_body = False
        t0 = time.monotonic()
        with pytest.raises(RegistryError, match="did not finish within its 1 s deadline"):
            reg.upload_blob("sha256:" + "0" * 64, io.BytesIO(b"z" * (32 << 20)), 32 << 20)
        assert time.monotonic() - t0 < 2.5


def test_an_upload_asked_for_credentials_is_sent_again_whole() -> None:
    """A blob body is streamed from its file, not held; a PUT answered 401 sends the same bytes again."""
    data = bytes(range(256)) * 5000
    bodies: list[bytes] = []

    def script(h: _Handler) -> None:
        body = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        if h.command == "POST":
            h.answer(202, headers={"Location": "/v2/site/x/blobs/uploads/1"})
        elif "Authorization" not in h.headers:
            h.answer(401, headers={"WWW-Authenticate": 'Basic realm="x"'})
        else:
            bodies.append(body)
            h.answer(201)

    with fake(script) as server, registry(server, credentials=RegistryCredentials("alice", "pw")) as reg:
        server.read_body = False
        src = io.BytesIO(data)
        reg.upload_blob("sha256:" + hashlib.sha256(data).hexdigest(), src, len(data))
    assert bodies == [data]


def test_an_upload_whose_local_copy_ends_early_fails() -> None:
    def script(h: _Handler) -> None:
        if h.command == "POST":
            h.answer(202, headers={"Location": "/v2/site/x/blobs/uploads/1"})
        else:
            h.answer(201)

    with (
        fake(script) as server,
        registry(server) as reg,
        pytest.raises(RegistryError, match="the local copy ended 7 bytes early"),
    ):
        reg.upload_blob("sha256:" + "0" * 64, io.BytesIO(b"abc"), 10)


def test_a_range_answer_that_starts_elsewhere_is_refused() -> None:
    def script(h: _Handler) -> None:
        h.answer(206, b"whole blob", {"Content-Range": "bytes 0-9/10"})

    with (
        fake(script) as server,
        registry(server) as reg,
        pytest.raises(RegistryError, match="asked for bytes 4-"),
        reg.get_blob("sha256:" + "0" * 64, size=10, offset=4),
    ):
        pass


# -- a pull of a real artifact, served by a scripted registry -----------------------------------------


@dataclass
class Served:
    """A pushed artifact, copied out of the real registry: its manifest and every blob it names."""

    manifest: bytes
    blobs: dict[str, bytes] = field(default_factory=dict)


@pytest.fixture(scope="module")
def reg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealRegistry]:
    if binary() is None:
        pytest.skip("docker-registry is not installed")
    r = RealRegistry(tmp_path_factory.mktemp("transport-registry"))
    yield r
    r.close()


@pytest.fixture(scope="module")
def signer(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    return make_keys(tmp_path_factory.mktemp("transport-keys"))


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory, signer: Keys) -> Path:
    return make_bundle(tmp_path_factory.mktemp("transport-bundle"), [signer.secret], version="1.0")


@pytest.fixture(scope="module")
def served(reg: RealRegistry, bundle: Path, signer: Keys) -> Served:
    target = reg.ref("site/served", "1.0-cpu")
    assert cli("push", bundle, target, "--trust", signer.trust).exit_code == 0
    base = f"http://{reg.host}/v2/site/served"
    manifest = httpx.get(f"{base}/manifests/1.0-cpu", headers={"Accept": OCI_MANIFEST}).content
    doc = json.loads(manifest)
    out = Served(manifest)
    for d in [doc["config"]["digest"], *(x["digest"] for x in doc["layers"])]:
        out.blobs[d] = httpx.get(f"{base}/blobs/{d}").content
    return out


def serving(art: Served, *, members: Script | None = None) -> Script:
    config = json.loads(art.manifest)["config"]["digest"]

    def script(h: _Handler) -> None:
        if "/manifests/" in h.path:
            h.answer(200, art.manifest, {"Content-Type": OCI_MANIFEST})
            return
        digest = h.path.rsplit("/", 1)[1]
        if digest != config and members is not None:
            members(h)
        else:
            h.answer(200, art.blobs[digest])

    return script


@needs_registry
def test_a_pull_from_a_dripping_registry_fails_on_time_and_releases_the_stores_lock(
    tmp_path: Path, served: Served, signer: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    def members(h: _Handler) -> None:
        h.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
        drip(h, b"y" * 100, 2.0)

    monkeypatch.setattr(oci, "DEFAULT_TRANSPORT", FAST)
    store = tmp_path / "store"
    with fake(serving(served, members=members)) as server:
        t0 = time.monotonic()
        r = cli("pull", server.ref("site/x", "1.0-cpu"), "--store", store, "--trust", signer.trust)
        took = time.monotonic() - t0
        blob_gets = [s for s in server.seen if "/blobs/" in s.path]
    assert r.exit_code == 1, r.output
    assert server.host in r.output and "did not finish within its 2 s deadline" in r.output and "TIP" in r.output
    # 5 members, 4 at a time: the fifth starts when the first fails and is stopped at once (stop()),
    # so the pull ends after one deadline, not two
    assert took < 3.8, took
    assert len(blob_gets) <= 1 + 4
    with Store(store) as s, s.lock(exclusive=True, wait=0):  # the lock is free again
        pass


@needs_registry
def test_a_damaged_blob_beside_a_slow_one_ends_the_pull_at_once_with_the_damage(
    tmp_path: Path, served: Served, signer: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    layers = [x["digest"] for x in json.loads(served.manifest)["layers"]]

    def members(h: _Handler) -> None:
        digest = h.path.rsplit("/", 1)[1]
        if digest == layers[0]:  # the first member, whose result the pull looks at first, drips
            h.wfile.write(f"HTTP/1.1 200 OK\r\nContent-Length: {len(served.blobs[digest])}\r\n\r\n".encode())
            drip(h, served.blobs[digest], 0.5)
        elif digest == layers[-1]:  # the last is damaged
            h.answer(200, b"X" * len(served.blobs[digest]))
        else:
            h.answer(200, served.blobs[digest])

    monkeypatch.setattr(oci, "DEFAULT_TRANSPORT", Transport(request_seconds=10.0, blob_seconds=10.0))
    with fake(serving(served, members=members)) as server:
        t0 = time.monotonic()
        r = cli("pull", server.ref("site/x", "1.0-cpu"), "--store", tmp_path / "store", "--trust", signer.trust)
        took = time.monotonic() - t0
    assert r.exit_code == 4 and "is damaged" in r.output, r.output  # the damage, not "stopped" (exit 1)
    assert took < 5.0, took  # the dripping download was stopped, not left to its 10 s deadline


# -- 2. bounded answers ----------------------------------------------------------------------------------


def _flood(server_ref: list[Fake], total: int, *, length: bool) -> Script:
    def script(h: _Handler) -> None:
        if h.path.startswith("/token"):
            h.send_response(200)
            if length:
                h.send_header("Content-Length", str(total))
            h.send_header("Connection", "close")
            h.end_headers()
            chunk = b'{"token": "' + b"a" * (1 << 20)
            sent = 0
            while sent < total:
                h.wfile.write(chunk)
                sent += len(chunk)
                server_ref[0].sent = sent
            return
        h.answer(401, headers={"WWW-Authenticate": f'Bearer realm="http://{h.headers["Host"]}/token"'})

    return script


@pytest.mark.parametrize("length", [False, True], ids=["streamed", "content-length"])
def test_a_768_mib_token_answer_is_not_read_whole(length: bool) -> None:
    total = 768 << 20
    holder: list[Fake] = []
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    with fake(_flood(holder, total, length=length)) as server, registry(server) as reg:
        holder.append(server)
        with pytest.raises(
            RegistryError,
            match="over the 1048576 allowed; refused unread" if length else "the answer is over 1048576 bytes; refused",
        ) as exc:
            reg.get_manifest("1")
        time.sleep(0.2)
        sent = server.sent
    grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024  # MiB
    assert server.host in exc.value.message
    assert sent < 32 << 20, sent  # the client hung up after the cap (plus socket buffers)
    assert grew < 64, grew


@pytest.mark.parametrize("which", ["token", "manifest"])
def test_a_deeply_nested_answer_is_a_registry_error_not_a_recursion_error(which: str) -> None:
    nested = b'{"token": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"

    def script(h: _Handler) -> None:
        if h.path.startswith("/token"):
            h.answer(200, nested)
        elif which == "token":
            h.answer(401, headers={"WWW-Authenticate": f'Bearer realm="http://{h.headers["Host"]}/token"'})
        else:
            h.answer(200, b"[" * 200_000)

    with fake(script) as server, registry(server) as reg, pytest.raises(RegistryError, match="nests deeper") as exc:
        reg.get_manifest("1")
    assert server.host in exc.value.message


@needs_registry
def test_a_nested_token_answer_under_json_is_an_error_object_not_a_traceback(tmp_path: Path, signer: Keys) -> None:
    def script(h: _Handler) -> None:
        if h.path.startswith("/token"):
            h.answer(200, b"[" * 100_000)
        else:
            h.answer(401, headers={"WWW-Authenticate": f'Bearer realm="http://{h.headers["Host"]}/token"'})

    with fake(script) as server:
        r = cli("pull", server.ref(), "--store", tmp_path / "s", "--trust", signer.trust, "--json")
    assert r.exit_code == 1
    err = json.loads(r.stdout.strip().splitlines()[-1])["error"]
    assert err["type"] == "RegistryError" and "nests deeper" in err["message"] and server.host in err["message"]
    assert "Traceback" not in r.output


def test_an_error_answer_is_read_only_up_to_its_cap() -> None:
    def script(h: _Handler) -> None:
        h.send_response(500)
        h.send_header("Connection", "close")
        h.end_headers()
        body = json.dumps({"errors": [{"code": "BROKEN", "message": "storage is down"}]}).encode()
        h.wfile.write(body + b" " * (4 << 20))

    with fake(script) as server, registry(server) as reg, pytest.raises(RegistryError) as exc:
        reg.get_manifest("1")
    assert "HTTP 500 BROKEN storage is down" in exc.value.message and len(exc.value.message) < 400


# -- 3. where credentials go -------------------------------------------------------------------------------


def _challenging(realm: Callable[[], str]) -> Script:
    def script(h: _Handler) -> None:
        if h.headers.get("Authorization") == "Bearer tok-123":
            h.answer(200, MANIFEST)
        else:
            h.answer(401, headers={"WWW-Authenticate": f'Bearer realm="{realm()}",service="reg"'})

    return script


def _token_service(h: _Handler) -> None:
    h.answer(200, json.dumps({"token": "tok-123"}).encode())


def test_a_realm_on_another_port_gets_no_credentials_unless_named() -> None:
    with fake(_token_service) as thief, fake(_challenging(lambda: f"http://{thief.host}/token")) as server:
        with (
            registry(server, credentials=RegistryCredentials("alice", "s3cret-pw")) as reg,
            pytest.raises(RegistryError) as exc,
        ):
            reg.get_manifest("1")
        assert thief.seen == []  # not a single request, so no Authorization header
        assert f"is on {thief.host}, not the registry's own {server.host}" in exc.value.message
        assert exc.value.tip is not None and f"--auth-realm {thief.host}" in exc.value.tip
        assert "s3cret-pw" not in exc.value.message + exc.value.tip
        # named with --auth-realm, the same realm is used: the password goes there, the token to the registry
        with registry(server, credentials=RegistryCredentials("alice", "s3cret-pw"), auth_realms=[thief.host]) as reg:
            assert reg.get_manifest("1") == MANIFEST
    assert [s.headers.get("authorization", "").split()[0] for s in thief.seen] == ["Basic"]
    assert server.seen[-1].headers["authorization"] == "Bearer tok-123"


@needs_registry
def test_the_cli_refuses_a_foreign_realm_and_names_auth_realm(tmp_path: Path, signer: Keys) -> None:
    from click.testing import CliRunner

    from lockbuild.cli import main

    with fake(_token_service) as thief, fake(_challenging(lambda: f"http://{thief.host}/token")) as server:
        args = [
            "pull",
            server.ref(),
            "--store",
            str(tmp_path / "s"),
            "--trust",
            str(signer.trust),
            "--username",
            "alice",
            "--password-stdin",
        ]
        r = CliRunner().invoke(main, args, input="s3cret-pw\n")
        assert r.exit_code == 1 and f"--auth-realm {thief.host}" in r.output and "s3cret-pw" not in r.output
        assert thief.seen == []
        r = CliRunner().invoke(main, [*args, "--auth-realm", "not a host!"], input="s3cret-pw\n")
        assert r.exit_code == 1 and "is not a host" in r.output


def test_a_realm_over_a_weaker_scheme_gets_nothing_even_when_named() -> None:
    for named in ((), (parse_auth_realm("registry.site"),)):
        why = realm_refusal("https", "registry.site", "http://registry.site/token", named)
        assert why == "uses http, weaker than the registry's https"


@pytest.mark.parametrize(
    ("scheme", "host", "realm", "named", "ok"),
    [
        ("https", "registry.site", "https://registry.site/token", (), True),
        ("https", "registry.site", "https://registry.site:443/token", (), True),
        ("https", "registry.site:5000", "https://registry.site:5000/token", (), True),
        ("https", "registry.site:5000", "https://registry.site:5001/token", (), False),  # another port
        ("https", "registry.site", "https://auth.site/token", (), False),  # another host
        ("https", "registry.site", "https://auth.site/token", ("auth.site",), True),
        ("https", "registry.site", "https://auth.site:8443/token", ("auth.site:9443",), False),
        ("https", "registry.site", "https://auth.site:8443/token", ("auth.site:8443",), True),
        ("https", "REGISTRY.site", "https://registry.SITE/token", (), True),
        ("http", "127.0.0.1:5000", "http://127.0.0.1:5000/token", (), True),
        ("http", "127.0.0.1:5000", "https://127.0.0.1:5000/token", (), True),  # a stronger scheme
        ("http", "127.0.0.1:5000", "http://127.0.0.1:5001/token", (), False),
        ("http", "127.0.0.1:5000", "http://localhost:5000/token", (), False),  # another name is another host
        ("https", "registry.site", "https://alice:pw@registry.site/token", (), False),
        ("https", "registry.site", "ftp://registry.site/token", (), False),
        ("https", "registry.site", "https://[::1/token", (), False),
    ],
)
def test_where_a_bearer_realm_may_receive_credentials(
    scheme: str, host: str, realm: str, named: tuple[str, ...], ok: bool
) -> None:
    why = realm_refusal(scheme, host, realm, [parse_auth_realm(n) for n in named])
    assert (why is None) == ok, why


def test_basic_credentials_never_follow_a_redirect_to_another_origin() -> None:
    with fake(lambda h: h.answer(200, MANIFEST)) as storage:

        def script(h: _Handler) -> None:
            if "authorization" not in {k.lower() for k in h.headers}:
                h.answer(401, headers={"WWW-Authenticate": 'Basic realm="reg"'})
            else:
                h.answer(307, headers={"Location": f"http://{storage.host}/manifest"})

        with fake(script) as server, registry(server, credentials=RegistryCredentials("alice", "pw")) as reg:
            assert reg.get_manifest("1") == MANIFEST
            assert server.seen[-1].headers["authorization"].startswith("Basic ")
    assert [s.headers.get("authorization") for s in storage.seen] == [None]


# -- 4. a complete partial is adopted ----------------------------------------------------------------------


@needs_registry
def test_a_pull_killed_after_a_blob_was_complete_resumes_without_a_request(
    tmp_path: Path, reg: RealRegistry, bundle: Path, signer: Keys
) -> None:
    target = reg.ref("site/complete", "1.0-cpu")
    assert cli("push", bundle, target, "--trust", signer.trust).exit_code == 0
    store = tmp_path / "store"
    assert cli("pull", target, "--store", store, "--trust", signer.trust).exit_code == 0
    _, data, _ = files_for("1.0")[-1]
    digest = hashlib.sha256(data).hexdigest()
    (store / "blobs" / "sha256" / digest).unlink()
    (store / "tmp" / f"{digest}.partial").write_bytes(data)  # what a pull killed after the last write leaves
    reg.mark()
    r = cli("pull", target, "--store", store, "--trust", signer.trust, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["fetched"] == 1
    assert f"sha256:{digest}" not in reg.blob_gets()  # adopted after its sha256 was checked: no request
    assert all(q.status != 416 for q in reg.requests())
    assert not (store / "tmp" / f"{digest}.partial").exists()
    assert cli("store", "verify", "--store", store).exit_code == 0
    # complete but wrong: deleted and fetched again, from the start, in the same pull
    (store / "blobs" / "sha256" / digest).unlink()
    (store / "tmp" / f"{digest}.partial").write_bytes(b"X" * len(data))
    reg.mark()
    r = cli("pull", target, "--store", store, "--trust", signer.trust)
    assert r.exit_code == 0, r.output
    gets = [q for q in reg.requests() if q.method == "GET" and q.path.endswith(digest)]
    assert [q.status for q in gets] == [200]
    assert (store / "blobs" / "sha256" / digest).read_bytes() == data
    assert cli("store", "verify", "--store", store).exit_code == 0


# -- 5. no third-party exception escapes ------------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _garbage(h: _Handler) -> None:
    h.wfile.write(b"NOT HTTP AT ALL\r\n\r\n")


def _cut_short(h: _Handler) -> None:
    h.wfile.write(f"HTTP/1.1 200 OK\r\nContent-Length: {len(MANIFEST) + 50}\r\n\r\n".encode() + MANIFEST[:5])
    h.wfile.flush()
    h.close_connection = True


def _bad_redirect(h: _Handler) -> None:
    h.answer(307, headers={"Location": "http://[::1/x"})


def _bad_token(h: _Handler) -> None:
    if h.path.startswith("/token"):
        h.answer(200, json.dumps({"token": "a\r\nX-Evil: 1"}).encode())
    else:
        h.answer(401, headers={"WWW-Authenticate": f'Bearer realm="http://{h.headers["Host"]}/token"'})


def _not_json(h: _Handler) -> None:
    h.answer(200, b"\xff\xfe not json")


@pytest.mark.parametrize(
    ("script", "says"),
    [
        (_garbage, "RemoteProtocolError"),
        (_cut_short, "RemoteProtocolError"),
        (_bad_redirect, "Invalid URL in location header"),
        (_bad_token, "without a usable token"),
        (_not_json, "the manifest is not valid JSON"),
    ],
)
def test_a_broken_answer_is_a_registry_error_with_the_host_and_a_tip(script: Script, says: str) -> None:
    with fake(script) as server, registry(server) as reg, pytest.raises(RegistryError) as exc:
        reg.get_manifest("1")
    assert server.host in exc.value.message and says in exc.value.message and exc.value.tip


def test_an_unreachable_registry_is_a_registry_error() -> None:
    host = f"127.0.0.1:{_closed_port()}"
    with Registry(parse_ref(f"oci://{host}/site/x:1"), transport=FAST) as reg, pytest.raises(RegistryError) as exc:
        reg.has_blob("sha256:" + "0" * 64)
    assert host in exc.value.message and "ConnectError" in exc.value.message and exc.value.tip


def test_a_stopped_registry_refuses_at_once_and_says_why() -> None:
    with fake(lambda h: h.answer(200, MANIFEST)) as server, registry(server) as reg:
        first = RegistryError("the download of wheels/x.whl failed: it was damaged.")
        assert reg.stop(first) is first and reg.stop(RegistryError("a later one")) is first
        with pytest.raises(RegistryError, match=r"stopped, because the download of wheels/x\.whl failed"):
            reg.get_manifest("1")
    assert server.seen == []
