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

import http
import random
import re
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlencode, urljoin, urlsplit

import httpcore
import httpx

from lockbuild.errors import LockbuildError
from lockbuild.fsio import CHUNK, loads_json
from lockbuild.site.ociref import (
    Credentials,
    OciRef,
    RegistryError,
    is_loopback,
    parse_auth_realm,
    parse_challenge,
    parse_ref,
    realm_refusal,
    realm_tip,
)
from lockbuild.site.ocisocket import Clock, ClockedTransport
from lockbuild.site.retry import DEFAULT_RETRY, RETRY_ENV, RETRYABLE, Answer, Moment, RetryPolicy, decide, resume

__all__ = ["CHUNK_UPLOAD", "DEFAULT_TRANSPORT", "MAX_OCI_MANIFEST", "OCI_MANIFEST", "TRANSPORT_ERRORS", "Credentials",
           "OciRef", "Registry", "RegistryError", "TransferCut", "Transport", "parse_auth_realm", "parse_ref",
           "realm_refusal"]

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MAX_OCI_MANIFEST = 64 << 20
_TOKEN = re.compile(r"[\x21-\x7e]+")  # a token goes into a header: printable ASCII, no spaces
CHUNK_UPLOAD = 64 << 20  # blobs larger than this are uploaded in chunks (PATCH), smaller in one PUT
# What the transport may raise (httpx wraps socket and ssl errors; the rest is belt and braces).
TRANSPORT_ERRORS = (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError, httpcore.TimeoutException,
                    httpcore.NetworkError, httpcore.ProtocolError, ssl.SSLError, OSError, ValueError)


class TransferCut(RegistryError):
    """An answer's body broke off (the connection closed or failed mid-body), not on a deadline or a stop:
    a blob can be asked for again from the byte received. Given up, it is shown as the RegistryError it is."""

    def plain(self) -> RegistryError:
        return RegistryError(self.message, tip="Run the same command again: a pull resumes where this one stopped.")


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
    retry: RetryPolicy = field(default=DEFAULT_RETRY)  # 429 / 502 / 503 / 504: when to ask again (site/retry.py)

    def blob_deadline(self, size: int) -> float:
        return self.blob_seconds + max(0, size) / self.min_rate


DEFAULT_TRANSPORT = Transport()


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
        self._clock = Clock()
        self._stop_lock = threading.Lock()
        self._stopped_by: LockbuildError | None = None
        self._jitter = random.Random()  # noqa: S311 - spreads retries in time; nothing secret
        self.retries = 0  # requests asked again after a 429 / 502 / 503 / 504 (all threads)
        t = self.limits
        self.client = httpx.Client(
            transport=ClockedTransport(verify, self._clock),
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
                self._clock.stop(cause.message.rstrip("."))
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
        if parts.scheme != "http" or not (self.plain_http or is_loopback(parts.hostname or "")):
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
        """A request and its answer, each attempt within ``seconds``; a busy answer (429, 502, 503, 504)
        asked again as ``site/retry.py`` decides. The answer is closed after."""
        with self._attempts(what, seconds, lambda: self._send(method, url, what=what, headers=headers,
                                                               content=content)) as r:
            yield r

    @contextmanager
    def _attempts(self, what: str, seconds: float, send: Callable[[], httpx.Response]) -> Iterator[httpx.Response]:
        first = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            with self._clock.within(seconds):
                r = send()
                try:
                    if r.status_code not in RETRYABLE:
                        yield r
                        return
                    wait = self._busy(r, attempt, first, what)
                finally:
                    _close(r)
            if not self._clock.pause(wait):
                raise self._transport_error(what, RuntimeError("stopped"))

    def _busy(self, r: httpx.Response, attempt: int, first: float, what: str) -> float:
        """The seconds to wait before asking again after a busy answer, or the error that ends the request."""
        decision = decide(Answer(r.status_code, r.headers.get("Retry-After")),
                          attempt, Moment(time.monotonic() - first, time.time()), self.limits.retry,
                          self._jitter.random())
        if decision.wait is not None:
            with self._stop_lock:
                self.retries += 1
            return decision.wait
        body = _error_text(self._read(r, self.limits.max_error, what, truncate=True))
        said = f"{r.status_code} {_phrase(r.status_code)}" + (f" ({body})" if body else "")
        raise self._fail(
            what, f"the registry answered {said}, and {decision.why}; given up.",
            tip="The registry (or a mirror or proxy in front of it) is overloaded or limits requests: run the same "
            "command again later (a pull resumes what it already has), pull from a mirror nearer the node, or give "
            f"it longer with {RETRY_ENV}=SECONDS.",
        )

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
            yield from r.iter_raw()  # as received (a chunk size would hold back what came before a break)
        except TRANSPORT_ERRORS as exc:
            error = self._transport_error(what, exc)
            cut = self._clock.stopped is None and self._clock.expired() is None and not isinstance(
                exc, httpx.TimeoutException | httpcore.TimeoutException)
            raise (TransferCut(error.message, tip=error.tip) if cut else error) from None

    def resume_after_cut(self, attempt: int, first: float) -> bool:
        """After a blob's answer broke off for the ``attempt``-th time (``first``: when it was first asked
        for, monotonic): wait as ``site/retry.py::resume`` decides and say True, or False to give up."""
        decision = resume(attempt, Moment(time.monotonic() - first, time.time()), self.limits.retry,
                          self._jitter.random())
        if decision.wait is None or not self._clock.pause(decision.wait):
            return False
        with self._stop_lock:
            self.retries += 1
        return True

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
        scheme, params = parse_challenge(challenge)
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
                             tip=realm_tip(realm, self.scheme))
        self._check_scheme(realm)
        query = {k: v for k, v in params.items() if k in ("service", "scope")}
        query.setdefault("scope", f"repository:{self.ref.repo}:pull,push")
        url = f"{realm}{'&' if '?' in realm else '?'}{urlencode(query)}"
        self._auth = f"Bearer {self._token(url, what)}"

    def _token(self, url: str, what: str) -> str:
        headers = {"Authorization": self._credentials.basic()} if self._credentials is not None else {}
        t = self.limits
        with self._attempts(what, t.request_seconds,
                            lambda: self._raw("GET", url, what=what, headers=headers, content=None)) as r:
            if r.status_code != 200:
                tip = "Check --username and the password given on stdin, and your access to the repository."
                body = _error_text(self._read(r, t.max_error, what, truncate=True))
                raise self._fail(what, f"the token service refused (HTTP {r.status_code} {body}).", tip=tip)
            raw = self._read(r, t.max_token, what)
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
        """A blob of at most ``limit`` bytes, held in memory; asked for again whole if its answer breaks off."""
        what = f"fetching the blob {digest}"
        first, cuts = time.monotonic(), 0
        while True:
            try:
                with self.get_blob(digest, size=limit) as (chunks, _):
                    out = bytearray()
                    for chunk in chunks:
                        out += chunk
                        if len(out) > limit:
                            raise self._fail(what, f"the answer is over {limit} bytes; refused.")
                    return bytes(out)
            except TransferCut as exc:
                cuts += 1
                if not self.resume_after_cut(cuts, first):
                    raise exc.plain() from None

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


def _phrase(status: int) -> str:
    """The standard reason phrase of ``status`` (never the registry's own words)."""
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return ""


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


