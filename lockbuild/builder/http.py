"""The one place the builder makes HTTP clients and reads bounded JSON answers."""

from __future__ import annotations

import json
import os
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx

from lockbuild import __version__
from lockbuild.errors import RemoteError

DEFAULT_INDEX = "https://pypi.org/simple"
DEFAULT_GITHUB_API = "https://api.github.com"
DEFAULT_GITHUB_DOWNLOAD = "https://github.com"
MAX_JSON_BYTES = 64 << 20
MAX_REDIRECTS = 5
USER_AGENT = f"lockbuild/{__version__}"


def index_url() -> str:
    return os.environ.get("LOCKBUILD_INDEX_URL", DEFAULT_INDEX).rstrip("/")


def github_api() -> str:
    return os.environ.get("LOCKBUILD_GITHUB_API", DEFAULT_GITHUB_API).rstrip("/")


def github_download() -> str:
    return os.environ.get("LOCKBUILD_GITHUB_DOWNLOAD", DEFAULT_GITHUB_DOWNLOAD).rstrip("/")


def make_client(*, connections: int = 16) -> httpx.Client:
    return httpx.Client(
        timeout=httpx.Timeout(30.0, connect=15.0),
        limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
        headers={"User-Agent": USER_AGENT},
        follow_redirects=False,
        trust_env=True,
    )


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
    current = url
    for _ in range(MAX_REDIRECTS + 1):
        try:
            with client.stream("GET", current, headers=headers) as resp:
                if resp.is_redirect:
                    target = urljoin(current, resp.headers.get("location", ""))
                    if urlsplit(target)[:2] != urlsplit(current)[:2]:
                        raise RemoteError(
                            f"{what}: {current} redirected to another host ({urlsplit(target).netloc}); "
                            "expected an answer from the host asked.",
                            tip="Point LOCKBUILD_INDEX_URL / LOCKBUILD_GITHUB_API at the server that answers.",
                        )
                    current = target
                    continue
                if resp.status_code == 404 and not_found is not None:
                    raise RemoteError(not_found)
                if resp.status_code != 200:
                    raise RemoteError(
                        f"{what}: {current} answered HTTP {resp.status_code}; expected 200.",
                        tip="Check the address, and that the server is reachable from this machine.",
                    )
                body = _read_bounded(resp, limit, what=what, url=current)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise RemoteError(
                f"{what}: cannot reach {current}: {exc.__class__.__name__}: {exc}",
                tip="Check the network, the proxy settings and the address.",
            ) from None
        try:
            return json.loads(body), current
        except (ValueError, UnicodeDecodeError) as exc:
            raise RemoteError(f"{what}: {current} did not answer valid JSON ({exc}).") from None
    raise RemoteError(f"{what}: {url} redirected more than {MAX_REDIRECTS} times.")


def _read_bounded(resp: httpx.Response, limit: int, *, what: str, url: str) -> bytearray:
    """The whole body, refused (before reading, when its length is announced) if over ``limit`` bytes."""
    too_big = RemoteError(f"{what}: {url} sent more than {limit} bytes; expected a JSON document of at most that.")
    announced = resp.headers.get("content-length", "")
    if announced.isdigit() and int(announced) > limit:
        raise too_big
    body = bytearray()
    for chunk in resp.iter_bytes():
        body += chunk
        if len(body) > limit:
            raise too_big
    return body
