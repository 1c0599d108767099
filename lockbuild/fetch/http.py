"""The one place the builder makes HTTP clients and reads bounded JSON answers.

Every request, redirects included, passes the transport rule (https, or http to loopback or under the
opt-in) and the credential rule (Authorization only for its own host, never over plain http off this
machine); every redirect the redirect rule; every transport failure's text is scrubbed of secrets."""

from __future__ import annotations

import json
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx

from lockbuild import __version__
from lockbuild.errors import RemoteError, transport_tip
from lockbuild.settings import Settings
from lockbuild.text import scrub
from lockbuild.wire.headers import number
from lockbuild.wire.rules import ENCODING_TIP, RAW_BODY, encoding_problem
from lockbuild.wire.urls import check_redirect, check_transport, public

MAX_JSON_BYTES = 64 << 20
MAX_REDIRECTS = 5
USER_AGENT = f"lockbuild/{__version__}"


class _HostAuth(httpx.Auth):
    """Adds the Authorization header the settings give for the request's URL (none by default)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers.pop("Authorization", None)  # credentials come from the settings only
        value = self.settings.auth_for(str(request.url))
        if value is not None:
            request.headers["Authorization"] = value
        yield request


def make_client(
    *, connections: int = 16, settings: Settings | None = None, timeout: float | None = None
) -> httpx.Client:
    """A client whose every request (redirects too) obeys the transport rule; with ``settings``, it
    also carries their credentials to the hosts they belong to; ``timeout``: each phase's bound (a
    service asked under a short deadline), else 30 s (15 s to connect)."""
    allow_insecure = settings.allow_insecure_http if settings is not None else False

    def check(request: httpx.Request) -> None:
        if request.url.scheme == "http":  # httpx itself refuses schemes other than http and https
            check_transport(str(request.url), what="an HTTP request", allow_insecure=allow_insecure)

    def redirect(response: httpx.Response) -> None:
        """The redirect rule, before httpx follows a redirect (a client with ``follow_redirects``)."""
        location = response.headers.get("location")
        if response.is_redirect and location is not None:
            try:
                target = str(response.request.url.join(location))
            except (httpx.InvalidURL, ValueError):
                return  # httpx refuses it as it follows, and get_json_page says it is not a readable URL
            check_redirect(str(response.request.url), target)

    return httpx.Client(
        timeout=httpx.Timeout(30.0, connect=15.0) if timeout is None else httpx.Timeout(timeout),
        limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
        headers={"User-Agent": USER_AGENT, **RAW_BODY},
        follow_redirects=False,
        trust_env=True,
        auth=_HostAuth(settings) if settings is not None else None,
        event_hooks={"request": [check], "response": [redirect]},
    )


def secrets_of(client: httpx.Client) -> tuple[str, ...]:
    """The secrets of the settings ``client`` carries (``make_client(settings=...)``); none otherwise."""
    auth = client.auth
    return auth.settings.secrets() if isinstance(auth, _HostAuth) else ()


def failure(exc: BaseException, secrets: tuple[str, ...]) -> str:
    """A transport failure as a message shows it: its kind and its words, scrubbed of every secret."""
    return scrub(f"{exc.__class__.__name__}: {exc}", secrets)


def get_json(
    client: httpx.Client,
    url: str,
    *,
    what: str,
    headers: dict[str, str] | None = None,
    not_found: str | None = None,
    limit: int = MAX_JSON_BYTES,
) -> tuple[Any, str]:
    """GET a JSON document, following redirects only on the same host; returns (data, final URL).

    The body is read up to ``limit`` bytes: an endless or oversized answer is refused.
    """
    page = get_json_page(client, url, what=what, headers=headers, not_found=not_found, limit=limit)
    return page.data, page.url


@dataclass(frozen=True)
class JsonPage:
    """A JSON answer, the URL that gave it, and the next page its ``Link: <…>; rel="next"`` names (as
    sent, resolved against the URL; the caller decides whether to follow it)."""

    data: Any
    url: str
    next_url: str | None
    size: int = 0  # the bytes of the answer's body, as received


def get_json_page(
    client: httpx.Client,
    url: str,
    *,
    what: str,
    headers: dict[str, str] | None = None,
    not_found: str | None = None,
    limit: int = MAX_JSON_BYTES,
    denied: str | None = None,
    over: str | None = None,
) -> JsonPage:
    """``get_json``, with the answer's next-page link (a paginated API: the Hugging Face Hub's tree);
    ``denied``: what a 401 or 403 means to the user; ``over``: the message when the answer is over ``limit``."""
    current = url
    next_url: str | None = None
    retried = False
    asked = {**RAW_BODY, **(headers or {})}
    for _ in range(MAX_REDIRECTS + 2):
        try:
            with client.stream("GET", current, headers=asked) as resp:
                if resp.is_redirect:
                    target = _redirect_target(current, resp.headers.get("location", ""), what)
                    check_redirect(current, target)
                    if urlsplit(target)[:2] != urlsplit(current)[:2]:
                        raise RemoteError(
                            f"{what}: {current} redirected to another host ({urlsplit(public(target)).netloc}); "
                            "expected an answer from the host asked.",
                            tip="Point LOCKBUILD_INDEX_URL / LOCKBUILD_GITHUB_API at the server that answers.",
                        )
                    current = target
                    continue
                if resp.status_code == 404 and not_found is not None:
                    raise RemoteError(not_found)
                if resp.status_code in (401, 403) and denied is not None:
                    raise RemoteError(f"{what}: {current} answered HTTP {resp.status_code}. {denied}")
                if resp.status_code != 200:
                    raise RemoteError(
                        f"{what}: {current} answered HTTP {resp.status_code}; expected 200.",
                        tip="Check the address, and that the server is reachable from this machine.",
                    )
                encoded = encoding_problem(resp.headers)
                if encoded is not None:
                    raise RemoteError(f"{what}: {current}: {encoded}.", tip=ENCODING_TIP)
                body = _read_bounded(resp, limit, what=what, url=current, over=over)
                link = resp.links.get("next", {}).get("url")
                next_url = urljoin(current, link) if link else None
        except (httpx.ReadError, httpx.RemoteProtocolError) as exc:
            if not retried:  # a GET is idempotent: a connection reset once (a kept-alive connection the server
                retried = True  # closed as it was reused) is asked again, on a new connection
                continue
            raise RemoteError(
                f"{what}: cannot reach {current}: {failure(exc, secrets_of(client))}", tip=transport_tip(exc)
            ) from None
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise RemoteError(
                f"{what}: cannot reach {current}: {failure(exc, secrets_of(client))}", tip=transport_tip(exc)
            ) from None
        try:
            return JsonPage(json.loads(body), current, next_url, len(body))
        except (ValueError, UnicodeDecodeError) as exc:
            raise RemoteError(f"{what}: {current} did not answer valid JSON ({failure(exc, ())}).") from None
        except RecursionError:  # every JSON answer (index pages, the release API): never a traceback
            raise RemoteError(f"{what}: {current} answered JSON nested too deeply to be an answer.") from None
    raise RemoteError(f"{what}: {url} redirected more than {MAX_REDIRECTS} times.")


def post_json(client: httpx.Client, url: str, payload: Any, *, what: str, limit: int = MAX_JSON_BYTES) -> Any:
    """POST ``payload`` as JSON and read the JSON answer, bounded like :func:`get_json`; no redirect is
    followed (a query is sent to the address named, and only there)."""
    try:
        with client.stream("POST", url, json=payload, headers=RAW_BODY) as resp:
            if resp.status_code != 200:
                raise RemoteError(
                    f"{what}: {public(url)} answered HTTP {resp.status_code}; expected 200.",
                    tip="Check the address, and that the server is reachable from this machine.",
                )
            encoded = encoding_problem(resp.headers)
            if encoded is not None:
                raise RemoteError(f"{what}: {public(url)}: {encoded}.", tip=ENCODING_TIP)
            body = _read_bounded(resp, limit, what=what, url=public(url))
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise RemoteError(
            f"{what}: cannot reach {public(url)}: {failure(exc, secrets_of(client))}", tip=transport_tip(exc)
        ) from None
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise RemoteError(f"{what}: {public(url)} did not answer valid JSON.") from None


def _redirect_target(current: str, location: str, what: str) -> str:
    """The URL a redirect's Location names, resolved against ``current``; a Location no URL parser can
    read (an unclosed ``[`` in its host, say) is the server's error, said as one."""
    try:
        target = urljoin(current, location)
        urlsplit(target)
    except ValueError:
        raise RemoteError(
            f"{what}: {public(current)} redirected to {location[:80]!r}, which is not a readable URL; "
            "expected a redirect to an http(s) URL.",
            tip="The server's answer is malformed: report it to whoever runs it.",
        ) from None
    return target


def _read_bounded(resp: httpx.Response, limit: int, *, what: str, url: str, over: str | None = None) -> bytearray:
    """The whole body, refused (before reading, when its length is announced) if over ``limit`` bytes."""
    too_big = RemoteError(
        over or f"{what}: {url} sent more than {limit} bytes; expected a JSON document of at most that."
    )
    announced = number(resp.headers.get("content-length"))
    if announced is not None and announced > limit:
        raise too_big
    body = bytearray()
    for chunk in resp.iter_raw():  # as received: the bound counts the bytes on the wire (wire.py)
        body += chunk
        if len(body) > limit:
            raise too_big
    return body
