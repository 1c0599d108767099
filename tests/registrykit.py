"""A real OCI registry for the tests: CNCF distribution (Debian's ``docker-registry``) on 127.0.0.1.

``RealRegistry`` writes a config.yml (random free port, filesystem storage in a temporary directory,
access log on), starts the binary, waits until ``/v2/`` answers, and reads its access log so a test
can prove which requests were (and were not) made. ``upstream=URL`` makes it a pull-through mirror of
another registry (``proxy: remoteurl:``, distribution's pull-through cache).
"""

from __future__ import annotations

import re
import shutil
import socket
import ssl
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

BINARY = "docker-registry"
CONFIG = """\
version: 0.1
log:
  level: info
  formatter: text
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: {root}
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: 127.0.0.1:{port}
{tls}{auth}{proxy}"""
TLS = """\
  tls:
    certificate: {cert}
    key: {key}
"""
AUTH = """\
auth:
  htpasswd:
    realm: lockbuild-test
    path: {path}
"""
# alice / s3cret-pw (bcrypt, cost 4): for the credential tests
HTPASSWD = "alice:$2a$04$fHxvhFjJRP6gFcT/kcq4WO.PIrFe30orvM7yiR140HOTJ9eYHteJC\n"
# A pull-through cache (distribution's proxy mode): every pull is served from the upstream and kept.
PROXY = """\
proxy:
  remoteurl: {upstream}
"""
_ACCESS = re.compile(r'"(GET|HEAD|PUT|POST|PATCH|DELETE) (\S+) HTTP/[\d.]+" (\d{3})')


def binary() -> str | None:
    return shutil.which(BINARY)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    status: int


class RealRegistry:
    def __init__(
        self, base: Path, *, htpasswd: bool = False, tls: tuple[Path, Path] | None = None, upstream: str | None = None
    ) -> None:
        exe = binary()
        assert exe is not None
        self.storage = base / "data"
        self.storage.mkdir(parents=True)
        self.port = _free_port()
        config = base / "config.yml"
        auth = ""
        if htpasswd:
            (base / "htpasswd").write_text(HTPASSWD)
            auth = AUTH.format(path=base / "htpasswd")
        tls_text = TLS.format(cert=tls[0], key=tls[1]) if tls else ""
        proxy = PROXY.format(upstream=upstream) if upstream else ""
        config.write_text(CONFIG.format(root=self.storage, port=self.port, auth=auth, tls=tls_text, proxy=proxy))
        scheme = "https" if tls else "http"
        verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=str(tls[0])) if tls else True
        self.log_path = base / "registry.log"
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen([exe, "serve", str(config)], stdout=self._log, stderr=subprocess.STDOUT)
        self.host = f"127.0.0.1:{self.port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(f"{scheme}://{self.host}/v2/", timeout=1, verify=verify).status_code in (200, 401):
                    break
            except httpx.HTTPError:
                pass
            except BaseException:
                self.close()
                raise
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"docker-registry did not start: {self.log_path.read_text()[-2000:]}")
            time.sleep(0.1)
        self.mark()

    def ref(self, repo: str, tag: str) -> str:
        return f"oci://{self.host}/{repo}:{tag}"

    def _lines(self) -> list[str]:
        self._log.flush()
        return self.log_path.read_text(errors="replace").splitlines()

    def mark(self) -> None:
        """Forget the requests so far: ``requests()`` returns only those after this call."""
        time.sleep(0.2)  # the access log is written after the response
        self._seen = len(self._lines())

    def requests(self) -> list[Request]:
        time.sleep(0.2)
        out = []
        for line in self._lines()[self._seen :]:
            m = _ACCESS.search(line)
            if m:
                out.append(Request(m.group(1), m.group(2), int(m.group(3))))
        return out

    def blob_gets(self) -> list[str]:
        """The digests of blobs fetched (GET) since the mark."""
        return [r.path.rsplit("/", 1)[1] for r in self.requests() if r.method == "GET" and "/blobs/" in r.path]

    def blob_data(self, digest: str) -> Path:
        hex_ = digest.removeprefix("sha256:")
        return self.storage / "docker" / "registry" / "v2" / "blobs" / "sha256" / hex_[:2] / hex_ / "data"

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


def self_signed(base: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 (its own CA) and its key, as PEM files."""
    import datetime as dt
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "lockbuild test registry")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    base.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = base / "cert.pem", base / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path
