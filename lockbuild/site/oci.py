"""A small client for the OCI distribution spec (v1.1): blobs and manifests, with token or basic auth.

- References are ``oci://HOST[:PORT]/REPO:TAG``. https always, except plain http for a loopback host
  (127.0.0.1, ::1, localhost) or with ``plain_http`` (as ORAS's --plain-http), which says so loudly.
- Credentials (``--username`` / ``--password-stdin``) are sent only as the registry asks
  (``WWW-Authenticate``: Basic, or Bearer from its token realm), never in a URL, never printed, never
  stored; a reference with user:password@ in it is refused without echoing it.
- **Where credentials go.** Basic credentials, and the Bearer token, go to the registry's own origin
  only (same scheme, host and port; never to a redirect's target). The password goes to a Bearer
  token realm only when the realm is on the registry's own host and port over the same or a stronger
  scheme (an https registry: https only; an http loopback registry: http or https), or on a host the
  user named with ``auth_realms`` (``--auth-realm HOST[:PORT]``; a weaker scheme is refused even
  then). Any other realm gets no request at all, and the error says so, with the ``--auth-realm`` tip.
- **Time bounds** (``Transport``, named settings; the tests shorten them). Every exchange has an
  overall deadline, enforced at every socket read, write and connect (so a registry that sends one
  byte every 2 s fails on time, where a per-read timeout never trips):

  - a small request (a manifest, a token, a HEAD, an upload's start): ``request_seconds`` = 60 s;
  - a blob (down or up) of ``n`` bytes: ``blob_seconds`` + ``n`` / ``min_rate`` = 60 s + n / (1 MB/s);
  - no single read, write or connect waits more than ``io_seconds`` = 30 s.

  When one blob of a pull fails, ``stop`` makes every other transfer of that command fail at its next
  read, so the error (and the store's lock) is not held up by the transfers still running.
- **Size bounds.** Every answer is read as a stream with a cap, and a ``Content-Length`` over the cap
  is refused unread: a manifest ``max_manifest`` (64 MiB), a token answer ``max_token`` (1 MiB), an
  error body ``max_error`` (16 KiB, truncated for the message), a blob the size the caller knows. JSON
  answers are parsed with :func:`lockbuild.fsio.loads_json` (size and nesting depth checked first).
  Bodies are read raw (``Accept-Encoding: identity``), so nothing is decompressed past a cap.
- **Memory stays flat.** A blob goes up as a stream of ``CHUNK`` (1 MiB) pieces read from its file
  (``_Body``, with its ``Content-Length``), never as one bytes object: httpx keeps a streamed request in
  a reference cycle until the garbage collector runs, so a bytes body of each PATCH chunk would stay
  resident (a 900 MB blob held ~900 MB).
- No third-party exception leaves this module: transport failures (httpx, ssl, socket) become
  ``RegistryError`` with the registry, the request and what to do.
"""

from __future__ import annotations

import base64
import ipaddress
import re
import ssl
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlencode, urljoin, urlsplit

import httpcore
import httpx

from lockbuild.errors import LockbuildError
from lockbuild.fsio import CHUNK, loads_json

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MAX_OCI_MANIFEST = 64 << 20
_REPO = re.compile(r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
_HOST = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:\d{1,5})?")
_TOKEN = re.compile(r"[\x21-\x7e]+")  # a token goes into a header: printable ASCII, no spaces
_LOOPBACK_NAMES = ("localhost",)
_RANK = {"http": 0, "https": 1}
_WRITE_SLICE = 64 << 10  # writes are cut to this size, so the deadline is checked between slices
CHUNK_UPLOAD = 64 << 20  # blobs larger than this are uploaded in chunks (PATCH), smaller in one PUT
# What the transport may raise (httpx wraps socket and ssl errors; the rest is belt and braces).
TRANSPORT_ERRORS = (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError, httpcore.TimeoutException,
                    httpcore.NetworkError, httpcore.ProtocolError, ssl.SSLError, OSError, ValueError)


class RegistryError(LockbuildError):
    """The registry refused a request, answered something unusable, or could not be reached."""

    default_tip = "Check the registry's address, that it is reachable from here, and its credentials."


@dataclass(frozen=True)
class Transport:
    """The time and size bounds of every exchange with a registry (see the module docstring)."""

    request_seconds: float = 60.0  # a small request, whole: connect, send, headers and body
    blob_seconds: float = 60.0  # a blob's fixed allowance ...
    min_rate: float = 1_000_000.0  # ... plus its size at this many bytes per second
    io_seconds: float = 30.0  # the longest any one read, write or connect may wait
    max_manifest: int = MAX_OCI_MANIFEST
    max_token: int = 1 << 20
    max_error: int = 16 << 10
    max_depth: int = 32  # JSON nesting (an OCI manifest nests 3 deep)

    def blob_deadline(self, size: int) -> float:
        return self.blob_seconds + max(0, size) / self.min_rate


DEFAULT_TRANSPORT = Transport()


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
        return _is_loopback(name)


def _is_loopback(name: str) -> bool:
    if name.lower() in _LOOPBACK_NAMES:
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


# -- where credentials may go (pure) -----------------------------------------------------------------


def _authority(scheme: str, netloc: str) -> tuple[str, int | None] | None:
    """(host, port) of ``netloc`` under ``scheme``, the port defaulted by the scheme; None if unusable."""
    try:
        parts = urlsplit(f"{scheme}://{netloc}")
        port = parts.port
    except ValueError:
        return None
    host = (parts.hostname or "").lower()
    if not host or parts.username is not None:
        return None
    return host, port or (443 if scheme == "https" else 80 if scheme == "http" else None)


def parse_auth_realm(text: str) -> tuple[str, int | None]:
    """``--auth-realm HOST[:PORT]``: (host, port); no port means any port of that host."""
    if not _HOST.fullmatch(text):
        raise RegistryError(f"--auth-realm {text[:120]!r} is not a host: expected HOST or HOST:PORT, "
                            "e.g. auth.registry.site or auth.registry.site:5001.")
    parts = urlsplit(f"//{text}")
    try:
        port = parts.port
    except ValueError:
        raise RegistryError(f"--auth-realm {text[:120]!r} has no valid port.") from None
    return (parts.hostname or "").lower(), port


def realm_refusal(registry_scheme: str, registry_host: str, realm: str,
                  allowed: Sequence[tuple[str, int | None]] = ()) -> str | None:
    """Why the Bearer token realm ``realm`` may not be sent the registry's credentials, or None if it
    may: on the registry's own host and port over the same or a stronger scheme, or on a host named in
    ``allowed`` (from ``--auth-realm``) over the same or a stronger scheme."""
    try:
        parts = urlsplit(realm)
        _ = parts.port
    except ValueError:
        return "is not a URL"
    if parts.scheme not in _RANK or not parts.hostname:
        return "is not an http or https URL"
    if parts.username is not None:
        return "has credentials in it"
    if _RANK[parts.scheme] < _RANK.get(registry_scheme, 1):
        return f"uses {parts.scheme}, weaker than the registry's {registry_scheme}"
    here = _authority(parts.scheme, parts.netloc)
    if here is not None and here == _authority(registry_scheme, registry_host):
        return None
    for host, port in allowed:
        if here is not None and here[0] == host and port in (None, here[1]):
            return None
    shown = f"{here[0]}:{here[1]}" if here else parts.netloc
    return f"is on {shown}, not the registry's own {registry_host}"


# -- deadlines at the socket ------------------------------------------------------------------------


class _Clock:
    """The deadline of the exchange each thread is in, and a stop shared by every thread of a command.

    ``budget`` is asked before every socket read, write and connect: it gives the time left (at most
    the per-operation timeout), or raises a timeout once the deadline has passed."""

    def __init__(self) -> None:
        self._local = threading.local()
        self.stopped: str | None = None

    def _now(self) -> tuple[float, float] | None:
        value: tuple[float, float] | None = getattr(self._local, "deadline", None)
        return value

    @contextmanager
    def within(self, seconds: float) -> Iterator[None]:
        outer = self._now()
        mine = (time.monotonic() + seconds, seconds)
        self._local.deadline = mine if outer is None or mine[0] < outer[0] else outer
        try:
            yield
        finally:
            self._local.deadline = outer

    def expired(self) -> float | None:
        """The seconds the current exchange was given, if they have run out."""
        now = self._now()
        return now[1] if now is not None and time.monotonic() >= now[0] else None

    def budget(self, timeout: float | None, late: type[Exception]) -> float | None:
        if self.stopped is not None:
            raise httpcore.ReadError("stopped")
        now = self._now()
        if now is None:
            return timeout
        left = now[0] - time.monotonic()
        if left <= 0:
            raise late(f"the overall deadline of {now[1]:.0f} s has passed")
        return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream, clock: _Clock) -> None:
        self._inner = inner
        self._clock = clock

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, self._clock.budget(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        view = memoryview(buffer)
        for at in range(0, len(view), _WRITE_SLICE):
            self._inner.write(bytes(view[at : at + _WRITE_SLICE]), self._clock.budget(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        budget = self._clock.budget(timeout, httpcore.ConnectTimeout)
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, budget), self._clock)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    def __init__(self, clock: _Clock) -> None:
        self._inner = httpcore.SyncBackend()
        self._clock = clock

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> httpcore.NetworkStream:
        budget = self._clock.budget(timeout, httpcore.ConnectTimeout)
        return _Stream(self._inner.connect_tcp(host, port, budget, local_address, socket_options), self._clock)

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Any = None) -> httpcore.NetworkStream:
        budget = self._clock.budget(timeout, httpcore.ConnectTimeout)
        return _Stream(self._inner.connect_unix_socket(path, budget, socket_options), self._clock)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class _HTTPTransport(httpx.HTTPTransport):
    """httpx's transport over a connection pool whose sockets answer to the clock."""

    def __init__(self, verify: ssl.SSLContext | bool, clock: _Clock) -> None:
        context = verify if isinstance(verify, ssl.SSLContext) else httpx.create_ssl_context(verify=verify)
        super().__init__(verify=context)
        limits = httpx.Limits()  # httpx's own defaults, on our pool
        self._pool = httpcore.ConnectionPool(ssl_context=context, network_backend=_Backend(clock),
                                             max_connections=limits.max_connections,
                                             max_keepalive_connections=limits.max_keepalive_connections,
                                             keepalive_expiry=limits.keepalive_expiry)


# -- the client -------------------------------------------------------------------------------------


class Registry:
    """One repository on one registry, over one HTTP connection pool."""

    def __init__(
        self,
        ref: OciRef,
        *,
        plain_http: bool = False,
        ca_file: Path | None = None,
        credentials: Credentials | None = None,
        auth_realms: Sequence[str] = (),
        transport: Transport | None = None,
    ) -> None:
        self.ref = ref
        self.plain_http = plain_http
        self.limits = transport or DEFAULT_TRANSPORT
        self.scheme = "http" if (plain_http or (ref.loopback and ca_file is None)) else "https"
        self.auth_realms = tuple(parse_auth_realm(a) for a in auth_realms)
        verify: ssl.SSLContext | bool = True
        if ca_file is not None:
            try:
                verify = ssl.create_default_context(cafile=str(ca_file))
            except (OSError, ssl.SSLError, ValueError) as exc:
                tip = "Give --ca-file the PEM certificate(s) of the registry's CA."
                raise RegistryError(f"cannot use the CA file {ca_file}: {exc}.", tip=tip) from None
        self.base = f"{self.scheme}://{ref.host}/v2/{ref.repo}"
        self._credentials = credentials
        self._auth: str | None = None  # the Authorization header value once the registry asked for one
        self._clock = _Clock()
        self._stop_lock = threading.Lock()
        self._stopped_by: LockbuildError | None = None
        t = self.limits
        self.client = httpx.Client(
            transport=_HTTPTransport(verify, self._clock),
            timeout=httpx.Timeout(t.io_seconds),
            follow_redirects=False,
            headers={"User-Agent": "lockbuild", "Accept-Encoding": "identity"},
        )

    def close(self) -> None:
        with suppress(*TRANSPORT_ERRORS):
            self.client.close()

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stop(self, cause: LockbuildError) -> LockbuildError:
        """Make every transfer still running (in any thread) fail at its next read or write, and every
        later one at once: the first failure of a pull ends the pull promptly. The first cause stays,
        and is returned, so that whichever transfer the caller looks at first reports it."""
        with self._stop_lock:
            if self._stopped_by is None:
                self._stopped_by = cause
                self._clock.stopped = cause.message.rstrip(".")
            return self._stopped_by

    # -- errors -------------------------------------------------------------------------------
    def _fail(self, what: str, detail: str, tip: str | None = None) -> RegistryError:
        tip = tip or "Check the registry address, that it is up, and your access to the repository."
        return RegistryError(f"{what} at {self.ref.host}: {detail}", tip=tip)

    def _transport_error(self, what: str, exc: BaseException) -> RegistryError:
        """A transport failure as the user reads it: a stop, a missed deadline, or what broke."""
        if self._clock.stopped is not None:
            return self._fail(what, f"stopped, because {self._clock.stopped}",
                              tip="Fix what the first error says, then run the same command again.")
        seconds = self._clock.expired()
        if seconds is not None and isinstance(exc, httpx.TimeoutException | httpcore.TimeoutException):
            t = self.limits
            return self._fail(
                what,
                f"it did not finish within its {seconds:.0f} s deadline (the registry sent too slowly or stalled); "
                "given up.",
                tip=f"Check the registry and the network to it (a request must finish within {t.request_seconds:g} s, "
                f"a blob within {t.blob_seconds:g} s plus its size at {t.min_rate / 1e6:g} MB/s); then run the same "
                "command again (a pull resumes what it already has).",
            )
        detail = (str(exc) or "no detail")[:300].rstrip(".")
        return self._fail(what, f"{type(exc).__name__}: {detail}.")

    def _check_scheme(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme == "https":
            return
        if parts.scheme != "http" or not (self.plain_http or _is_loopback(parts.hostname or "")):
            shown = f"{parts.scheme}://{parts.hostname or ''}"
            raise self._fail("refused", f"the registry sent us to {shown[:200]}, which is not https.",
                             tip="Use --plain-http only for a registry you reach over a trusted network.")

    def _own_origin(self, url: str) -> bool:
        parts = urlsplit(url)
        return parts.scheme == self.scheme and parts.netloc == self.ref.host

    # -- transport ----------------------------------------------------------------------------
    def _raw(self, method: str, url: str, *, what: str, headers: dict[str, str],
             content: bytes | Iterable[bytes] | None) -> httpx.Response:
        """One request, streamed; every transport failure a RegistryError."""
        if self._clock.stopped is not None:
            raise self._transport_error(what, RuntimeError("stopped"))
        try:
            request = self.client.build_request(method, url, headers=headers, content=content)
            return self.client.send(request, stream=True)
        except TRANSPORT_ERRORS as exc:
            raise self._transport_error(what, exc) from None

    def _send(self, method: str, url: str, *, what: str, headers: dict[str, str] | None = None,
              content: bytes | Iterable[bytes] | None = None, retry_auth: bool = True,
              redirects: int = 5) -> httpx.Response:
        self._check_scheme(url)
        h = dict(headers or {})
        own = self._own_origin(url)
        if self._auth is not None and own:
            h["Authorization"] = self._auth
        response = self._raw(method, url, what=what, headers=h, content=content)
        if response.status_code == 401 and retry_auth and own:
            challenge = response.headers.get("WWW-Authenticate", "")
            _close(response)
            self._authenticate(challenge, what)
            if isinstance(content, Iterator):
                raise self._fail(what, "the registry asked for credentials in the middle of an upload; retry.")
            return self._send(method, url, what=what, headers=headers, content=content, retry_auth=False,
                              redirects=redirects)
        if response.status_code in (301, 302, 303, 307, 308) and redirects:
            target = self._join(url, response.headers.get("Location", ""), what)
            _close(response)
            # A redirect (to blob storage) gets no credentials: they go to the registry's own origin only.
            return self._send(method if response.status_code != 303 else "GET", target, what=what,
                              headers=headers, content=content, retry_auth=False,
                              redirects=redirects - 1)
        return response

    def _join(self, base: str, location: str, what: str) -> str:
        try:
            return urljoin(base, location)
        except ValueError:
            raise self._fail(what, f"the registry sent us to {location[:200]!r}, which is not a URL.") from None

    @contextmanager
    def _exchange(self, method: str, url: str, *, what: str, seconds: float, headers: dict[str, str] | None = None,
                  content: bytes | Iterable[bytes] | None = None) -> Iterator[httpx.Response]:
        """A request and its answer, all within ``seconds``; the answer is closed after."""
        with self._clock.within(seconds):
            r = self._send(method, url, what=what, headers=headers, content=content)
            try:
                yield r
            finally:
                _close(r)

    def _read(self, r: httpx.Response, limit: int, what: str, *, truncate: bool = False) -> bytes:
        """The answer's body, at most ``limit`` bytes (``truncate``: cut there, else refuse more)."""
        length = r.headers.get("Content-Length", "")
        if not truncate and length.isdigit() and int(length) > limit:
            raise self._fail(what, f"the answer is {length} bytes, over the {limit} allowed; refused unread.",
                             tip="Check that the address is an OCI registry you trust.")
        out = bytearray()
        for chunk in self._chunks(r, what):
            out += chunk
            if len(out) > limit:
                if truncate:
                    return bytes(out[:limit])
                raise self._fail(what, f"the answer is over {limit} bytes; refused.",
                                 tip="Check that the address is an OCI registry you trust.")
        return bytes(out)

    def _chunks(self, r: httpx.Response, what: str) -> Iterator[bytes]:
        try:
            yield from r.iter_raw(CHUNK)
        except TRANSPORT_ERRORS as exc:
            raise self._transport_error(what, exc) from None

    def _json(self, raw: bytes, what: str, answer: str, limit: int) -> Any:
        try:
            return loads_json(raw, what=answer, max_bytes=limit, max_depth=self.limits.max_depth, error=RegistryError)
        except RegistryError as exc:
            raise self._fail(what, exc.message, tip="Check that the address is an OCI registry you trust.") from None

    def _expect(self, r: httpx.Response, ok: tuple[int, ...], what: str) -> None:
        if r.status_code in ok:
            return
        body = self._read(r, self.limits.max_error, what, truncate=True)
        raise self._fail(what, f"HTTP {r.status_code} {_error_text(body)}".strip())

    # -- auth ---------------------------------------------------------------------------------
    def _authenticate(self, challenge: str, what: str) -> None:
        scheme, params = _parse_challenge(challenge)
        creds = self._credentials
        if scheme == "basic":
            if creds is None:
                tip = "Pass --username NAME and the password on stdin with --password-stdin."
                raise self._fail(what, "the registry needs credentials.", tip=tip)
            self._auth = creds.basic()  # sent to the registry's own origin only (_send)
            return
        if scheme != "bearer" or "realm" not in params:
            raise self._fail(what, "the registry refused the request (401) without a usable challenge.")
        realm = params["realm"]
        why = realm_refusal(self.scheme, self.ref.host, realm, self.auth_realms)
        if why is not None:
            raise self._fail(what, f"its token realm {realm[:200]!r} {why}; nothing was sent to it.",
                             tip=_realm_tip(realm, self.scheme))
        self._check_scheme(realm)
        query = {k: v for k, v in params.items() if k in ("service", "scope")}
        query.setdefault("scope", f"repository:{self.ref.repo}:pull,push")
        url = f"{realm}{'&' if '?' in realm else '?'}{urlencode(query)}"
        self._auth = f"Bearer {self._token(url, what)}"

    def _token(self, url: str, what: str) -> str:
        headers = {"Authorization": self._credentials.basic()} if self._credentials is not None else {}
        t = self.limits
        with self._clock.within(t.request_seconds):
            r = self._raw("GET", url, what=what, headers=headers, content=None)
            try:
                if r.status_code != 200:
                    tip = "Check --username and the password given on stdin, and your access to the repository."
                    body = _error_text(self._read(r, t.max_error, what, truncate=True))
                    raise self._fail(what, f"the token service refused (HTTP {r.status_code} {body}).", tip=tip)
                raw = self._read(r, t.max_token, what)
            finally:
                _close(r)
        data = self._json(raw, what, "the token service's answer", t.max_token)
        token = (data.get("token") or data.get("access_token")) if isinstance(data, dict) else None
        if not isinstance(token, str) or not _TOKEN.fullmatch(token):
            raise self._fail(what, "the token service answered without a usable token.")
        return token

    # -- manifests ----------------------------------------------------------------------------
    def get_manifest(self, reference: str) -> bytes:
        """The manifest's bytes, checked to be one bounded JSON object (parsed again by its reader)."""
        what = f"fetching the manifest {self.ref.repo}:{reference}"
        t = self.limits
        with self._exchange("GET", f"{self.base}/manifests/{reference}", what=what, seconds=t.request_seconds,
                            headers={"Accept": OCI_MANIFEST}) as r:
            if r.status_code == 404:
                raise self._fail(what, "no such tag (404).", tip="`lockbuild push` it first, or check the tag.")
            self._expect(r, (200,), what)
            raw = self._read(r, t.max_manifest, what)
        if not isinstance(self._json(raw, what, "the manifest", t.max_manifest), dict):
            raise self._fail(what, "the manifest is not a JSON object.", tip="Pull a tag that `lockbuild push` wrote.")
        return raw

    def put_manifest(self, reference: str, data: bytes) -> None:
        what = f"pushing the manifest {self.ref.repo}:{reference}"
        with self._exchange("PUT", f"{self.base}/manifests/{reference}", what=what,
                            seconds=self.limits.blob_deadline(len(data)),
                            headers={"Content-Type": OCI_MANIFEST}, content=data) as r:
            self._expect(r, (200, 201), what)

    # -- blobs --------------------------------------------------------------------------------
    def has_blob(self, digest: str) -> bool:
        what = f"checking the blob {digest}"
        with self._exchange("HEAD", f"{self.base}/blobs/{digest}", what=what, seconds=self.limits.request_seconds) as r:
            if r.status_code == 404:
                return False
            self._expect(r, (200,), what)
            return True

    @contextmanager
    def get_blob(self, digest: str, *, size: int, offset: int = 0) -> Iterator[tuple[Iterator[bytes], int]]:
        """The blob's bytes from ``offset`` (streamed, within the deadline for the ``size - offset`` bytes
        left) and the offset they start at (0 if the registry ignored Range)."""
        what = f"fetching the blob {digest}"
        headers = {"Range": f"bytes={offset}-"} if offset else {}
        seconds = self.limits.blob_deadline(size - offset)
        with self._exchange("GET", f"{self.base}/blobs/{digest}", what=what, seconds=seconds, headers=headers) as r:
            if r.status_code == 404:
                tip = "Push the build to the registry again; it uploads only what is missing."
                raise self._fail(what, "the registry does not have it (404).", tip=tip)
            self._expect(r, (200, 206), what)
            start = 0
            if r.status_code == 206:
                if not r.headers.get("Content-Range", "").startswith(f"bytes {offset}-"):
                    raise self._fail(what, f"asked for bytes {offset}- and got {r.headers.get('Content-Range')!r}.")
                start = offset
            yield self._chunks(r, what), start

    def get_small_blob(self, digest: str, limit: int) -> bytes:
        what = f"fetching the blob {digest}"
        with self.get_blob(digest, size=limit) as (chunks, _):
            out = bytearray()
            for chunk in chunks:
                out += chunk
                if len(out) > limit:
                    raise self._fail(what, f"the answer is over {limit} bytes; refused.")
            return bytes(out)

    def upload_blob(self, digest: str, src: BinaryIO, size: int) -> None:
        """Upload ``size`` bytes from ``src`` (from where it stands) as ``digest``: one PUT, or PATCH chunks
        of ``CHUNK_UPLOAD`` for large blobs, each body streamed from ``src`` (``_Body``). The registry
        checks the digest when it completes the upload."""
        what = f"uploading the blob {digest}"
        t = self.limits
        with self._exchange("POST", f"{self.base}/blobs/uploads/", what=what, seconds=t.request_seconds,
                            content=b"") as r:
            self._expect(r, (202,), what)
            location = self._join(f"{self.base}/", r.headers.get("Location", ""), what)
        start = _tell(src, what)
        octets = {"Content-Type": "application/octet-stream"}
        if size > CHUNK_UPLOAD:
            done = 0
            while done < size:
                n = min(CHUNK_UPLOAD, size - done)
                with self._exchange("PATCH", location, what=what, seconds=t.blob_deadline(n),
                                    content=_Body(src, start + done, n, what),
                                    headers={**octets, "Content-Length": str(n),
                                             "Content-Range": f"{done}-{done + n - 1}"}) as r:
                    self._expect(r, (202,), what)
                    location = self._join(location, r.headers.get("Location", location), what)
                done += n
            body: bytes | _Body = b""
        else:
            body = _Body(src, start, size, what)
            octets["Content-Length"] = str(size)
        sep = "&" if "?" in location else "?"
        with self._exchange("PUT", f"{location}{sep}{urlencode({'digest': digest})}", what=what,
                            seconds=t.blob_deadline(0 if isinstance(body, bytes) else size), content=body,
                            headers=octets) as r:
            self._expect(r, (201,), what)


@dataclass(frozen=True)
class _Body:
    """``size`` bytes of ``src`` from ``offset``, as a request body of ``CHUNK`` pieces (memory stays
    flat). Iterable again: a request sent anew (after a 401, or to a redirect's target) seeks back and
    sends the same bytes; a source that ends early fails the request instead of sending less."""

    src: BinaryIO
    offset: int
    size: int
    what: str

    def __iter__(self) -> Iterator[bytes]:
        try:
            self.src.seek(self.offset)
        except OSError as exc:
            raise _source_error(self.what, exc) from None
        left = self.size
        while left:
            piece = _read_source(self.src, min(CHUNK, left), self.what)
            if not piece:
                raise RegistryError(f"{self.what}: the local copy ended {left} bytes early.",
                                    tip="Run `lockbuild store verify` on the store.")
            left -= len(piece)
            yield piece


def _close(r: httpx.Response) -> None:
    with suppress(*TRANSPORT_ERRORS):
        r.close()


def _read_source(src: BinaryIO, n: int, what: str) -> bytes:
    try:
        return src.read(n)
    except OSError as exc:
        raise _source_error(what, exc) from None


def _tell(src: BinaryIO, what: str) -> int:
    try:
        return src.tell()
    except OSError as exc:
        raise _source_error(what, exc) from None


def _source_error(what: str, exc: OSError) -> RegistryError:
    return RegistryError(f"{what}: cannot read the local copy: {exc.strerror or exc}.",
                         tip="Run `lockbuild store verify` on the store.")


def _error_text(body: bytes) -> str:
    """An error answer as one short line: the OCI ``errors`` messages when it has them, else its text."""
    try:
        doc = loads_json(body, what="the error", max_bytes=len(body), max_depth=8, error=LockbuildError)
        errors = doc.get("errors") if isinstance(doc, dict) else None
        if isinstance(errors, list) and errors:
            text = "; ".join(f"{e.get('code', '')} {e.get('message', '')}".strip() for e in errors[:5]
                             if isinstance(e, dict))
            if text:
                return text[:300]
    except LockbuildError:
        pass
    return " ".join(body[:300].decode("utf-8", "replace").split())


def _realm_tip(realm: str, registry_scheme: str) -> str:
    parts = urlsplit(realm)
    if parts.scheme in _RANK and _RANK[parts.scheme] < _RANK.get(registry_scheme, 1):
        return "The registry's token service must be reached over https; fix its realm setting."
    host = parts.netloc.rsplit("@", 1)[-1] or "HOST"
    return (f"If {host[:100]} is your registry's own token service, name it: --auth-realm {host[:100]} "
            "(credentials go nowhere else).")
