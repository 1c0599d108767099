"""A download's GET through libcurl (``pycurl``): the bytes are received, decrypted and parsed in C, off the GIL.

The client's rules stay the httpx client's own (``fetch/http.py::make_client``), applied to every request
as httpx applies them (:func:`get`). libcurl is told to speak http and https only, to follow nothing
itself and to decode nothing, so the caller's retry and its tips are the same as with httpx."""

from __future__ import annotations

import importlib
import ssl
import threading
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from lockbuild.errors import FetchError
from lockbuild.limits import MiB
from lockbuild.wire.headers import number
from lockbuild.wire.urls import check_redirect

pycurl: Any
try:  # untyped (no stubs): taken as Any
    pycurl = importlib.import_module("pycurl")
except ImportError:  # the builder's dependency; _handle says what to do
    pycurl = None

CONNECT_SECONDS = 15  # as make_client's httpx.Timeout: 15 s to connect, 30 s without a byte
STALL_SECONDS = 30
BUFFER = MiB  # libcurl's receive buffer: fewer, larger pieces handed to Python
_local = threading.local()
_CONNECT = frozenset({6, 7, 35, 45, 60, 77, 83, 90, 91})  # resolve, connect, TLS handshake and certificates
_TIMEOUT = frozenset({28})
_REDIRECT = frozenset({301, 302, 303, 307, 308})


class _Stop(Exception):
    """What a callback raised, carried out of libcurl (a callback cannot raise through C)."""


def available() -> bool:
    return pycurl is not None


def _handle() -> Any:
    """This thread's libcurl handle: reused, so its connections are kept alive from one file to the next."""
    if pycurl is None:
        raise FetchError(
            "downloads: the builder's transfer needs pycurl, which cannot be imported here.",
            tip="Install lockbuild with its dependencies (pip install lockbuild, or pip install pycurl).",
        )
    easy = getattr(_local, "easy", None)
    if easy is None:
        easy = _local.easy = pycurl.Curl()
    easy.reset()
    return easy


def get(
    client: httpx.Client,
    url: str,
    headers: Mapping[str, str],
    on_answer: Callable[[int, Mapping[str, str]], None],
    on_body: Callable[[bytes], None],
) -> None:
    """GET ``url`` under ``client``'s rules as httpx applies them: its headers and credentials on the first
    request, its request hooks (the transport rule) on every request, a redirect followed only as the client
    and ``check_redirect`` allow, at most ``max_redirects`` times, without Authorization to another origin.
    ``on_answer`` gets the status and headers before any byte of the body, ``on_body`` the body's pieces;
    whatever they raise ends the transfer and is raised here. A failed transfer raises what httpx would."""
    request = client.build_request("GET", url, headers=headers)
    auth = client.auth
    if auth is not None:  # the credential rule: the settings' header for this URL, none otherwise
        request = next(auth.sync_auth_flow(request))
    for _ in range(client.max_redirects + 1):
        for hook in client.event_hooks.get("request", []):
            hook(request)  # the transport rule, for every request
        status, answer = _one(request, on_answer, on_body)
        location = answer.get("location")
        if not (client.follow_redirects and status in _REDIRECT and location):
            return
        target = request.url.join(location)
        check_redirect(str(request.url), str(target))  # the redirect rule, before anything is sent there
        kept = httpx.Headers(request.headers)
        del kept["host"]
        if (target.scheme, target.host, target.port) != (request.url.scheme, request.url.host, request.url.port):
            kept.pop("authorization", None)  # credentials never follow a redirect to another origin
        request = httpx.Request("GET", target, headers=kept)
    raise httpx.TooManyRedirects("Exceeded maximum allowed redirects.", request=request)


def _one(
    request: httpx.Request,
    on_answer: Callable[[int, Mapping[str, str]], None],
    on_body: Callable[[bytes], None],
) -> tuple[int, dict[str, str]]:
    """One request, no redirect followed: the status and headers of its answer."""
    if request.url.scheme not in ("http", "https"):
        raise httpx.UnsupportedProtocol(f"Request URL has an unsupported protocol '{request.url.scheme}://'.")
    easy = _handle()
    state: dict[str, Any] = {"status": 0, "headers": {}, "stop": None, "redirect": False}

    def header(line: bytes) -> int | None:
        text = line.decode("latin-1").rstrip("\r\n")
        if text.startswith("HTTP/"):
            parts = text.split(" ", 2)
            state["status"] = (number(parts[1], 3) if len(parts) > 1 else None) or 0
            state["headers"] = {}
        elif ":" in text:
            name, _, value = text.partition(":")
            state["headers"][name.strip().lower()] = value.strip()
        elif not text and state["status"] not in (0, 100):
            if state["status"] in _REDIRECT and "location" in state["headers"]:
                state["redirect"] = True
                return 0  # a redirect's body is never read; the caller follows it or refuses it
            try:
                on_answer(state["status"], state["headers"])
            except BaseException as exc:  # carried out of C, raised below
                state["stop"] = exc
                return 0
        return None

    def body(chunk: bytes) -> int | None:
        try:
            on_body(chunk)
        except BaseException as exc:  # carried out of C, raised below
            state["stop"] = exc
            return 0
        return None

    easy.setopt(pycurl.URL, str(request.url))
    easy.setopt(pycurl.HTTPHEADER, [f"{k}: {v}" for k, v in request.headers.items() if k.lower() != "host"])
    easy.setopt(pycurl.PROTOCOLS, pycurl.PROTO_HTTP | pycurl.PROTO_HTTPS)
    easy.setopt(pycurl.FOLLOWLOCATION, 0)
    easy.setopt(pycurl.HTTP_VERSION, pycurl.CURL_HTTP_VERSION_1_1)  # as httpx speaks it
    easy.setopt(pycurl.CONNECTTIMEOUT, CONNECT_SECONDS)
    easy.setopt(pycurl.LOW_SPEED_LIMIT, 1)
    easy.setopt(pycurl.LOW_SPEED_TIME, STALL_SECONDS)
    easy.setopt(pycurl.BUFFERSIZE, BUFFER)
    easy.setopt(pycurl.NOSIGNAL, 1)
    _trust(easy)
    easy.setopt(pycurl.HEADERFUNCTION, header)
    easy.setopt(pycurl.WRITEFUNCTION, body)
    try:
        easy.perform()
    except pycurl.error as exc:
        if state["stop"] is not None:
            raise state["stop"] from None
        if state["redirect"]:
            return state["status"], state["headers"]
        code, message = exc.args[0], str(exc.args[1] if len(exc.args) > 1 else exc)
        kind = httpx.ConnectError if code in _CONNECT else httpx.ReadTimeout if code in _TIMEOUT else httpx.ReadError
        raise kind(message, request=request) from None
    if state["stop"] is not None:
        raise state["stop"]
    if not state["redirect"] and state["status"] in (0, 100):
        raise httpx.RemoteProtocolError("Server disconnected without sending a response.", request=request)
    return state["status"], state["headers"]


def _trust(easy: Any) -> None:
    """The CAs httpx trusts (``trust_env``): SSL_CERT_FILE, else SSL_CERT_DIR, else certifi's bundle (the
    environment's names as OpenSSL reads them: a path other than OpenSSL's own default was set there)."""
    paths = ssl.get_default_verify_paths()
    if paths.cafile and paths.cafile != paths.openssl_cafile:
        easy.setopt(pycurl.CAINFO, paths.cafile)
    elif paths.capath and paths.capath != paths.openssl_capath:
        easy.setopt(pycurl.CAPATH, paths.capath)
    else:
        import certifi

        easy.setopt(pycurl.CAINFO, certifi.where())
