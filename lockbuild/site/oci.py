"""A small client for the OCI distribution spec (v1.1): blobs and manifests, with token or basic auth.

- References are ``oci://HOST[:PORT]/REPO:TAG``. https always, except plain http for a loopback host
  (127.0.0.1, ::1, localhost) or with ``plain_http`` (as ORAS's --plain-http), which says so loudly.
- Credentials (``--username`` / ``--password-stdin``) are sent only as the registry asks
  (``WWW-Authenticate``: Basic, or Bearer from its token realm), never in a URL, never printed, never
  stored; a reference with user:password@ in it is refused without echoing it.
- Every answer is bounded: manifests and small blobs by size caps, blobs by the size the caller knows.
- Transport failures become ``RegistryError`` with the registry, the request and what to do.
"""

from __future__ import annotations

import base64
import ipaddress
import re
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlencode, urljoin, urlsplit

import httpx

from lockbuild.errors import LockbuildError

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MAX_OCI_MANIFEST = 64 << 20
_REPO = re.compile(r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
_HOST = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:\d{1,5})?")
_LOOPBACK_NAMES = ("localhost",)
CHUNK_UPLOAD = 64 << 20  # blobs larger than this are uploaded in chunks (PATCH), smaller in one PUT


class RegistryError(LockbuildError):
    """The registry refused a request, answered something unusable, or could not be reached."""


@dataclass(frozen=True)
class OciRef:
    host: str  # host[:port] as written
    repo: str
    tag: str

    def __str__(self) -> str:
        return f"oci://{self.host}/{self.repo}:{self.tag}"

    @property
    def loopback(self) -> bool:
        name = self.host.rsplit(":", 1)[0] if not self.host.startswith("[") else self.host[1:].split("]")[0]
        if name in _LOOPBACK_NAMES:
            return True
        try:
            return ipaddress.ip_address(name).is_loopback
        except ValueError:
            return False


def parse_ref(text: str) -> OciRef:
    """``oci://HOST[:PORT]/REPO:TAG``; the repository and tag as the distribution spec allows them."""
    usage = "expected oci://HOST[:PORT]/REPO:TAG, e.g. oci://registry.site:5000/engines/vllm:0.11.0-cu128"
    if not text.startswith("oci://"):
        raise RegistryError(f"{text[:80]!r} is not a registry reference; {usage}.")
    rest = text[len("oci://") :]
    host, slash, path = rest.partition("/")
    if "@" in host:
        raise RegistryError(
            "refused a registry reference with credentials in it (user:password@host).",
            tip="Pass --username and --password-stdin instead; credentials never go in a reference.",
        )
    repo, colon, tag = path.rpartition(":")
    if not slash or not colon or "/" in tag or not _HOST.fullmatch(host):
        raise RegistryError(f"{text[:200]!r} is not a registry reference; {usage}.")
    if not _REPO.fullmatch(repo) or len(repo) > 255:
        raise RegistryError(f"the repository {repo[:120]!r} is not valid: lower-case words separated by / . _ -.")
    if not _TAG.fullmatch(tag):
        raise RegistryError(f"the tag {tag[:140]!r} is not valid: up to 128 of A-Z a-z 0-9 _ . - (not first . -).")
    return OciRef(host, repo, tag)


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str

    def __repr__(self) -> str:  # never shown, not even in a traceback
        return "Credentials(<hidden>)"

    def basic(self) -> str:
        return "Basic " + base64.b64encode(f"{self.username}:{self.password}".encode()).decode()


def _parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    scheme, _, params = header.strip().partition(" ")
    return scheme.lower(), dict(re.findall(r'(\w+)="([^"]*)"', params))


class Registry:
    """One repository on one registry, over one HTTP connection pool."""

    def __init__(
        self,
        ref: OciRef,
        *,
        plain_http: bool = False,
        ca_file: Path | None = None,
        credentials: Credentials | None = None,
        timeout: float = 60.0,
    ) -> None:
        self.ref = ref
        self.plain_http = plain_http
        self.scheme = "http" if (plain_http or (ref.loopback and ca_file is None)) else "https"
        verify: ssl.SSLContext | bool = True
        if ca_file is not None:
            try:
                verify = ssl.create_default_context(cafile=str(ca_file))
            except (OSError, ssl.SSLError) as exc:
                raise RegistryError(f"cannot use the CA file {ca_file}: {exc}.") from None
        self.base = f"{self.scheme}://{ref.host}/v2/{ref.repo}"
        self._credentials = credentials
        self._auth: str | None = None  # the Authorization header value once the registry asked for one
        self.client = httpx.Client(verify=verify, timeout=timeout, follow_redirects=False,
                                   headers={"User-Agent": "lockbuild"})  # fmt: skip

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transport ----------------------------------------------------------------------------
    def _fail(self, what: str, detail: str, tip: str | None = None) -> RegistryError:
        tip = tip or "Check the registry address, that it is up, and your access to the repository."
        return RegistryError(f"{what} at {self.ref.host}: {detail}", tip=tip)

    def _check_scheme(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme == "https":
            return
        host = parts.hostname or ""
        local = OciRef(host, "x", "x").loopback
        if parts.scheme != "http" or not (self.plain_http or local):
            raise self._fail("refused", f"the registry sent us to {parts.scheme}://{host}, which is not https.",
                             tip="Use --plain-http only for a registry you reach over a trusted network.")  # fmt: skip

    def _send(self, method: str, url: str, *, what: str, headers: dict[str, str] | None = None,
              content: bytes | Iterator[bytes] | None = None, stream: bool = False,
              retry_auth: bool = True, redirects: int = 5) -> httpx.Response:  # fmt: skip
        self._check_scheme(url)
        h = dict(headers or {})
        same_host = urlsplit(url).netloc == self.ref.host
        if self._auth is not None and same_host:
            h["Authorization"] = self._auth
        try:
            request = self.client.build_request(method, url, headers=h, content=content)
            response = self.client.send(request, stream=stream)
        except httpx.HTTPError as exc:
            raise self._fail(what, f"{type(exc).__name__}: {exc}.") from None
        if response.status_code == 401 and retry_auth and same_host:
            response.close()
            self._authenticate(response.headers.get("WWW-Authenticate", ""), what)
            if isinstance(content, Iterator):
                raise self._fail(what, "the registry asked for credentials in the middle of an upload; retry.")
            return self._send(method, url, what=what, headers=headers, content=content, stream=stream,
                              retry_auth=False, redirects=redirects)  # fmt: skip
        if response.status_code in (301, 302, 303, 307, 308) and redirects:
            location = response.headers.get("Location", "")
            response.close()
            # A redirect (to blob storage) gets no credentials: _send adds them for the registry's host only.
            return self._send(method if response.status_code != 303 else "GET", urljoin(url, location), what=what,
                              headers=headers, content=content, stream=stream, retry_auth=False,
                              redirects=redirects - 1)  # fmt: skip
        return response

    def _authenticate(self, challenge: str, what: str) -> None:
        scheme, params = _parse_challenge(challenge)
        creds = self._credentials
        if scheme == "basic":
            if creds is None:
                tip = "Pass --username NAME and the password on stdin with --password-stdin."
                raise self._fail(what, "the registry needs credentials.", tip=tip)
            self._auth = creds.basic()
            return
        if scheme != "bearer" or "realm" not in params:
            raise self._fail(what, "the registry refused the request (401) without a usable challenge.")
        realm = params["realm"]
        query = {k: v for k, v in params.items() if k in ("service", "scope")}
        query.setdefault("scope", f"repository:{self.ref.repo}:pull,push")
        self._check_scheme(realm)
        auth = httpx.BasicAuth(creds.username, creds.password) if creds is not None else None
        try:
            r = self.client.get(f"{realm}?{urlencode(query)}", auth=auth)
        except httpx.HTTPError as exc:
            raise self._fail(what, f"the token service did not answer ({type(exc).__name__}).") from None
        if r.status_code != 200:
            tip = "Check --username and the password given on stdin, and your access to the repository."
            raise self._fail(what, f"the token service refused ({r.status_code}).", tip=tip)
        try:
            data = r.json()
            token = data.get("token") or data.get("access_token")
        except (ValueError, AttributeError):
            token = None
        if not isinstance(token, str) or not token:
            raise self._fail(what, "the token service answered without a token.")
        self._auth = f"Bearer {token}"

    def _expect(self, r: httpx.Response, ok: tuple[int, ...], what: str) -> None:
        if r.status_code not in ok:
            body = r.read()[:300].decode("utf-8", "replace") if not r.is_closed else ""
            r.close()
            raise self._fail(what, f"HTTP {r.status_code} {body.strip()}")

    # -- manifests ----------------------------------------------------------------------------
    def get_manifest(self, reference: str) -> bytes:
        what = f"fetching the manifest {self.ref.repo}:{reference}"
        r = self._send("GET", f"{self.base}/manifests/{reference}", what=what, headers={"Accept": OCI_MANIFEST},
                       stream=True)  # fmt: skip
        try:
            if r.status_code == 404:
                raise self._fail(what, "no such tag (404).", tip="`lockbuild push` it first, or check the tag.")
            self._expect(r, (200,), what)
            return _read_capped(r, MAX_OCI_MANIFEST, what)
        finally:
            r.close()

    def put_manifest(self, reference: str, data: bytes) -> None:
        what = f"pushing the manifest {self.ref.repo}:{reference}"
        r = self._send("PUT", f"{self.base}/manifests/{reference}", what=what,
                       headers={"Content-Type": OCI_MANIFEST}, content=data)  # fmt: skip
        self._expect(r, (200, 201), what)

    # -- blobs --------------------------------------------------------------------------------
    def has_blob(self, digest: str) -> bool:
        what = f"checking the blob {digest}"
        r = self._send("HEAD", f"{self.base}/blobs/{digest}", what=what)
        if r.status_code == 404:
            return False
        self._expect(r, (200,), what)
        return True

    @contextmanager
    def get_blob(self, digest: str, *, offset: int = 0) -> Iterator[tuple[httpx.Response, int]]:
        """The blob's response (streamed) and the offset it starts at (0 if the registry ignored Range)."""
        what = f"fetching the blob {digest}"
        headers = {"Range": f"bytes={offset}-"} if offset else {}
        r = self._send("GET", f"{self.base}/blobs/{digest}", what=what, headers=headers, stream=True)
        try:
            if r.status_code == 404:
                tip = "Push the build to the registry again; it uploads only what is missing."
                raise self._fail(what, "the registry does not have it (404).", tip=tip)
            self._expect(r, (200, 206), what)
            yield r, (offset if r.status_code == 206 else 0)
        finally:
            r.close()

    def get_small_blob(self, digest: str, limit: int) -> bytes:
        with self.get_blob(digest) as (r, _):
            return _read_capped(r, limit, f"fetching the blob {digest}")

    def upload_blob(self, digest: str, src: BinaryIO, size: int) -> None:
        """Upload ``size`` bytes from ``src`` as ``digest``: one PUT, or PATCH chunks for large blobs.
        The registry checks the digest when it completes the upload."""
        what = f"uploading the blob {digest}"
        r = self._send("POST", f"{self.base}/blobs/uploads/", what=what, content=b"")
        self._expect(r, (202,), what)
        location = urljoin(f"{self.base}/", r.headers.get("Location", ""))
        if size > CHUNK_UPLOAD:
            done = 0
            while done < size:
                chunk = src.read(min(CHUNK_UPLOAD, size - done))
                if not chunk:
                    raise self._fail(what, "the source ended early.")
                r = self._send("PATCH", location, what=what, content=chunk,
                               headers={"Content-Type": "application/octet-stream",
                                        "Content-Range": f"{done}-{done + len(chunk) - 1}"})  # fmt: skip
                self._expect(r, (202,), what)
                location = urljoin(location, r.headers.get("Location", location))
                done += len(chunk)
            body: bytes | Iterator[bytes] = b""
        else:
            body = src.read(size)
        sep = "&" if "?" in location else "?"
        r = self._send("PUT", f"{location}{sep}{urlencode({'digest': digest})}", what=what, content=body,
                       headers={"Content-Type": "application/octet-stream"})  # fmt: skip
        self._expect(r, (201,), what)


def _read_capped(r: httpx.Response, limit: int, what: str) -> bytes:
    out = bytearray()
    for chunk in r.iter_bytes():
        out += chunk
        if len(out) > limit:
            raise RegistryError(f"{what}: the answer is over {limit} bytes; refused.")
    return bytes(out)
