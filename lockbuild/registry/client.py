"""The connection under ``registry/api.py``'s Registry: requests with deadlines, bounded answers, credentials
where ``registry/auth.py`` lets them go, and asking a busy registry again (bounds: ``registry/transport.py``).

A body that breaks off is a ``TransferCut``, so a blob can be asked for the rest (``resume_after_cut``). No
third-party exception leaves it: transport failures become ``RegistryError`` with what to do."""

from __future__ import annotations

import random
import ssl
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpcore
import httpx

from lockbuild.documents import loads_json
from lockbuild.errors import LockbuildError
from lockbuild.registry.auth import TokenRequest, answer_challenge, parse_auth_realm, token_of
from lockbuild.registry.connection import Clock, ClockedTransport
from lockbuild.registry.reference import OciRef, RegistryCredentials, RegistryError
from lockbuild.registry.retry import RETRYABLE, Answer, Moment, decide, resume
from lockbuild.registry.transport import (
    BUSY_TIP,
    FAIL_TIP,
    TRANSPORT_ERRORS,
    TransferCut,
    Transport,
    error_text,
    phrase,
)
from lockbuild.text import scrub
from lockbuild.wire.headers import number
from lockbuild.wire.rules import ENCODING_TIP, RAW_BODY, encoding_problem
from lockbuild.wire.urls import is_loopback, redirect_problem

REDIRECT_TIP = "A registry may send a client to https only (or to plain http from plain http); check the registry."
_DRAIN = 64 << 10  # an unread answer at most this long is read to its end before it is closed


class Connection:
    """One repository on one registry, over one HTTP connection pool: the requests, not what they ask."""

    def __init__(
        self,
        ref: OciRef,
        *,
        plain_http: bool = False,
        ca_file: Path | None = None,
        credentials: RegistryCredentials | None = None,
        auth_realms: Sequence[str] = (),
        transport: Transport,
    ) -> None:
        self.ref = ref
        self.plain_http = plain_http
        self.limits = transport
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
            headers={"User-Agent": "lockbuild", **RAW_BODY},
        )
        # the pool keeps its connections open between requests: closed with the client, at the latest
        # when this object goes (a caller that never closed it leaves no socket behind)
        weakref.finalize(self, _close_client, self.client)

    def close(self) -> None:
        _close_client(self.client)

    def __enter__(self) -> Connection:
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
        tip = tip or FAIL_TIP
        return RegistryError(f"{what} at {self.ref.host}: {detail}", tip=tip)

    def _transport_error(self, what: str, exc: BaseException) -> RegistryError:
        """A transport failure as the user reads it: a stop, a missed deadline, or what broke."""
        if self._clock.stopped is not None:
            return self._fail(
                what,
                f"stopped, because {self._clock.stopped}",
                tip="Fix what the first error says, then run the same command again.",
            )
        seconds = self._clock.expired()
        if seconds is not None and isinstance(exc, httpx.TimeoutException | httpcore.TimeoutException):
            detail = f"it did not finish within its {seconds:.0f} s deadline (the registry sent too slowly or stalled)"
            return self._fail(what, f"{detail}; given up.", tip=self.limits.deadline_tip())
        detail = scrub(f"{type(exc).__name__}: {str(exc) or 'no detail'}", self.secrets())
        return self._fail(what, f"{detail[:300].rstrip('.')}.")

    def secrets(self) -> tuple[str, ...]:
        """What must never be shown: the password, its Basic header, the token the registry gave."""
        held = [self._auth or "", (self._auth or "").partition(" ")[2]]
        if self._credentials is not None:
            held += [self._credentials.password, self._credentials.basic().removeprefix("Basic ")]
        return tuple(s for s in held if s)

    def _check_scheme(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme == "https":
            return
        if parts.scheme != "http" or not (self.plain_http or is_loopback(parts.hostname or "")):
            shown = f"{parts.scheme}://{parts.hostname or ''}"
            raise self._fail(
                "refused",
                f"the registry sent us to {shown[:200]}, which is not https.",
                tip="Use --plain-http only for a registry you reach over a trusted network.",
            )

    def _own_origin(self, url: str) -> bool:
        parts = urlsplit(url)
        return parts.scheme == self.scheme and parts.netloc == self.ref.host

    # -- transport ----------------------------------------------------------------------------
    def _raw(
        self, method: str, url: str, *, what: str, headers: dict[str, str], content: bytes | Iterable[bytes] | None
    ) -> httpx.Response:
        """One request, streamed; every transport failure a RegistryError."""
        if self._clock.stopped is not None:
            raise self._transport_error(what, RuntimeError("stopped"))
        try:
            request = self.client.build_request(method, url, headers=headers, content=content)
            response = self.client.send(request, stream=True)
        except TRANSPORT_ERRORS as exc:
            raise self._transport_error(what, exc) from None
        encoded = encoding_problem(response.headers)
        if encoded is not None:
            _close(response)
            raise self._fail(what, f"{encoded}.", tip=ENCODING_TIP)
        return response

    def _send(
        self,
        method: str,
        url: str,
        *,
        what: str,
        headers: dict[str, str] | None = None,
        content: bytes | Iterable[bytes] | None = None,
        retry_auth: bool = True,
        redirects: int = 5,
    ) -> httpx.Response:
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
            return self._send(
                method, url, what=what, headers=headers, content=content, retry_auth=False, redirects=redirects
            )
        if response.status_code in (301, 302, 303, 307, 308) and redirects:
            target = self._join(url, response.headers.get("Location", ""), what)
            _close(response)
            why = redirect_problem(url, target)
            if why is not None:
                raise self._fail("refused", f"the registry redirected us, and {why} is refused.", tip=REDIRECT_TIP)
            # A redirect (to blob storage) gets no credentials: they go to the registry's own origin only.
            return self._send(
                method if response.status_code != 303 else "GET",
                target,
                what=what,
                headers=headers,
                content=content,
                retry_auth=False,
                redirects=redirects - 1,
            )
        return response

    def _join(self, base: str, location: str, what: str) -> str:
        try:
            return urljoin(base, location)
        except ValueError:
            raise self._fail(what, f"the registry sent us to {location[:200]!r}, which is not a URL.") from None

    @contextmanager
    def _exchange(
        self,
        method: str,
        url: str,
        *,
        what: str,
        seconds: float,
        headers: dict[str, str] | None = None,
        content: bytes | Iterable[bytes] | None = None,
    ) -> Iterator[httpx.Response]:
        """A request and its answer, each attempt within ``seconds``; a busy answer (429, 502, 503, 504)
        asked again as ``registry/retry.py`` decides. The answer is closed after."""
        with self._attempts(
            what, seconds, lambda: self._send(method, url, what=what, headers=headers, content=content)
        ) as r:
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
        decision = decide(
            Answer(r.status_code, r.headers.get("Retry-After")),
            attempt,
            Moment(time.monotonic() - first, time.time()),
            self.limits.retry,
            self._jitter.random(),
        )
        if decision.wait is not None:
            with self._stop_lock:
                self.retries += 1
            return decision.wait
        body = error_text(self._read(r, self.limits.max_error, what, truncate=True))
        said = f"{r.status_code} {phrase(r.status_code)}" + (f" ({body})" if body else "")
        raise self._fail(what, f"the registry answered {said}, and {decision.why}; given up.", tip=BUSY_TIP)

    def _read(self, r: httpx.Response, limit: int, what: str, *, truncate: bool = False) -> bytes:
        """The answer's body, at most ``limit`` bytes (``truncate``: cut there, else refuse more)."""
        length = number(r.headers.get("Content-Length"))
        if not truncate and length is not None and length > limit:
            raise self._fail(
                what,
                f"the answer is {length} bytes, over the {limit} allowed; refused unread.",
                tip="Check that the address is an OCI registry you trust.",
            )
        out = bytearray()
        for chunk in self._chunks(r, what):
            out += chunk
            if len(out) > limit:
                if truncate:
                    return bytes(out[:limit])
                raise self._fail(
                    what,
                    f"the answer is over {limit} bytes; refused.",
                    tip="Check that the address is an OCI registry you trust.",
                )
        return bytes(out)

    def _chunks(self, r: httpx.Response, what: str) -> Iterator[bytes]:
        try:
            yield from r.iter_raw()  # as received (a chunk size would hold back what came before a break)
        except TRANSPORT_ERRORS as exc:
            error = self._transport_error(what, exc)
            cut = (
                self._clock.stopped is None
                and self._clock.expired() is None
                and not isinstance(exc, httpx.TimeoutException | httpcore.TimeoutException)
            )
            raise (TransferCut(error.message, tip=error.tip) if cut else error) from None

    def resume_after_cut(self, attempt: int, first: float) -> bool:
        """After a blob's answer broke off for the ``attempt``-th time (``first``: when it was first asked
        for, monotonic): wait as ``registry/retry.py::resume`` decides and say True, or False to give up."""
        decision = resume(
            attempt, Moment(time.monotonic() - first, time.time()), self.limits.retry, self._jitter.random()
        )
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
        raise self._fail(what, f"HTTP {r.status_code} {error_text(body)}".strip())

    # -- auth ---------------------------------------------------------------------------------
    def _authenticate(self, challenge: str, what: str) -> None:
        """Answer a 401 as ``registry/auth.py`` rules: Basic credentials, or a token from an allowed realm."""
        try:
            answer = answer_challenge(
                challenge,
                scheme=self.scheme,
                ref=self.ref,
                credentials=self._credentials,
                auth_realms=self.auth_realms,
            )
        except RegistryError as exc:
            raise self._fail(what, exc.message, tip=exc.tip) from None
        if isinstance(answer, str):
            self._auth = answer  # sent to the registry's own origin only (_send)
            return
        self._check_scheme(answer.url)
        self._auth = f"Bearer {self._token(answer, what)}"

    def _token(self, request: TokenRequest, what: str) -> str:
        headers = {"Authorization": request.authorization} if request.authorization is not None else {}
        t = self.limits
        with self._attempts(
            what, t.request_seconds, lambda: self._raw("GET", request.url, what=what, headers=headers, content=None)
        ) as r:
            if r.status_code != 200:
                tip = "Check --username and the password given on stdin, and your access to the repository."
                body = error_text(self._read(r, t.max_error, what, truncate=True))
                raise self._fail(what, f"the token service refused (HTTP {r.status_code} {body}).", tip=tip)
            raw = self._read(r, t.max_token, what)
        try:
            return token_of(self._json(raw, what, "the token service's answer", t.max_token))
        except RegistryError as exc:
            raise self._fail(what, exc.message, tip=exc.tip) from None


def _close_client(client: httpx.Client) -> None:
    with suppress(*TRANSPORT_ERRORS):
        client.close()


def _close(r: httpx.Response) -> None:
    """Close an answer; a short body left unread (a HEAD's, an upload's) is read first, within the
    exchange's deadline, so that its connection goes back to the pool instead of being dropped."""
    length = number(r.headers.get("Content-Length"))
    if not r.is_stream_consumed and (r.request.method == "HEAD" or (length is not None and length <= _DRAIN)):
        with suppress(*TRANSPORT_ERRORS):
            for _ in r.iter_raw():
                pass
    with suppress(*TRANSPORT_ERRORS):
        r.close()
